/* Rotary position embedding (RoPE) as FlashAttention's kv-cache call applies
 * it: the first rot dims of a row x at position pos, with c = cos[pos][t],
 * s = sin[pos][t] (tables [len][rot/2]), t < rot/2, rotate the pairs
 *   interleaved (GPT-J):     (x[2t], x[2t + 1])
 *   not interleaved (NeoX):  (x[t],  x[t + rot/2])
 * as  x1' = x1 c - x2 s,  x2' = x1 s + x2 c.  Dims past rot are unchanged. */
#ifndef FA_RULES_ROTARY_H
#define FA_RULES_ROTARY_H

#include <stdint.h>

#include "hd.h"

FA_HD void fa__rotary_d(double *x, int64_t rot, int interleaved, const float *cos_row, const float *sin_row) {
  const int64_t half = rot / 2;
  for (int64_t t = 0; t < half; ++t) {
    const int64_t a = interleaved ? 2 * t : t, b = interleaved ? 2 * t + 1 : t + half;
    const double c = cos_row[t], s = sin_row[t], x1 = x[a], x2 = x[b];
    x[a] = x1 * c - x2 * s;
    x[b] = x1 * s + x2 * c;
  }
}

FA_HD void fa__rotary_f(float *x, int64_t rot, int interleaved, const float *cos_row, const float *sin_row) {
  const int64_t half = rot / 2;
  for (int64_t t = 0; t < half; ++t) {
    const int64_t a = interleaved ? 2 * t : t, b = interleaved ? 2 * t + 1 : t + half;
    const float c = cos_row[t], s = sin_row[t], x1 = x[a], x2 = x[b];
    x[a] = x1 * c - x2 * s;
    x[b] = x1 * s + x2 * c;
  }
}

#endif
