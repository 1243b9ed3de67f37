#include "cpu_score.h"

#include <math.h>

#include "cpu_io.h"
#include "rules/score.h"

int fa__cpu_score_elementwise(const fa__problem *p) {
  return p->softcap > 0 || p->alibi_slopes || p->bias.data || p->mask.data;
}

/* Element (b, h, i, j) of a [B, Hq, Lq, Lk] operand (stride 0 broadcasts). */
static const void *bhij(const fa_tensor *x, int64_t b, int64_t h, int64_t i, int64_t j) {
  const ptrdiff_t es = (ptrdiff_t)fa_dtype_size(x->dtype);
  return (const char *)x->data +
         (ptrdiff_t)(b * x->stride[0] + h * x->stride[1] + i * x->stride[2] + j * x->stride[3]) * es;
}

/* x clamped to [0, n]: where a run of masked elements of a tile row starts or ends */
static int clamp_run(int64_t x, int n) {
  return x < 0 ? 0 : x > n ? n : (int)x;
}

void fa__cpu_score_tile(const fa__cpu_kernels *kt, const fa__cpu_tile *t, float *s, ptrdiff_t si, ptrdiff_t sj,
                        float *capped, int band_full) {
  const fa__problem *p = t->p;
  const int br = t->br, bc = t->bc;
  if (p->softcap > 0) {
    const float cap = (float)p->softcap;
    if (sj == 1) {
      for (int ii = 0; ii < br; ++ii) kt->softcap(s + ii * si, bc, cap);
    } else {
      for (int jj = 0; jj < bc; ++jj) kt->softcap(s + jj * sj, br, cap);
    }
    if (capped)
      for (int ii = 0; ii < br; ++ii)
        for (int jj = 0; jj < bc; ++jj) capped[ii * si + jj * sj] = s[ii * si + jj * sj];
  }
  if (p->alibi_slopes) {
    const float slope = p->alibi_slopes[t->h];
    for (int ii = 0; ii < br; ++ii) {
      const int64_t diag = fa__band_diag(t->bd, t->i0 + ii);
      for (int jj = 0; jj < bc; ++jj) s[ii * si + jj * sj] += fa__alibi_f(slope, diag, t->j0 + jj);
    }
  }
  if (p->bias.data) {
    for (int ii = 0; ii < br; ++ii) {
      const float off = t->row_off ? t->row_off[ii] : 0.0f, lo = t->row_off_lo ? t->row_off_lo[ii] : 0.0f;
      for (int jj = 0; jj < bc; ++jj)
        s[ii * si + jj * sj] +=
            (fa__cpu_get(bhij(&p->bias, t->b, t->h, t->i0 + ii, t->j0 + jj), p->bias.dtype) - off) - lo;
    }
  } else if (t->row_off) {
    for (int ii = 0; ii < br; ++ii) {
      const float off = t->row_off[ii], lo = t->row_off_lo ? t->row_off_lo[ii] : 0.0f;
      for (int jj = 0; jj < bc; ++jj) s[ii * si + jj * sj] = (s[ii * si + jj * sj] - off) - lo;
    }
  }
  if (p->mask.data) {
    for (int ii = 0; ii < br; ++ii)
      for (int jj = 0; jj < bc; ++jj)
        if (!*(const uint8_t *)bhij(&p->mask, t->b, t->h, t->i0 + ii, t->j0 + jj)) s[ii * si + jj * sj] = -INFINITY;
  }
  if (!band_full) {
    /* one row (or column) of the band is an interval [lo, hi): mask what
     * lies outside, two runs of stores (no test per element) */
    if (sj == 1) {
      for (int ii = 0; ii < br; ++ii) {
        int64_t lo, hi;
        fa__band_cols(t->bd, t->i0 + ii, t->i0 + ii + 1, &lo, &hi);
        const int a = clamp_run(lo - t->j0, bc), e = clamp_run(hi - t->j0, bc);
        float *row = s + ii * si;
        for (int jj = 0; jj < a; ++jj) row[jj] = -INFINITY;
        for (int jj = e; jj < bc; ++jj) row[jj] = -INFINITY;
      }
    } else {
      for (int jj = 0; jj < bc; ++jj) {
        int64_t lo, hi;
        fa__band_rows(t->bd, t->j0 + jj, t->j0 + jj + 1, &lo, &hi);
        const int a = clamp_run(lo - t->i0, br), e = clamp_run(hi - t->i0, br);
        float *col = s + jj * sj;
        for (int ii = 0; ii < a; ++ii) col[ii * si] = -INFINITY;
        for (int ii = e; ii < br; ++ii) col[ii * si] = -INFINITY;
      }
    }
  }
}

void fa__cpu_dropout_mask(const fa__cpu_kernels *kt, const fa__cpu_tile *t, uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj) {
  const fa__problem *p = t->p;
  kt->dropout(keep, ki, kj, t->br, t->bc, p->dropout_seed, p->dropout_offset, p->dropout_threshold, t->b * p->Hq + t->h,
              t->i0 + p->q_offset, t->j0 + p->k_offset);
}
