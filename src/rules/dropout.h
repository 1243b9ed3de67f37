/* Dropout: the keep/drop decision for element (b, h, i, j), identical on
 * every backend, so that ref reproduces a GPU run bit for bit.
 *
 * Generator: Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
 *   key     = { seed & 0xffffffff, seed >> 32 }
 *   counter = { j >> 2, i, b * H + h, offset }      (H = query heads)
 *   r       = philox(counter, key)[j & 3]           (one call serves 4 columns)
 * Threshold: keep = (uint32_t)min(floor((1 - p) * 2^32), 2^32 - 1)
 *   (computed in double, which every backend evaluates identically),
 *   element kept  <=>  r < keep.
 * Kept probabilities are scaled by 1 / (1 - p). With p = 0 nothing here is
 * called. b, i, j are the sequence index and the positions inside it, also
 * in the packed (varlen) layout. */
#ifndef FA_RULES_DROPOUT_H
#define FA_RULES_DROPOUT_H

#include <stdint.h>

#include "hd.h"

#define FA__PHILOX_M0 0xD2511F53u
#define FA__PHILOX_M1 0xCD9E8D57u
#define FA__PHILOX_W0 0x9E3779B9u
#define FA__PHILOX_W1 0xBB67AE85u

typedef struct fa__u32x4 {
  uint32_t v[4];
} fa__u32x4;

FA_HD void fa__philox_round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = (uint64_t)FA__PHILOX_M0 * c[0];
  const uint64_t p1 = (uint64_t)FA__PHILOX_M1 * c[2];
  const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  const uint32_t n0 = hi1 ^ c[1] ^ k[0];
  const uint32_t n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

/* Philox4x32-10 of counter ctr under key. */
FA_HD fa__u32x4 fa__philox4x32_10(fa__u32x4 ctr, uint32_t key0, uint32_t key1) {
  uint32_t k[2] = {key0, key1};
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += FA__PHILOX_W0;
      k[1] += FA__PHILOX_W1;
    }
    fa__philox_round(ctr.v, k);
  }
  return ctr;
}

/* The integer threshold for dropout probability p in (0, 1). */
FA_HD uint32_t fa__dropout_threshold(double p) {
  const double keep = (1.0 - p) * 4294967296.0;
  if (keep >= 4294967295.0) return 4294967295u;
  if (keep <= 0.0) return 0u;
  return (uint32_t)keep; /* truncation = floor for positive values */
}

/* The four random words that decide columns 4*(j>>2) .. 4*(j>>2)+3. */
FA_HD fa__u32x4 fa__dropout_words(uint64_t seed, uint32_t offset, int64_t bh, int64_t i, int64_t j) {
  fa__u32x4 c;
  c.v[0] = (uint32_t)((uint64_t)j >> 2);
  c.v[1] = (uint32_t)i;
  c.v[2] = (uint32_t)bh;
  c.v[3] = offset;
  return fa__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 1 if element (b, h, i, j) is kept; bh = b * num_heads + h. */
FA_HD int fa__dropout_keep(uint64_t seed, uint32_t offset, uint32_t threshold, int64_t bh, int64_t i, int64_t j) {
  const fa__u32x4 r = fa__dropout_words(seed, offset, bh, i, j);
  return r.v[j & 3] < threshold;
}

#endif
