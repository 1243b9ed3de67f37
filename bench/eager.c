/* The eager baseline's three (forward) and five (backward) passes; the
 * products and the softmax row come from eager_kernels.c for the ISA. */
#include "eager.h"

#include <math.h>
#include <stdlib.h>

#include "peak.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define ROWS 64 /* rows per parallel task */

typedef struct ops {
  void (*gemm)(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t, float *,
               int64_t, int);
  void (*softmax_row)(const float *, float *, int64_t, int64_t);
} ops;

fa_cpu_isa fa_eager_resolve_isa(fa_cpu_isa isa) {
  if (isa == FA_ISA_AUTO) return fa_peak_best_isa();
  if (isa == FA_ISA_AVX512BF16 || isa == FA_ISA_AMX) isa = FA_ISA_AVX512; /* eager is f32: the FP32 kernels */
  return fa_peak_isa_present(isa) ? isa : FA_ISA_GENERIC;
}

static ops ops_for(fa_cpu_isa isa) {
  ops o = {fa_eager_gemm_generic, fa_eager_softmax_row_generic};
  switch (fa_eager_resolve_isa(isa)) {
#ifdef FA_PEAK_HAVE_AVX512
    case FA_ISA_AVX512: o.gemm = fa_eager_gemm_avx512, o.softmax_row = fa_eager_softmax_row_avx512; break;
#endif
#ifdef FA_PEAK_HAVE_AVX2
    case FA_ISA_AVX2: o.gemm = fa_eager_gemm_avx2, o.softmax_row = fa_eager_softmax_row_avx2; break;
#endif
    default: break;
  }
  return o;
}

static int grow(float **buf, size_t *cap, size_t n) {
  if (*cap >= n) return 0;
  free(*buf);
  *buf = (float *)aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  *cap = *buf ? n : 0;
  return *buf ? 0 : -1;
}

void fa_eager_ws_free(fa_eager_ws *ws) {
  free(ws->S), free(ws->P), free(ws->dP), free(ws->T);
  ws->S = ws->P = ws->dP = ws->T = NULL;
  ws->cap_s = ws->cap_p = ws->cap_dp = ws->cap_t = 0;
}

double fa_eager_forward_bytes(const fa_eager_problem *p) {
  return 2.0 * (double)p->B * (double)p->Hq * (double)p->Lq * (double)p->Lk * sizeof(float);
}

double fa_eager_backward_bytes(const fa_eager_problem *p) {
  return fa_eager_forward_bytes(p); /* P kept from the forward, dP (reused as dS) */
}

static int threads_of(const fa_eager_problem *p) {
#ifdef _OPENMP
  return p->threads > 0 ? p->threads : omp_get_max_threads();
#else
  (void)p;
  return 1;
#endif
}

/* T[bk][d][j] = X[bk][j][d]: rows of Xᵀ contiguous for the products. */
static void pack_transposed(const float *x, float *t, int64_t nbk, int64_t L, int64_t D, int nt) {
  (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t bk = 0; bk < nbk; ++bk)
    for (int64_t j = 0; j < L; ++j)
      for (int64_t d = 0; d < D; ++d) t[(bk * D + d) * L + j] = x[(bk * L + j) * D + d];
}

static int64_t visible(const fa_eager_problem *p, int64_t i) {
  return p->causal ? (i + 1 < p->Lk ? i + 1 : p->Lk) : p->Lk;
}

int fa_eager_forward(const fa_eager_problem *p, fa_eager_ws *ws, const float *q, const float *k, const float *v,
                     float *o) {
  const ops f = ops_for(p->isa);
  const int nt = threads_of(p);
  const int64_t BH = p->B * p->Hq, g = p->Hq / p->Hkv, Lq = p->Lq, Lk = p->Lk, D = p->D, Dv = p->Dv;
  const float scale = (float)(p->scale > 0 ? p->scale : 1.0 / sqrt((double)D));
  const size_t nS = (size_t)BH * (size_t)Lq * (size_t)Lk;
  if (grow(&ws->S, &ws->cap_s, nS) || grow(&ws->P, &ws->cap_p, nS) ||
      grow(&ws->T, &ws->cap_t, (size_t)(p->B * p->Hkv * D * Lk)))
    return -1;
  float *S = ws->S, *P = ws->P, *Kt = ws->T;
  pack_transposed(k, Kt, p->B * p->Hkv, Lk, D, nt);
  const int64_t nblk = (Lq + ROWS - 1) / ROWS;

  /* 1: S = scale Q Kᵀ, the whole [B, Hq, Lq, Lk] tensor; causal: -inf above the diagonal */
#pragma omp parallel for schedule(dynamic) num_threads(nt)
  for (int64_t t = 0; t < BH * nblk; ++t) {
    const int64_t bh = t / nblk, i0 = (t % nblk) * ROWS, rows = Lq - i0 < ROWS ? Lq - i0 : ROWS;
    const int64_t b = bh / p->Hq, kvh = (bh % p->Hq) / g;
    float *s = S + ((size_t)bh * Lq + i0) * Lk;
    f.gemm(rows, Lk, D, scale, q + (bh * Lq + i0) * D, D, 1, Kt + (b * p->Hkv + kvh) * D * Lk, Lk, s, Lk, 0);
    if (p->causal)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = visible(p, i0 + r); j < Lk; ++j) s[r * Lk + j] = -INFINITY;
  }
  /* 2: P = softmax(S), row by row */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t r = 0; r < BH * Lq; ++r) f.softmax_row(S + (size_t)r * Lk, P + (size_t)r * Lk, visible(p, r % Lq), Lk);
    /* 3: O = P V */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < BH * nblk; ++t) {
    const int64_t bh = t / nblk, i0 = (t % nblk) * ROWS, rows = Lq - i0 < ROWS ? Lq - i0 : ROWS;
    const int64_t b = bh / p->Hq, kvh = (bh % p->Hq) / g;
    f.gemm(rows, Dv, Lk, 1.0f, P + ((size_t)bh * Lq + i0) * Lk, Lk, 1, v + (b * p->Hkv + kvh) * Lk * Dv, Dv,
           o + (bh * Lq + i0) * Dv, Dv, 0);
  }
  return 0;
}

