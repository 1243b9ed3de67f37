/* Score transform of a visible element, in this order:
 *   s = scale * (q_i . k_j)
 *   if softcap > 0:  s = softcap * tanh(s / softcap)
 *   s += -alibi_slope[h] * |diag(i) - j|
 *   s += bias[b, h, i, j]
 * The dot product is the backend's; everything after it is here. */
#ifndef FA_RULES_SCORE_H
#define FA_RULES_SCORE_H

#include <math.h>
#include <stdint.h>

#include "hd.h"

/* Softcap applied to an already scaled score (double, for ref). */
FA_HD double fa__softcap_d(double s, double softcap) {
  return softcap > 0 ? softcap * tanh(s / softcap) : s;
}
FA_HD float fa__softcap_f(float s, float softcap) {
  return softcap > 0 ? softcap * tanhf(s / softcap) : s;
}

/* d(softcap(s))/ds, given t = softcap(s)/softcap = tanh(s/softcap): 1 - t^2. */
FA_HD double fa__softcap_grad_d(double capped, double softcap) {
  if (!(softcap > 0)) return 1.0;
  const double t = capped / softcap;
  return 1.0 - t * t;
}
FA_HD float fa__softcap_grad_f(float capped, float softcap) {
  if (!(softcap > 0)) return 1.0f;
  const float t = capped / softcap;
  return 1.0f - t * t;
}

/* The ALiBi term for distance |diag(i) - j|. */
FA_HD double fa__alibi_d(double slope, int64_t diag_i, int64_t j) {
  const int64_t d = diag_i - j;
  return -slope * (double)(d < 0 ? -d : d);
}
FA_HD float fa__alibi_f(float slope, int64_t diag_i, int64_t j) {
  const int64_t d = diag_i - j;
  return -slope * (float)(d < 0 ? -d : d);
}

/* The whole transform after the dot product, double precision. */
FA_HD double fa__score_d(double dot, double scale, double softcap, int has_alibi, double slope, int64_t diag_i,
                         int64_t j, double bias) {
  double s = fa__softcap_d(scale * dot, softcap);
  if (has_alibi) s += fa__alibi_d(slope, diag_i, j);
  return s + bias;
}

#endif
