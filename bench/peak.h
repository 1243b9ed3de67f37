/* What this machine can do at best: FP32 FMA throughput per instruction set
 * and thread count (and, for avx512bf16, the bf16 rate of vdpbf16ps), and
 * memory bandwidth, measured in-process (never read
 * from a file: a laptop on battery and the same laptop plugged in differ).
 * `flashattn info --peak` prints it; bench and explain divide by it. */
#ifndef FA_BENCH_PEAK_H
#define FA_BENCH_PEAK_H

#include <stdint.h>
#include <stdio.h>

#include "flashattn.h"

/* Per-ISA micro-kernels (peak_generic.c, peak_avx2.c, peak_avx512.c, each
 * compiled with only its own ISA's flags): iters rounds of independent
 * multiply-adds on enough accumulators to hide the FMA latency. Return the
 * floating-point operations done. */
double fa_peak_kernel_generic(int64_t iters);
double fa_peak_kernel_avx2(int64_t iters);
double fa_peak_kernel_avx512(int64_t iters);
/* vdpbf16ps: 64 FLOP per instruction (16 lanes x 2 bf16 multiply-adds). */
double fa_peak_kernel_avx512bf16(int64_t iters);
/* tdpbf16ps: 16384 FLOP per instruction (16 x 16 x 32 bf16 multiply-adds)
 * (peak_amx.c); fa_peak_amx_permit() asks Linux for the tile data first. */
double fa_peak_kernel_amx(int64_t iters);
int fa_peak_amx_permit(void);

/* Threads whose CPU time one measurement keeps (more run, uncounted). */
#define FA_PEAK_MAX_THREADS 1024

typedef struct fa_peak_isa {
  int measured;      /* 0 if this CPU (or build) lacks the ISA */
  double gflops_1t;  /* one thread */
  double gflops_all; /* all threads */
  int threads_ran;   /* threads that really ran the all-threads measurement */
  /* the least share of the timed run's wall time that one of its threads
   * spent on a CPU (1: each had a core throughout). Below 0.9, other work
   * held the cores: the figure is then each thread's rounds over its own
   * CPU time, summed */
  double on_cpu_1t, on_cpu;
} fa_peak_isa;

typedef struct fa_peak {
  int threads; /* "all threads": OpenMP's count (or the one asked) */
  /* indexed by fa_cpu_isa; [FA_ISA_AUTO] unused. [FA_ISA_AVX512BF16] and
   * [FA_ISA_AMX] are bf16 rates (vdpbf16ps, tdpbf16ps), which only bf16
   * products reach: f32 work on those ISAs runs at the [FA_ISA_AVX512]
   * rate (fa_peak_gflops_for_dtype). */
  fa_peak_isa isa[FA_ISA_AMX + 1];
  double triad_gbs_1t; /* STREAM triad a = b + s*c, one thread */
  double copy_gbs;     /* STREAM copy c = a, all threads */
  double triad_gbs;    /* STREAM triad, all threads */
  int have_flops, have_bw;
} fa_peak;

/* Does this CPU (and this build) have the instruction set? Independent of
 * the cpu backend being built. */
int fa_peak_isa_present(fa_cpu_isa isa);
/* The best FP32 ISA present (avx512bf16 adds bf16 products only). */
fa_cpu_isa fa_peak_best_isa(void);

/* Measures FLOP/s of every ISA present (about 0.1 s each); threads 0 = all
 * of OpenMP's. progress: a line on stderr per measurement. */
void fa_peak_measure_flops(fa_peak *p, int threads, int progress);
/* Measures bandwidth with arrays of array_bytes each (0 = 4x the L3, at
 * least 64 MiB). */
void fa_peak_measure_bandwidth(fa_peak *p, int threads, size_t array_bytes, int progress);

/* The peak for code running `isa` on `threads` threads: the 1-thread figure
 * for 1, the all-threads figure scaled down for fewer. 0 if unmeasured. */
double fa_peak_gflops_for(const fa_peak *p, fa_cpu_isa isa, int threads);
/* The same for work whose products are in dtype dt (bf16_products: the
 * code runs them on vdpbf16ps or AMX): the bf16 rate for bf16 products on
 * avx512bf16 and amx, else the FP32 rate of the ISA (avx512 for those). */
double fa_peak_gflops_for_dtype(const fa_peak *p, fa_cpu_isa isa, int bf16_products, int threads);

/* The table `info --peak` prints (peak_report.c). */
void fa_peak_print(FILE *f, const fa_peak *p);

#endif
