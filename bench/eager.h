/* The eager baseline: attention as the textbook (and PyTorch's math path)
 * writes it, in f32 on the CPU. Three steps, each a full pass through
 * memory: S = scale QKᵀ as a [B, Hq, Lq, Lk] tensor, P = softmax(S) as
 * another, O = P V. The backward keeps P and materializes dP (= dS) too.
 * It lives in bench/ to show what the library's tiling saves; it is not a
 * backend. Plain and causal (top-left) attention, GQA, D != Dv; contiguous
 * [B, H, L, D] f32 tensors. */
#ifndef FA_BENCH_EAGER_H
#define FA_BENCH_EAGER_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

/* Per-ISA products (eager_kernels.c compiled once per ISA):
 * C[M x N] (+)= alpha * A * B, A(r, k) = A[r*a_rs + k*a_cs] (so Aᵀ is a
 * stride swap), B row-major with leading dim ldb, C with ldc. */
#define FA_EAGER_DECLARE(isa)                                                                                        \
  void fa_eager_gemm_##isa(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs, \
                           const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate);                      \
  void fa_eager_softmax_row_##isa(const float *s, float *p, int64_t nvis, int64_t n);
FA_EAGER_DECLARE(generic)
FA_EAGER_DECLARE(avx2)
FA_EAGER_DECLARE(avx512)

typedef struct fa_eager_problem {
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  int causal;     /* top-left aligned */
  double scale;   /* 0 = 1/sqrt(D) */
  fa_cpu_isa isa; /* AUTO = the best this CPU has */
  int threads;    /* 0 = OpenMP's default */
} fa_eager_problem;

/* The materialized tensors, kept between calls like a caching allocator
 * keeps them: the first call allocates (and pays the page faults), later
 * calls reuse. */
typedef struct fa_eager_ws {
  float *S, *P, *dP, *T; /* T: packed Kᵀ or Vᵀ */
  size_t cap_s, cap_p, cap_dp, cap_t;
} fa_eager_ws;

void fa_eager_ws_free(fa_eager_ws *ws);

/* The ISA eager will use for isa (AUTO resolved), or GENERIC if absent. */
fa_cpu_isa fa_eager_resolve_isa(fa_cpu_isa isa);
/* Bytes of S and P (forward) or of P and dP (backward) it holds. */
double fa_eager_forward_bytes(const fa_eager_problem *p);
double fa_eager_backward_bytes(const fa_eager_problem *p);

/* O = softmax(scale QKᵀ) V; P stays in ws->P for the backward. 0, or -1
 * when memory runs out. */
int fa_eager_forward(const fa_eager_problem *p, fa_eager_ws *ws, const float *q, const float *k, const float *v,
                     float *o);
/* dQ, dK, dV from ws->P of the forward just before, and O, dO. */
int fa_eager_backward(const fa_eager_problem *p, fa_eager_ws *ws, const float *q, const float *k, const float *v,
                      const float *o, const float *dout, float *dq, float *dk, float *dv);

#endif
