/* ref forward: S and P materialized per (sequence, head), then
 * O = (P o keep / (1 - p)) V in float64. */
#include <math.h>

#include "ref_internal.h"
#include "ref_io.h"
#include "ref_scores.h"

/* Rows of the padded layout past the sequence's length: nothing visible. */
static void write_empty_row(const fa__problem *p, const fa__seq *sq, int64_t h, int64_t row) {
  for (int64_t d = 0; d < p->Dv; ++d) fa__ref_store(&p->o, sq->bidx, h, row, d, 0.0);
  if (p->lse.data) fa__ref_store(&p->lse, sq->bidx, h, row, 0, -INFINITY);
}

fa_status fa__ref_forward(const fa__problem *p, fa__err *err) {
  if (p->dtype == FA_F8_E4M3) return fa__ref_forward_fp8(p, err);
  fa__ref_head hd;
  if (fa__ref_head_alloc(&hd, p->Lq, p->Lk) != FA_OK) {
    fa__err_set(err, "ref: cannot allocate the %lld x %lld score matrices", (long long)p->Lq, (long long)p->Lk);
    return FA_ERR_OUT_OF_MEMORY;
  }
  for (int64_t b = 0; b < p->B; ++b) {
    for (int64_t h = 0; h < p->Hq; ++h) {
      fa__ref_head_compute(p, b, h, &hd);
      const fa__seq *sq = &hd.seq;
      for (int64_t i = 0; i < sq->lq; ++i) {
        const double *prow = hd.p + i * sq->lk;
        for (int64_t d = 0; d < p->Dv; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < sq->lk; ++j) {
            if (prow[j] == 0.0) continue; /* masked: takes part in nothing */
            acc += prow[j] * fa__ref_dropout(p, &hd, i, j) * fa__ref_load(&p->v, sq->bidx, hd.kvh, sq->k_row0 + j, d);
          }
          fa__ref_store(&p->o, sq->bidx, h, sq->q_row0 + i, d, acc);
        }
        if (p->lse.data) fa__ref_store(&p->lse, sq->bidx, h, sq->q_row0 + i, 0, hd.lse[i]);
      }
      if (!p->varlen)
        for (int64_t i = sq->lq; i < p->Lq; ++i) write_empty_row(p, sq, h, i);
    }
  }
  fa__ref_head_free(&hd);
  return FA_OK;
}
