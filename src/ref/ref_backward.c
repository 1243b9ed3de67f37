/* ref backward, the textbook chain rule in float64 on the materialized P:
 *   Z   = keep / (1 - p)                  (1 without dropout)
 *   dV  = (P o Z)^T dO                    (summed over the query heads of a group)
 *   dP  = (dO V^T) o Z
 *   dS  = P o (dP - rowsum(P o dP))       (rowsum(P o dP) = rowsum(dO o O))
 *   dBias = dS                            (summed over bias's broadcast dims)
 *   dS0 = dS o softcap'(.)                (gradient before the softcap)
 *   dQ  = scale dS0 K,  dK = scale dS0^T Q
 * It recomputes P from q, k, v itself: o and lse are not read, so that the
 * result is a pure function of the inputs (finite differences check it). */
#include <stdlib.h>
#include <string.h>

#include "../rules/score.h"
#include "ref_internal.h"
#include "ref_io.h"
#include "ref_scores.h"

typedef struct grads {
  double *dk, *dv; /* [lk * D], [lk * Dv] for one (sequence, kv head) */
  double *dp;      /* [lk] one row of dP */
} grads;

static fa_status run(const fa__problem *p, fa__ref_head *hd, grads *g) {
  if (p->dbias.data) fa__ref_zero(&p->dbias);
  for (int64_t b = 0; b < p->B; ++b) {
    for (int64_t kvh = 0; kvh < p->Hkv; ++kvh) {
      const fa__seq sq0 = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
      memset(g->dk, 0, (size_t)(sq0.lk > 0 ? sq0.lk : 1) * (size_t)p->D * sizeof(double));
      memset(g->dv, 0, (size_t)(sq0.lk > 0 ? sq0.lk : 1) * (size_t)p->Dv * sizeof(double));
      for (int64_t h = kvh * p->group; h < (kvh + 1) * p->group; ++h) {
        fa__ref_head_compute(p, b, h, hd);
        const fa__seq *sq = &hd->seq;
        const int64_t lk = sq->lk;
        for (int64_t i = 0; i < sq->lq; ++i) {
          const double *prow = hd->p + i * lk, *crow = hd->capped + i * lk;
          /* dP row and D_i = sum_j P_ij dP_ij */
          double di = 0.0;
          for (int64_t j = 0; j < lk; ++j) {
            g->dp[j] = 0.0;
            if (prow[j] == 0.0) continue;
            const double z = fa__ref_dropout(p, hd, i, j);
            double dot = 0.0;
            for (int64_t d = 0; d < p->Dv; ++d) {
              const double dout = fa__ref_load(&p->dout, sq->bidx, h, sq->q_row0 + i, d);
              dot += dout * fa__ref_load(&p->v, sq->bidx, kvh, sq->k_row0 + j, d);
              g->dv[j * p->Dv + d] += prow[j] * z * dout;
            }
            g->dp[j] = dot * z;
            di += prow[j] * g->dp[j];
          }
          /* dS, dBias, dQ, dK */
          for (int64_t d = 0; d < p->D; ++d) {
            double dq = 0.0;
            for (int64_t j = 0; j < lk; ++j) {
              if (prow[j] == 0.0) continue;
              const double ds = prow[j] * (g->dp[j] - di);
              const double ds0 = ds * fa__softcap_grad_d(crow[j], p->softcap) * p->scale;
              dq += ds0 * fa__ref_load(&p->k, sq->bidx, kvh, sq->k_row0 + j, d);
              g->dk[j * p->D + d] += ds0 * fa__ref_load(&p->q, sq->bidx, h, sq->q_row0 + i, d);
            }
            fa__ref_store(&p->dq, sq->bidx, h, sq->q_row0 + i, d, dq);
          }
          if (p->dbias.data)
            for (int64_t j = 0; j < lk; ++j) {
              if (prow[j] == 0.0) continue;
              const double ds = prow[j] * (g->dp[j] - di);
              fa__ref_store(&p->dbias, b, h, i, j, fa__ref_load(&p->dbias, b, h, i, j) + ds);
            }
        }
        if (!p->varlen) /* padded query rows: nothing flows */
          for (int64_t i = sq->lq; i < p->Lq; ++i)
            for (int64_t d = 0; d < p->D; ++d) fa__ref_store(&p->dq, sq->bidx, h, i, d, 0.0);
      }
      for (int64_t j = 0; j < sq0.lk; ++j) {
        for (int64_t d = 0; d < p->D; ++d) fa__ref_store(&p->dk, sq0.bidx, kvh, sq0.k_row0 + j, d, g->dk[j * p->D + d]);
        for (int64_t d = 0; d < p->Dv; ++d)
          fa__ref_store(&p->dv, sq0.bidx, kvh, sq0.k_row0 + j, d, g->dv[j * p->Dv + d]);
      }
      if (!p->varlen) /* padded key rows */
        for (int64_t j = sq0.lk; j < p->Lk; ++j) {
          for (int64_t d = 0; d < p->D; ++d) fa__ref_store(&p->dk, sq0.bidx, kvh, j, d, 0.0);
          for (int64_t d = 0; d < p->Dv; ++d) fa__ref_store(&p->dv, sq0.bidx, kvh, j, d, 0.0);
        }
    }
  }
  return FA_OK;
}

fa_status fa__ref_backward(const fa__problem *p, fa__err *err) {
  fa__ref_head hd;
  grads g;
  const size_t lk = (size_t)(p->Lk > 0 ? p->Lk : 1);
  g.dk = (double *)malloc(lk * (size_t)p->D * sizeof(double));
  g.dv = (double *)malloc(lk * (size_t)p->Dv * sizeof(double));
  g.dp = (double *)malloc(lk * sizeof(double));
  fa_status st = FA_OK;
  if (!g.dk || !g.dv || !g.dp || fa__ref_head_alloc(&hd, p->Lq, p->Lk) != FA_OK) {
    fa__err_set(err, "ref: cannot allocate the %lld x %lld score matrices", (long long)p->Lq, (long long)p->Lk);
    st = FA_ERR_OUT_OF_MEMORY;
  } else {
    st = run(p, &hd, &g);
    fa__ref_head_free(&hd);
  }
  free(g.dk);
  free(g.dv);
  free(g.dp);
  return st;
}
