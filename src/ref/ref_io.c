#include "ref_io.h"

#include "../rules/half.h"

static int64_t offset_of(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

double fa__ref_load(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t off = offset_of(t, a, b, c, d);
  switch (t->dtype) {
    case FA_F32: return ((const float *)t->data)[off];
    case FA_F64: return ((const double *)t->data)[off];
    case FA_F16: return fa__f16_to_f32(((const uint16_t *)t->data)[off]);
    case FA_BF16: return fa__bf16_to_f32(((const uint16_t *)t->data)[off]);
    case FA_BOOL: return ((const uint8_t *)t->data)[off] ? 1.0 : 0.0;
  }
  return 0.0;
}

int fa__ref_load_bool(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((const uint8_t *)t->data)[offset_of(t, a, b, c, d)] != 0;
}

void fa__ref_store(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v) {
  const int64_t off = offset_of(t, a, b, c, d);
  switch (t->dtype) {
    case FA_F32: ((float *)t->data)[off] = (float)v; break;
    case FA_F64: ((double *)t->data)[off] = v; break;
    case FA_F16: ((uint16_t *)t->data)[off] = fa__f32_to_f16((float)v); break;
    case FA_BF16: ((uint16_t *)t->data)[off] = fa__f32_to_bf16((float)v); break;
    case FA_BOOL: ((uint8_t *)t->data)[off] = v != 0; break;
  }
}

void fa__ref_zero(const fa_tensor *t) {
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = 0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < t->shape[3]; ++d) fa__ref_store(t, a, b, c, d, 0.0);
}
