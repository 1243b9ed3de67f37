/* The portable kernel table: plain C, written so that a compiler can
 * vectorize the inner loops for whatever CPU it targets (NEON, SSE2, ...).
 * Every ISA table starts as a copy of this one. */
#include <math.h>

#include "kernels.h"
#include "kernels_decode.h"
#include "rules/dropout.h"
#include "rules/half.h"
#include "rules/score.h"

enum { GEN_VL = 16, GEN_MR = 4, GEN_NV = 2 };

static void gemm_generic(int mr, int nv, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                         ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  float t[GEN_MR][GEN_NV * GEN_VL];
  const int n = nv * GEN_VL;
  for (int m = 0; m < mr; ++m)
    for (int x = 0; x < n; ++x) t[m][x] = accumulate ? c[m * ldc + x] : 0.0f;
  for (int k = 0; k < kc; ++k) {
    const float *bk = b + (ptrdiff_t)k * ldb;
    for (int m = 0; m < mr; ++m) {
      const float am = a[m * rsa + (ptrdiff_t)k * csa];
      for (int v = 0; v < nv; ++v)
        for (int x = 0; x < GEN_VL; ++x) t[m][v * GEN_VL + x] += am * bk[v * GEN_VL + x];
    }
  }
  for (int m = 0; m < mr; ++m)
    for (int x = 0; x < n; ++x) c[m * ldc + x] = t[m][x];
}

static int softmax_generic(float *s, ptrdiff_t lds, int bc, int np, float *m, float *l, float *f) {
  int moved = 0;
  for (int i = 0; i < np; ++i) {
    float mt = -INFINITY;
    for (int j = 0; j < bc; ++j) mt = s[j * lds + i] > mt ? s[j * lds + i] : mt;
    const float mn = mt > m[i] ? mt : m[i];
    const float mu = mn == -INFINITY ? 0.0f : mn;
    const float fi = expf(m[i] - mu);
    float sum = 0.0f;
    for (int j = 0; j < bc; ++j) {
      const float p = expf(s[j * lds + i] - mu);
      s[j * lds + i] = p;
      sum += p;
    }
    l[i] = l[i] * fi + sum;
    m[i] = mn;
    f[i] = fi;
    moved |= fi != 1.0f;
  }
  return moved;
}

static void scale_cols_generic(float *c, ptrdiff_t ldc, int rows, int np, const float *f) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < np; ++i) c[r * ldc + i] *= f[i];
}

static void exp_rows_generic(float *s, ptrdiff_t lds, int rows, int n, const float *lse) {
  for (int r = 0; r < rows; ++r) {
    float *row = s + r * lds;
    if (lse[r] == -INFINITY) {
      for (int j = 0; j < n; ++j) row[j] = 0.0f;
    } else {
      for (int j = 0; j < n; ++j) row[j] = expf(row[j] - lse[r]);
    }
  }
}

static void ds_rows_generic(const float *p, float *dp, ptrdiff_t ld, int rows, int n, const float *di) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) dp[r * ld + j] = p[r * ld + j] * (dp[r * ld + j] - di[r]);
}

static void exp_generic(float *y, const float *x, int n) {
  for (int t = 0; t < n; ++t) y[t] = expf(x[t]);
}

static void softcap_generic(float *s, int n, float cap) {
  for (int t = 0; t < n; ++t) s[t] = fa__softcap_f(s[t], cap);
}

static void f16_generic(float *dst, const uint16_t *src, int n) {
  for (int t = 0; t < n; ++t) dst[t] = fa__f16_to_f32(src[t]);
}

static void bf16_generic(float *dst, const uint16_t *src, int n) {
  for (int t = 0; t < n; ++t) dst[t] = fa__bf16_to_f32(src[t]);
}

/* The scalar rule itself; one Philox call decides the 4 columns of an
 * aligned group. */
static void dropout_generic(uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj, int br, int bc, uint64_t seed, uint32_t offset,
                            uint32_t threshold, int64_t bh, int64_t i0, int64_t j0) {
  for (int ii = 0; ii < br; ++ii) {
    uint8_t *row = keep + ii * ki;
    for (int jj = 0; jj < bc;) {
      const int64_t j = j0 + jj;
      const fa__u32x4 w = fa__dropout_words(seed, offset, bh, i0 + ii, j);
      const int u0 = (int)(j & 3), n = 4 - u0 < bc - jj ? 4 - u0 : bc - jj;
      for (int u = 0; u < n; ++u) row[(jj + u) * kj] = w.v[u0 + u] < threshold;
      jj += n;
    }
  }
}

void fa__cpu_kernels_generic(fa__cpu_kernels *kt) {
  kt->isa = FA_ISA_GENERIC;
  kt->vl = GEN_VL;
  kt->mr = GEN_MR;
  kt->nv = GEN_NV;
  kt->gemm = gemm_generic;
  kt->softmax = softmax_generic;
  kt->scale_cols = scale_cols_generic;
  kt->exp_rows = exp_rows_generic;
  kt->ds_rows = ds_rows_generic;
  kt->exp = exp_generic;
  kt->softcap = softcap_generic;
  kt->f16_to_f32 = f16_generic;
  kt->bf16_to_f32 = bf16_generic;
  kt->dropout = dropout_generic;
  kt->dec_scores = fa__dec_scores_c;
  kt->dec_softmax = fa__dec_softmax_c;
  kt->dec_pv = fa__dec_pv_c;
  kt->dec_dtypes = 1u << FA_F32 | 1u << FA_F16 | 1u << FA_BF16;
  kt->gemm_bf16 = NULL; /* bf16 is converted to f32 */
  kt->pair_pack_f32 = NULL;
  kt->pair_pack_bf16 = NULL;
  kt->to_bf16 = NULL;
  kt->exp_cols = NULL;
  kt->colsum2 = NULL;
  kt->softmax_pairs = NULL;
  kt->ds_pairs = NULL;
  kt->exp_rows_off = NULL;
  kt->exp2_rows_off = NULL;
  kt->exp2_cols = NULL;
  kt->gemm_bf16_block = NULL;
  kt->pair_pack_bf16_t = NULL;
  kt->tiles_hold = NULL;
}
