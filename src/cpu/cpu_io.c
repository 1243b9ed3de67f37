#include "cpu_io.h"

#include <string.h>

#include "rules/half.h"

fa__cpu_mat fa__cpu_mat_of(const fa_tensor *t, int64_t b, int64_t h, int64_t row) {
  fa__cpu_mat m;
  const ptrdiff_t es = (ptrdiff_t)fa_dtype_size(t->dtype);
  m.base = (const char *)t->data + (ptrdiff_t)(b * t->stride[0] + h * t->stride[1] + row * t->stride[2]) * es;
  m.dtype = t->dtype;
  m.rs = (ptrdiff_t)t->stride[2];
  m.cs = (ptrdiff_t)t->stride[3];
  return m;
}

float fa__cpu_get(const void *p, fa_dtype t) {
  switch (t) {
    case FA_F32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case FA_F64: {
      double v;
      memcpy(&v, p, 8);
      return (float)v;
    }
    case FA_F16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return fa__f16_to_f32(h);
    }
    case FA_BF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return fa__bf16_to_f32(h);
    }
    default: return 0.0f;
  }
}

void fa__cpu_put(void *p, fa_dtype t, float v) {
  switch (t) {
    case FA_F32: memcpy(p, &v, 4); break;
    case FA_F64: {
      const double d = v;
      memcpy(p, &d, 8);
      break;
    }
    case FA_F16: {
      const uint16_t h = fa__f32_to_f16(v);
      memcpy(p, &h, 2);
      break;
    }
    case FA_BF16: {
      const uint16_t h = fa__f32_to_bf16(v);
      memcpy(p, &h, 2);
      break;
    }
    default: break;
  }
}

void fa__cpu_load_row(const fa__cpu_kernels *kt, float *dst, const fa__cpu_mat *x, int64_t r, int n, float scale) {
  const void *src = fa__cpu_mat_at(x, r, 0);
  if (x->cs == 1 && x->dtype == FA_F32) {
    const float *s = (const float *)src;
    for (int c = 0; c < n; ++c) dst[c] = scale * s[c];
    return;
  }
  if (x->cs == 1 && (x->dtype == FA_F16 || x->dtype == FA_BF16)) {
    (x->dtype == FA_F16 ? kt->f16_to_f32 : kt->bf16_to_f32)(dst, (const uint16_t *)src, n);
    if (scale != 1.0f)
      for (int c = 0; c < n; ++c) dst[c] *= scale;
    return;
  }
  for (int c = 0; c < n; ++c) dst[c] = scale * fa__cpu_get(fa__cpu_mat_at(x, r, c), x->dtype);
}

void fa__cpu_store_row(const fa__cpu_mat *x, int64_t r, const float *src, int n) {
  if (x->cs == 1 && x->dtype == FA_F32) {
    memcpy((void *)fa__cpu_mat_at(x, r, 0), src, (size_t)n * sizeof(float));
    return;
  }
  if (x->cs == 1 && x->dtype == FA_BF16) { /* the conversion inlined: no per-element dispatch on dtype */
    uint16_t *dst = (uint16_t *)(void *)fa__cpu_mat_at(x, r, 0);
    for (int c = 0; c < n; ++c) dst[c] = fa__f32_to_bf16(src[c]);
    return;
  }
  for (int c = 0; c < n; ++c) fa__cpu_put((void *)fa__cpu_mat_at(x, r, c), x->dtype, src[c]);
}

void fa__cpu_pack_t(const fa__cpu_kernels *kt, float *dst, ptrdiff_t ld, int rpad, const fa__cpu_mat *x, int rows,
                    int cols, float scale, float *tmp) {
  for (int r = 0; r < rows; ++r) {
    fa__cpu_load_row(kt, tmp, x, r, cols, scale);
    for (int c = 0; c < cols; ++c) dst[c * ld + r] = tmp[c];
  }
  if (rpad > rows)
    for (int c = 0; c < cols; ++c) memset(dst + c * ld + rows, 0, (size_t)(rpad - rows) * sizeof(float));
}

void fa__cpu_pack_rows(const fa__cpu_kernels *kt, float *dst, ptrdiff_t ld, int cpad, const fa__cpu_mat *x, int rows,
                       int cols, float scale) {
  for (int r = 0; r < rows; ++r) {
    fa__cpu_load_row(kt, dst + r * ld, x, r, cols, scale);
    if (cpad > cols) memset(dst + r * ld + cols, 0, (size_t)(cpad - cols) * sizeof(float));
  }
}

fa__cpu_aop fa__cpu_operand(const fa__cpu_kernels *kt, const fa__cpu_mat *x, int rows, int cols, float *buf) {
  fa__cpu_aop op;
  if (x->dtype == FA_F32) {
    op.a = (const float *)x->base;
    op.rs = x->rs;
    op.cs = x->cs;
    return op;
  }
  fa__cpu_pack_rows(kt, buf, cols, cols, x, rows, cols, 1.0f);
  op.a = buf;
  op.rs = cols;
  op.cs = 1;
  return op;
}
