#include "ref_scores.h"

#include <math.h>
#include <stdlib.h>

#include "../rules/dropout.h"
#include "../rules/score.h"
#include "ref_io.h"

fa_status fa__ref_head_alloc(fa__ref_head *hd, int64_t lq, int64_t lk) {
  const size_t n = (size_t)(lq > 0 ? lq : 1) * (size_t)(lk > 0 ? lk : 1);
  hd->s = (double *)malloc(n * sizeof(double));
  hd->capped = (double *)malloc(n * sizeof(double));
  hd->p = (double *)malloc(n * sizeof(double));
  hd->lse = (double *)malloc((size_t)(lq > 0 ? lq : 1) * sizeof(double));
  if (!hd->s || !hd->capped || !hd->p || !hd->lse) {
    fa__ref_head_free(hd);
    return FA_ERR_OUT_OF_MEMORY;
  }
  return FA_OK;
}

void fa__ref_head_free(fa__ref_head *hd) {
  free(hd->s);
  free(hd->capped);
  free(hd->p);
  free(hd->lse);
  hd->s = hd->capped = hd->p = hd->lse = NULL;
}

void fa__ref_head_compute(const fa__problem *p, int64_t b, int64_t h, fa__ref_head *hd) {
  hd->b = b;
  hd->h = h;
  hd->kvh = h / p->group;
  hd->seq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  hd->band = fa__seq_band_at(&hd->seq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
  const fa__seq *sq = &hd->seq;
  const int64_t lq = sq->lq, lk = sq->lk;
  const double slope = p->alibi_slopes ? (double)p->alibi_slopes[h] : 0.0;

  for (int64_t i = 0; i < lq; ++i) {
    double *srow = hd->s + i * lk, *crow = hd->capped + i * lk, *prow = hd->p + i * lk;
    double mx = -INFINITY;
    /* S = scale * Q K^T, then the transform, -inf where not visible */
    for (int64_t j = 0; j < lk; ++j) {
      crow[j] = 0.0;
      int vis = fa__band_visible(&hd->band, i, j);
      if (vis && p->mask.data) vis = fa__ref_load_bool(&p->mask, b, h, i, j);
      if (!vis) {
        srow[j] = -INFINITY;
        continue;
      }
      double dot = 0.0;
      for (int64_t d = 0; d < p->D; ++d)
        dot += fa__ref_load(&p->q, sq->bidx, h, sq->q_row0 + i, d) *
               fa__ref_load(&p->k, sq->bidx, hd->kvh, sq->k_row0 + j, d);
      crow[j] = fa__softcap_d(p->scale * dot, p->softcap);
      const double bias = p->bias.data ? fa__ref_load(&p->bias, b, h, i, j) : 0.0;
      srow[j] =
          fa__score_d(dot, p->scale, p->softcap, p->alibi_slopes != NULL, slope, fa__band_diag(&hd->band, i), j, bias);
      if (srow[j] > mx || isnan(srow[j])) mx = srow[j]; /* a NaN score makes the row NaN, as IEEE would */
    }
    /* P = softmax(S); a row with nothing visible is all zeros, lse = -inf.
     * A visible score of -inf (e.g. from a -inf bias) counts as masked; NaN
     * and +inf propagate as IEEE arithmetic makes them. */
    if (mx == -INFINITY) {
      for (int64_t j = 0; j < lk; ++j) prow[j] = 0.0;
      hd->lse[i] = -INFINITY;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < lk; ++j) {
      prow[j] = srow[j] == -INFINITY ? 0.0 : exp(srow[j] - mx);
      sum += prow[j];
    }
    for (int64_t j = 0; j < lk; ++j) prow[j] /= sum;
    hd->lse[i] = mx + log(sum);
  }
}

double fa__ref_dropout(const fa__problem *p, const fa__ref_head *hd, int64_t i, int64_t j) {
  if (!(p->dropout_p > 0)) return 1.0;
  const int64_t bh = hd->b * p->Hq + hd->h;
  return fa__dropout_keep(p->dropout_seed, p->dropout_offset, p->dropout_threshold, bh, i + p->q_offset,
                          j + p->k_offset)
             ? p->dropout_scale
             : 0.0;
}
