/* The arithmetic of attention performance, as pure functions so that tests
 * can pin them to the figures of the literature (cli/test_formulas.c):
 * FLOP counts (the standard count every paper reports) and the bytes that
 * eager and tiled attention move between memory and the compute units. */
#ifndef FA_BENCH_FORMULAS_H
#define FA_BENCH_FORMULAS_H

#include <stddef.h>
#include <stdint.h>

/* Forward FLOPs: two matrix products of 2·Lq·Lk·D and 2·Lq·Lk·Dv per head,
 * i.e. 4·B·H·Lq·Lk·D when Dv = D; halved when causal (about half the
 * scores are visible). Softmax exponentials are not counted, as usual. */
double fa_flops_forward(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, int causal);
/* Backward FLOPs: 2.5x the forward (five products instead of two). */
double fa_flops_backward(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, int causal);

/* Bytes of a [d0, d1, d2] tensor of elem-byte elements. */
double fa_bytes_tensor(int64_t d0, int64_t d1, int64_t d2, size_t elem);

/* What one attention forward moves to and from memory. */
typedef struct fa_io_problem {
  int64_t B, H, L, D, Dv; /* Lq = Lk = L */
  size_t elem;            /* bytes per element of Q, K, V, O, S, P */
  int block_q, block_k;   /* tiles of the tiled version */
  int causal;
} fa_io_problem;

typedef struct fa_io_counts {
  double read_qkv;                         /* Q once, K and V once (eager) or once per Q tile (tiled) */
  double write_o;                          /* O */
  double write_lse;                        /* tiled: the f32 log-sum-exp per row, kept for the backward */
  double write_s, read_s, write_p, read_p; /* eager only: the L x L matrices */
  double total;                            /* all of the above */
  double flops;                            /* fa_flops_forward */
  double intensity;                        /* flops / total bytes */
} fa_io_counts;

/* Eager (textbook) attention: S = scale·QKᵀ written, read back by softmax,
 * P written, read back by P·V: 2·L² elements written and 2·L² read per
 * head, on top of reading Q, K, V and writing O. Causal or not, S and P are
 * full L x L (the mask is applied to the stored matrix). */
void fa_io_eager(const fa_io_problem *p, fa_io_counts *out);
/* Tiled (FlashAttention) forward: Q read once, K and V read once per Q tile
 * (ceil(L / block_q) times; when causal only the key tiles at or before the
 * diagonal), O and LSE written; S and P live in on-chip tiles only. */
void fa_io_tiled(const fa_io_problem *p, fa_io_counts *out);

/* Roofline: the FLOP/s attainable at arithmetic intensity I (FLOP/byte)
 * on a machine with peak GFLOP/s and bandwidth GB/s: min(peak, I·bw). */
double fa_roofline_gflops(double intensity, double peak_gflops, double bw_gbs);

#endif
