/* The decode kernels' prefetch of the next tile (kernels.h's pf, pf_keep),
 * one line or one row at a time: shared by the vector kernels of
 * kernels_decode_simd.h and the bf16 pair kernels of
 * kernels_decode_avx512bf16.c. */
#ifndef FA_CPU_KERNELS_DECODE_PF_H
#define FA_CPU_KERNELS_DECODE_PF_H

#define DPF_INLINE static inline __attribute__((always_inline))

/* A line of the next tile (kernels.h's pf_keep). 1: into every level
 * (locality 3, prefetcht0). 0: rows read once, non-temporal (locality 0,
 * prefetchnta): on AMD Zen an nta line goes to L1 only, where a T0 line
 * also fills L2 and later leaves it for the L3 (a victim cache); measured
 * on Zen 5, 2 threads, bf16 GQA 32/8 at 8192 keys: 0.78-0.83 ms a call
 * against 0.93-1.02 with T0. The caller then keeps a tile small enough
 * that this tile and the next fit in L1. 2: into L2, not L1 (locality 2,
 * prefetcht1): what cpu_decode.c asks for instead of 0 on Intel, where nta
 * lines skip L2 and those rows streamed at a third of the triad (see
 * there). */
DPF_INLINE void ds_pf(const char *p, const int keep) {
  if (keep == 1)
    __builtin_prefetch(p, 0, 3);
  else if (keep == 2)
    __builtin_prefetch(p, 0, 2);
  else
    __builtin_prefetch(p, 0, 0);
}

DPF_INLINE void ds_prefetch_row(const char *p, int bytes, const int keep) {
  for (int b = 0; b < bytes; b += 64) ds_pf(p + b, keep);
}

#endif
