/* ref's FP8 (e4m3) forward: the rule of docs/semantics.md, "FP8 (e4m3)",
 * in float64. Scores are exact (e4m3 products and their sums are exact in
 * float64 up to D = 2^20), then the online softmax runs over key blocks of
 * block_k keys in the kernel's order, and P is rounded to e4m3 before P V,
 * exactly as the cuda kernel rounds it; l sums the unrounded P. What is
 * left between ref and the kernel is f32 arithmetic (exp2, sums). */
#include <math.h>
#include <stdlib.h>

#include "../rules/fp8.h"
#include "ref_internal.h"
#include "ref_io.h"
#include "ref_scores.h"

/* descale[b, kvh], 1 when absent (broadcast dims have stride 0). */
static double descale(const fa_tensor *t, int64_t b, int64_t kvh) {
  return t->data ? fa__ref_load(t, b, kvh, 0, 0) : 1.0;
}

/* One row: srow (lk scores, -inf where not visible) -> o row, lse. */
static void fp8_row(const fa__problem *p, const fa__ref_head *hd, const double *srow, int64_t i, int64_t bk, double vd,
                    double *acc) {
  const fa__seq *sq = &hd->seq;
  const int64_t lk = sq->lk;
  double m = -INFINITY, l = 0.0;
  for (int64_t d = 0; d < p->Dv; ++d) acc[d] = 0.0;
  for (int64_t j0 = 0; j0 < lk; j0 += bk) {
    const int64_t j1 = j0 + bk < lk ? j0 + bk : lk;
    double mnew = m;
    for (int64_t j = j0; j < j1; ++j)
      if (srow[j] > mnew || isnan(srow[j])) mnew = srow[j];
    if (mnew == -INFINITY) continue;    /* nothing visible yet */
    const double alpha = exp(m - mnew); /* 0 while m = -inf */
    l *= alpha;
    for (int64_t d = 0; d < p->Dv; ++d) acc[d] *= alpha;
    for (int64_t j = j0; j < j1; ++j) {
      if (srow[j] == -INFINITY) continue;
      const double pj = ldexp(exp(srow[j] - mnew), FA__FP8_P_SHIFT);
      l += pj;                              /* the row sum takes P unrounded (FlashAttention 3) */
      const double p8 = fa__e4m3_round(pj); /* P V takes it in e4m3 */
      for (int64_t d = 0; d < p->Dv; ++d) acc[d] += p8 * fa__ref_load(&p->v, sq->bidx, hd->kvh, sq->k_row0 + j, d);
    }
    m = mnew;
  }
  const int64_t row = sq->q_row0 + i;
  if (m == -INFINITY) {
    for (int64_t d = 0; d < p->Dv; ++d) fa__ref_store(&p->o, sq->bidx, hd->h, row, d, 0.0);
    if (p->lse.data) fa__ref_store(&p->lse, sq->bidx, hd->h, row, 0, -INFINITY);
    return;
  }
  for (int64_t d = 0; d < p->Dv; ++d) fa__ref_store(&p->o, sq->bidx, hd->h, row, d, acc[d] * vd / l);
  if (p->lse.data) fa__ref_store(&p->lse, sq->bidx, hd->h, row, 0, m + log(l) - FA__FP8_P_SHIFT * log(2.0));
}

fa_status fa__ref_forward_fp8(const fa__problem *p, fa__err *err) {
  fa__ref_head hd;
  double *acc = (double *)malloc((size_t)p->Dv * sizeof(double));
  if (!acc || fa__ref_head_alloc(&hd, p->Lq, p->Lk) != FA_OK) {
    free(acc);
    fa__err_set(err, "ref: cannot allocate the %lld x %lld score matrices", (long long)p->Lq, (long long)p->Lk);
    return FA_ERR_OUT_OF_MEMORY;
  }
  const int64_t bk = p->block_k > 0 ? p->block_k : FA__FP8_BLOCK_K;
  fa__problem ps = *p; /* the same problem with the q and k descales folded into scale */
  for (int64_t b = 0; b < p->B; ++b) {
    for (int64_t h = 0; h < p->Hq; ++h) {
      const int64_t kvh = h / p->group;
      ps.scale = p->scale * descale(&p->q_descale, b, kvh) * descale(&p->k_descale, b, kvh);
      fa__ref_head_compute(&ps, b, h, &hd);
      const double vd = descale(&p->v_descale, b, kvh);
      for (int64_t i = 0; i < hd.seq.lq; ++i) fp8_row(p, &hd, hd.s + i * hd.seq.lk, i, bk, vd, acc);
      if (!p->varlen)
        for (int64_t i = hd.seq.lq; i < p->Lq; ++i) {
          for (int64_t d = 0; d < p->Dv; ++d) fa__ref_store(&p->o, b, h, i, d, 0.0);
          if (p->lse.data) fa__ref_store(&p->lse, b, h, i, 0, -INFINITY);
        }
    }
  }
  fa__ref_head_free(&hd);
  free(acc);
  return FA_OK;
}
