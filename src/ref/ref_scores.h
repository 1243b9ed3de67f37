/* The eager part both ref passes share: for one (sequence, head), the full
 * score matrix S (lq x lk, -inf where masked), the softcapped value before
 * ALiBi/bias (for the softcap gradient), and P = softmax(S) row by row. */
#ifndef FA_REF_SCORES_H
#define FA_REF_SCORES_H

#include "../core/problem.h"
#include "../rules/layout.h"

typedef struct fa__ref_head {
  int64_t b, h, kvh;
  fa__seq seq;
  fa__band band;
  double *s;      /* [lq * lk] final scores, -inf where not visible */
  double *capped; /* [lq * lk] scale*q.k after softcap (before ALiBi and bias) */
  double *p;      /* [lq * lk] softmax probabilities (before dropout) */
  double *lse;    /* [lq] log-sum-exp, -inf for rows with nothing visible */
} fa__ref_head;

/* Allocates the matrices for the largest sequence; FA_ERR_OUT_OF_MEMORY if
 * they do not fit. */
fa_status fa__ref_head_alloc(fa__ref_head *hd, int64_t lq, int64_t lk);
void fa__ref_head_free(fa__ref_head *hd);

/* Fills hd for sequence b, query head h. */
void fa__ref_head_compute(const fa__problem *p, int64_t b, int64_t h, fa__ref_head *hd);

/* Dropout multiplier of element (i, j): 0 or 1/(1-p) (1 without dropout). */
double fa__ref_dropout(const fa__problem *p, const fa__ref_head *hd, int64_t i, int64_t j);

#endif
