#include "cpu_bf16.h"

#include <math.h>
#include <string.h>

#include "cpu_score.h"

static uint16_t bits_at(const fa__cpu_mat *x, int64_t r, int64_t c) {
  uint16_t h;
  memcpy(&h, fa__cpu_mat_at(x, r, c), sizeof h);
  return h;
}

static uint32_t pair(uint16_t lo, uint16_t hi) {
  return (uint32_t)lo | (uint32_t)hi << 16;
}

int fa__cpu_bf16_products(const fa__problem *p, const fa__cpu_kernels *kt) {
  return p->dtype == FA_BF16 && kt->gemm_bf16 != NULL;
}

float fa__cpu_bf16_log2_scale(const fa__problem *p, const fa__cpu_kernels *kt) {
  if (!fa__cpu_bf16_products(p, kt) || fa__cpu_score_elementwise(p) || !kt->softmax_pairs || !kt->exp2_rows_off ||
      !kt->exp2_cols)
    return 0.0f;
  const float c = (float)(p->scale * 1.44269504088896341);
  return c > 0.0f && isfinite(c) ? c : 0.0f;
}

void fa__cpu_gemm_bf16(const fa__cpu_kernels *kt, int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                       const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate) {
  fa__cpu_gemm_bf16_max(kt, m, n, kp, a, rsa, csa, b, ldb, alpha, c, ldc, accumulate, NULL);
}

void fa__cpu_gemm_bf16_max(const fa__cpu_kernels *kt, int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa,
                           ptrdiff_t csa, const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc,
                           int accumulate, float *cmax) {
  if (kt->gemm_bf16_block) {
    if (m > 0 && n > 0) kt->gemm_bf16_block(m, n, kp, a, rsa, csa, b, ldb, alpha, c, ldc, accumulate, cmax);
    return;
  }
  const int vecs = n / kt->vl;
  const int strips = (vecs + kt->nv - 1) / kt->nv;
  if (m <= 0 || strips == 0) return;
  const int base = vecs / strips, extra = vecs % strips;
  int x = 0;
  for (int s = 0; s < strips; ++s) {
    const int nv = base + (s < extra);
    const uint32_t *bs = b + (ptrdiff_t)x * kt->vl;
    float *cs = c + (ptrdiff_t)x * kt->vl;
    for (int i = 0; i < m; i += kt->mr) {
      const int mr = m - i < kt->mr ? m - i : kt->mr;
      kt->gemm_bf16(mr, nv, kp, a + (ptrdiff_t)i * rsa, rsa, csa, bs, ldb, alpha, cs + (ptrdiff_t)i * ldc, ldc,
                    accumulate, cmax ? cmax + (ptrdiff_t)x * kt->vl : NULL);
    }
    x += nv;
  }
}

void fa__cpu_pack_pairs_t(uint32_t *dst, ptrdiff_t ld, int rpad, const fa__cpu_mat *x, int rows, int cols) {
  const int kp = (cols + 1) / 2;
  if (x->cs == 1) { /* the pairs are in memory already: one 32-bit move each */
    const uint16_t *base = (const uint16_t *)(const void *)x->base;
    for (int r = 0; r < rows; ++r) {
      const uint16_t *row = base + (ptrdiff_t)r * x->rs;
      for (int k = 0; k < cols / 2; ++k) {
        uint32_t w;
        memcpy(&w, row + 2 * k, sizeof w);
        dst[k * ld + r] = w;
      }
      if (cols % 2) dst[(kp - 1) * ld + r] = row[cols - 1];
    }
  } else {
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < kp; ++k) {
        const uint16_t hi = 2 * k + 1 < cols ? bits_at(x, r, 2 * k + 1) : 0;
        dst[k * ld + r] = pair(bits_at(x, r, 2 * k), hi);
      }
  }
  if (rpad > rows)
    for (int k = 0; k < kp; ++k) memset(dst + k * ld + rows, 0, (size_t)(rpad - rows) * sizeof(uint32_t));
}

fa__cpu_bf16_aop fa__cpu_bf16_operand(const fa__cpu_mat *x, int rows, int cols, uint16_t *buf) {
  fa__cpu_bf16_aop op;
  if (x->cs == 1 && cols % 2 == 0) {
    op.a = (const uint16_t *)(const void *)x->base;
    op.rs = x->rs;
    return op;
  }
  const int ld = cols + cols % 2;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) buf[r * ld + c] = bits_at(x, r, c);
    if (ld > cols) buf[r * ld + cols] = 0;
  }
  op.a = buf;
  op.rs = ld;
  return op;
}

void fa__cpu_pack_pairs_rows(const fa__cpu_kernels *kt, uint32_t *dst, ptrdiff_t ld, const fa__cpu_mat *x, int rows,
                             int cols) {
  if (x->cs == 1) {
    kt->pair_pack_bf16(dst, ld, (const uint16_t *)(const void *)x->base, x->rs, rows, cols);
    return;
  }
  for (int r = 0; r < rows; r += 2)
    for (int c = 0; c < cols; ++c)
      dst[(r / 2) * ld + c] = pair(bits_at(x, r, c), r + 1 < rows ? bits_at(x, r + 1, c) : 0);
}

void fa__cpu_pack_pairs_rows_t(const fa__cpu_kernels *kt, uint32_t *dst, ptrdiff_t ld, const fa__cpu_mat *x, int rows,
                               int cols) {
  if (x->cs == 1 && kt->pair_pack_bf16_t) {
    kt->pair_pack_bf16_t(dst, ld, (const uint16_t *)(const void *)x->base, x->rs, rows, cols);
    return;
  }
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; r += 2)
      dst[c * ld + r / 2] = pair(bits_at(x, r, c), r + 1 < rows ? bits_at(x, r + 1, c) : 0);
}

fa__cpu_pairs_a fa__cpu_pack_pairs_a(const fa__cpu_kernels *kt, uint32_t *dst, int rows_max, const fa__cpu_mat *x,
                                     int rows, int cols) {
  fa__cpu_pairs_a r = {(const uint16_t *)dst, 2, 2 * (ptrdiff_t)cols};
  if (kt->pair_pack_bf16_t) {
    const ptrdiff_t ld = fa__cpu_pairs_ld_t(rows_max);
    fa__cpu_pack_pairs_rows_t(kt, dst, ld, x, rows, cols);
    r.rsa = 2 * ld;
    r.csa = 2;
  } else {
    fa__cpu_pack_pairs_rows(kt, dst, cols, x, rows, cols);
  }
  return r;
}
