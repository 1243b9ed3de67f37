/* The decode kernels in portable C (the contract is in kernels.h: one tile
 * of nr query rows against bc keys read straight from the cache). This is
 * the generic table's version and the reference the vector kernels of
 * kernels_decode_simd.h are tested against (through the shared suite): the
 * same three steps, one element at a time. */
#ifndef FA_CPU_KERNELS_DECODE_H
#define FA_CPU_KERNELS_DECODE_H

#include <math.h>
#include <stddef.h>

#include "flashattn.h"
#include "rules/half.h"

/* Element d of a row of dtype dt as f32 (exact for all three). */
static inline float fa__dec_elem(const void *row, fa_dtype dt, int d) {
  if (dt == FA_F32) return ((const float *)row)[d];
  const uint16_t h = ((const uint16_t *)row)[d];
  return dt == FA_BF16 ? fa__bf16_to_f32(h) : fa__f16_to_f32(h);
}

/* Each dot product in 8 interleaved partial sums added as a fixed tree, so
 * a compiler may vectorize it without changing the result. */
static void fa__dec_scores_c(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                             ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf, ptrdiff_t ldpf,
                             int npf, int pf_keep) {
  (void)pf, (void)ldpf, (void)npf, (void)pf_keep;
  for (int j = 0; j < bc; ++j) {
    const char *kj = (const char *)k + (ptrdiff_t)j * ldk;
    for (int r = 0; r < nr; ++r) {
      const float *qr = q + (ptrdiff_t)r * ldq;
      float a[8] = {0};
      int d = 0;
      for (; d + 8 <= D; d += 8)
        for (int t = 0; t < 8; ++t) a[t] += qr[d + t] * fa__dec_elem(kj, kdt, d + t);
      for (; d < D; ++d) a[d % 8] += qr[d] * fa__dec_elem(kj, kdt, d);
      s[(ptrdiff_t)r * lds + j] = scale * (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])));
    }
  }
}

static int fa__dec_softmax_c(float *s, ptrdiff_t lds, int nr, int bc, float *m, float *l, float *f) {
  int moved = 0;
  for (int r = 0; r < nr; ++r) {
    float *row = s + (ptrdiff_t)r * lds;
    float mx = -INFINITY;
    for (int j = 0; j < bc; ++j) mx = row[j] > mx ? row[j] : mx;
    const float mn = mx > m[r] ? mx : m[r];
    const float mu = mn == -INFINITY ? 0.0f : mn;
    const float fr = expf(m[r] - mu);
    float sum = 0.0f;
    for (int j = 0; j < bc; ++j) {
      row[j] = expf(row[j] - mu);
      sum += row[j];
    }
    l[r] = l[r] * fr + sum;
    m[r] = mn;
    f[r] = fr;
    moved |= fr != 1.0f;
  }
  return moved;
}

static void fa__dec_pv_c(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp, const void *v,
                         ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf, ptrdiff_t ldpf, int npf,
                         int pf_keep) {
  (void)pf, (void)ldpf, (void)npf, (void)pf_keep;
  for (int r = 0; r < nr; ++r) {
    float *orow = o + (ptrdiff_t)r * ldo;
    if (f)
      for (int e = 0; e < Dv; ++e) orow[e] *= f[r];
    for (int j = 0; j < bc; ++j) {
      const float pj = p[(ptrdiff_t)r * ldp + j];
      const char *vj = (const char *)v + (ptrdiff_t)j * ldv;
      if (vdt == FA_F32) {
        for (int e = 0; e < Dv; ++e) orow[e] += pj * ((const float *)vj)[e];
      } else {
        for (int e = 0; e < Dv; ++e) orow[e] += pj * fa__dec_elem(vj, vdt, e);
      }
    }
  }
}

#endif