int fa_eager_backward(const fa_eager_problem *p, fa_eager_ws *ws, const float *q, const float *k, const float *v,
                      const float *o, const float *dout, float *dq, float *dk, float *dv) {
  const ops f = ops_for(p->isa);
  const int nt = threads_of(p);
  const int64_t BH = p->B * p->Hq, g = p->Hq / p->Hkv, Lq = p->Lq, Lk = p->Lk, D = p->D, Dv = p->Dv;
  const float scale = (float)(p->scale > 0 ? p->scale : 1.0 / sqrt((double)D));
  const size_t nS = (size_t)BH * (size_t)Lq * (size_t)Lk;
  if (!ws->P || ws->cap_p < nS) return -1; /* needs the forward's P */
  if (grow(&ws->dP, &ws->cap_dp, nS) || grow(&ws->T, &ws->cap_t, (size_t)(p->B * p->Hkv * Dv * Lk))) return -1;
  float *P = ws->P, *dS = ws->dP, *Vt = ws->T;
  pack_transposed(v, Vt, p->B * p->Hkv, Lk, Dv, nt);
  const int64_t nblk = (Lq + ROWS - 1) / ROWS, nkblk = (Lk + ROWS - 1) / ROWS;

  /* 1: dP = dO Vᵀ; 2: dS = P * (dP - rowsum(dO * O)), in place */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < BH * nblk; ++t) {
    const int64_t bh = t / nblk, i0 = (t % nblk) * ROWS, rows = Lq - i0 < ROWS ? Lq - i0 : ROWS;
    const int64_t b = bh / p->Hq, kvh = (bh % p->Hq) / g;
    float *ds = dS + ((size_t)bh * Lq + i0) * Lk;
    const float *pp = P + ((size_t)bh * Lq + i0) * Lk;
    f.gemm(rows, Lk, Dv, 1.0f, dout + (bh * Lq + i0) * Dv, Dv, 1, Vt + (b * p->Hkv + kvh) * Dv * Lk, Lk, ds, Lk, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const float *dor = dout + (bh * Lq + i0 + r) * Dv, *orow = o + (bh * Lq + i0 + r) * Dv;
      float di = 0;
      for (int64_t d = 0; d < Dv; ++d) di += dor[d] * orow[d];
      for (int64_t j = 0; j < Lk; ++j) ds[r * Lk + j] = pp[r * Lk + j] * (ds[r * Lk + j] - di);
    }
  }
  /* 3: dQ = scale dS K */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < BH * nblk; ++t) {
    const int64_t bh = t / nblk, i0 = (t % nblk) * ROWS, rows = Lq - i0 < ROWS ? Lq - i0 : ROWS;
    const int64_t b = bh / p->Hq, kvh = (bh % p->Hq) / g;
    f.gemm(rows, D, Lk, scale, dS + ((size_t)bh * Lq + i0) * Lk, Lk, 1, k + (b * p->Hkv + kvh) * Lk * D, D,
           dq + (bh * Lq + i0) * D, D, 0);
  }
  /* 4: dK = scale dSᵀ Q and 5: dV = Pᵀ dO, summed over the query heads of a kv head */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < p->B * p->Hkv * nkblk; ++t) {
    const int64_t bk = t / nkblk, j0 = (t % nkblk) * ROWS, rows = Lk - j0 < ROWS ? Lk - j0 : ROWS;
    const int64_t b = bk / p->Hkv, kvh = bk % p->Hkv;
    for (int64_t hh = 0; hh < g; ++hh) {
      const int64_t bh = b * p->Hq + kvh * g + hh;
      const size_t base = (size_t)bh * Lq * Lk + (size_t)j0;
      f.gemm(rows, D, Lq, scale, dS + base, 1, Lk, q + bh * Lq * D, D, dk + (bk * Lk + j0) * D, D, hh > 0);
      f.gemm(rows, Dv, Lq, 1.0f, P + base, 1, Lk, dout + bh * Lq * Dv, Dv, dv + (bk * Lk + j0) * Dv, Dv, hh > 0);
    }
  }
  return 0;
}
