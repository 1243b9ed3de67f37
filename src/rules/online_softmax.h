/* The online softmax (Milakov & Gimelshein 2018; FlashAttention): a row's
 * softmax-weighted sum built one tile of scores at a time, keeping only
 *   m   the running maximum of the scores seen,
 *   l   the running sum of exp(s - m),
 *   acc the running sum of exp(s - m) * v (unnormalized output).
 * A new tile with maximum m_t rescales the old state by exp(m - m') where
 * m' = max(m, m_t). At the end o = acc / l and lse = m + log(l).
 * A row that has seen nothing visible keeps m = -inf, l = 0: o = 0 and
 * lse = -inf by definition (DESIGN.md), never 0/0.
 *
 * The scalar form here is the definition; the tiled backends vectorize it
 * and `flashattn trace` prints it step by step. */
#ifndef FA_RULES_ONLINE_SOFTMAX_H
#define FA_RULES_ONLINE_SOFTMAX_H

#include <math.h>

#include "hd.h"

typedef struct fa__osm {
  double m; /* running max (-inf: nothing seen) */
  double l; /* running sum of exp(s - m) */
} fa__osm;

FA_HD fa__osm fa__osm_init(void) {
  fa__osm s;
  s.m = -INFINITY;
  s.l = 0.0;
  return s;
}

/* Folds one tile of n scores into the state. Returns the factor the old
 * accumulator must be multiplied by (exp(m_old - m_new); 1 if the max did
 * not move, 0 if nothing had been seen), and writes p[t] = exp(s[t] - m_new)
 * for the accumulator update acc = acc * factor + sum_t p[t] * v[t].
 * -inf scores are masked elements: p = 0. */
FA_HD double fa__osm_update(fa__osm *st, const double *s, int n, double *p) {
  double mt = -INFINITY;
  for (int t = 0; t < n; ++t) mt = s[t] > mt ? s[t] : mt;
  const double mnew = mt > st->m ? mt : st->m;
  if (mnew == -INFINITY) { /* still nothing visible */
    for (int t = 0; t < n; ++t) p[t] = 0.0;
    return 1.0;
  }
  const double factor = st->m == -INFINITY ? 0.0 : exp(st->m - mnew);
  double sum = 0.0;
  for (int t = 0; t < n; ++t) {
    p[t] = s[t] == -INFINITY ? 0.0 : exp(s[t] - mnew);
    sum += p[t];
  }
  st->l = st->l * factor + sum;
  st->m = mnew;
  return factor;
}

/* Merges two partial states (as split-K / two halves of a row would):
 * returns the merged state and the weights for each side's accumulator. */
FA_HD fa__osm fa__osm_merge(fa__osm a, fa__osm b, double *wa, double *wb) {
  fa__osm r;
  r.m = a.m > b.m ? a.m : b.m;
  if (r.m == -INFINITY) {
    *wa = *wb = 0.0;
    r.l = 0.0;
    return r;
  }
  *wa = a.m == -INFINITY ? 0.0 : exp(a.m - r.m);
  *wb = b.m == -INFINITY ? 0.0 : exp(b.m - r.m);
  r.l = a.l * *wa + b.l * *wb;
  return r;
}

/* Final normalizer 1/l (0 when nothing was visible) and lse. */
FA_HD double fa__osm_inv_l(const fa__osm *st) {
  return st->l > 0 ? 1.0 / st->l : 0.0;
}
FA_HD double fa__osm_lse(const fa__osm *st) {
  return st->l > 0 ? st->m + log(st->l) : -INFINITY;
}

/* The merge in (o, lse) form: n partial results over disjoint key sets, each
 * a normalized o_i with its lse_i, are the states (m = lse_i, l = 1) folded
 * left to right with fa__osm_merge (l = 0 for lse_i = -inf: nothing seen).
 * Returns the merged lse and writes w[i] = exp(lse_i - lse), the weight of
 * o_i in o = sum_i w[i] o_i (all 0, lse = -inf, when no part saw anything).
 * fa_merge_states, split-KV and the tests all merge through this. */
FA_HD double fa__osm_merge_lse(const double *lse, int n, double *w) {
  fa__osm r = fa__osm_init();
  for (int i = 0; i < n; ++i) {
    fa__osm part;
    part.m = lse[i];
    part.l = lse[i] == -INFINITY ? 0.0 : 1.0;
    double wa, wb;
    r = fa__osm_merge(r, part, &wa, &wb);
    for (int t = 0; t < i; ++t) w[t] *= wa;
    w[i] = wb;
  }
  const double inv = fa__osm_inv_l(&r);
  for (int i = 0; i < n; ++i) w[i] *= inv;
  return fa__osm_lse(&r);
}

#endif
