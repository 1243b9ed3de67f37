#include "tensor.h"

#include <stdlib.h>
#include <string.h>

#include "core/element.h"
#include "device.h"

void tb_strides(const int64_t shape[4], tb_layout layout, unsigned zero_dims, int64_t stride[4]) {
  /* memory order, outermost first */
  static const int order_bhld[4] = {0, 1, 2, 3}, order_blhd[4] = {0, 2, 1, 3};
  /* padding added to each outer stride: odd amounts, so that no padded
   * stride happens to equal a contiguous one */
  static const int64_t pad[4] = {7, 5, 3, 0};
  const int *order = layout == TL_BLHD ? order_blhd : order_bhld;
  const int padded = layout == TL_PADDED || layout == TL_STRIDED;
  int64_t s = layout == TL_STRIDED ? 2 : 1;
  for (int a = 3; a >= 0; --a) {
    const int d = order[a];
    if (zero_dims & (1u << d)) {
      stride[d] = 0;
      continue;
    }
    stride[d] = s + (padded && a < 3 ? pad[a] : 0);
    s = stride[d] * shape[d];
  }
}

static size_t esize(fa_dtype dt) {
  return fa_dtype_size(dt);
}

static int64_t offset_of(const tbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t *st = b->t.stride;
  return i0 * st[0] + i1 * st[1] + i2 * st[2] + (b->ndim == 4 ? i3 * st[3] : 0);
}

void tb_alloc(tbuf *b, fa_dtype dt, const int64_t shape[4], int ndim, tb_layout layout, unsigned zero_dims,
              fa_memory memory) {
  memset(b, 0, sizeof *b);
  int64_t sh[4] = {shape[0], shape[1], shape[2], ndim == 4 ? shape[3] : 1};
  b->ndim = ndim;
  b->t.dtype = dt;
  memcpy(b->t.shape, sh, sizeof sh);
  tb_strides(sh, layout, zero_dims, b->t.stride);
  if (ndim == 3) b->t.stride[3] = 1;
  int64_t last = 0; /* offset of the last element (strides are >= 0) */
  for (int d = 0; d < ndim; ++d) last += (sh[d] - 1) * b->t.stride[d];
  b->span = (size_t)(last + 1) * esize(dt);
  const size_t total = b->span + 2 * TB_GUARD;
  b->base = (unsigned char *)malloc(total);
  if (!b->base) abort();
  b->t.memory = memory;
  if (memory == FA_MEMORY_CUDA) {
    b->dev = tdev_alloc(total);
    b->t.data = b->dev ? (unsigned char *)b->dev + TB_GUARD : NULL;
  } else {
    b->t.data = tb_view(b);
  }
  tb_poison(b);
}

void tb_free(tbuf *b) {
  free(b->base);
  tdev_free(b->dev);
  memset(b, 0, sizeof *b);
}

int64_t tb_numel(const tbuf *b) {
  int64_t n = 1;
  for (int d = 0; d < b->ndim; ++d) n *= b->t.shape[d];
  return n;
}

double tb_get(const tbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return fa__elem_get(tb_view(b), b->t.dtype, offset_of(b, i0, i1, i2, i3));
}

void tb_set(const tbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v) {
  fa__elem_set(tb_view(b), b->t.dtype, offset_of(b, i0, i1, i2, i3), v);
}

double tb_round(fa_dtype dt, double v) {
  switch (dt) {
    case FA_F32: return (float)v;
    case FA_F16: return fa__f16_to_f32(fa__f32_to_f16((float)v));
    case FA_BF16: return fa__bf16_to_f32(fa__f32_to_bf16((float)v));
    case FA_BOOL: return v != 0;
    case FA_F64: return v;
    case FA_F8_E4M3: return fa__e4m3_round(v);
  }
  return v;
}

void tb_poison(tbuf *b) {
  memset(b->base, TB_GUARD_BYTE, TB_GUARD);
  memset(tb_view(b), TB_POISON_BYTE, b->span);
  memset(tb_view(b) + b->span, TB_GUARD_BYTE, TB_GUARD);
}

int tb_upload(tbuf *b) {
  if (!b->base || b->t.memory != FA_MEMORY_CUDA) return 0;
  if (!b->dev) return -1;
  return tdev_to_device(b->dev, b->base, b->span + 2 * TB_GUARD);
}

int tb_download(tbuf *b) {
  if (!b->base || b->t.memory != FA_MEMORY_CUDA) return 0;
  if (!b->dev) return -1;
  return tdev_to_host(b->base, b->dev, b->span + 2 * TB_GUARD);
}

int tb_guards_ok(const tbuf *b) {
  for (size_t i = 0; i < TB_GUARD; ++i)
    if (b->base[i] != TB_GUARD_BYTE || tb_view(b)[b->span + i] != TB_GUARD_BYTE) return 0;
  return 1;
}

/* Calls f for every logical index in natural order. */
#define TB_FOR_EACH(b, i0, i1, i2, i3)                 \
  for (int64_t i0 = 0; i0 < (b)->t.shape[0]; ++i0)     \
    for (int64_t i1 = 0; i1 < (b)->t.shape[1]; ++i1)   \
      for (int64_t i2 = 0; i2 < (b)->t.shape[2]; ++i2) \
        for (int64_t i3 = 0; i3 < ((b)->ndim == 4 ? (b)->t.shape[3] : 1); ++i3)

int64_t tb_dirty_holes(const tbuf *b) {
  unsigned char *owned = (unsigned char *)calloc(b->span, 1);
  if (!owned) abort();
  const size_t es = esize(b->t.dtype);
  TB_FOR_EACH(b, i0, i1, i2, i3) {
    memset(owned + (size_t)offset_of(b, i0, i1, i2, i3) * es, 1, es);
  }
  int64_t dirty = 0;
  for (size_t i = 0; i < b->span; ++i)
    if (!owned[i] && tb_view(b)[i] != TB_POISON_BYTE) ++dirty;
  free(owned);
  return dirty;
}

int tb_all_poison(const tbuf *b) {
  for (size_t i = 0; i < b->span; ++i)
    if (tb_view(b)[i] != TB_POISON_BYTE) return 0;
  return 1;
}

double *tb_logical(const tbuf *b) {
  double *out = (double *)malloc((size_t)tb_numel(b) * sizeof(double));
  if (!out) abort();
  int64_t n = 0;
  TB_FOR_EACH(b, i0, i1, i2, i3) {
    out[n++] = tb_get(b, i0, i1, i2, i3);
  }
  return out;
}
