#include "ref_io.h"

#include "../core/element.h"

double fa__ref_load(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return fa__elem_get(t->data, t->dtype, fa__elem_offset(t, a, b, c, d));
}

int fa__ref_load_bool(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((const uint8_t *)t->data)[fa__elem_offset(t, a, b, c, d)] != 0;
}

void fa__ref_store(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v) {
  fa__elem_set(t->data, t->dtype, fa__elem_offset(t, a, b, c, d), v);
}

void fa__ref_zero(const fa_tensor *t) {
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = 0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < t->shape[3]; ++d) fa__ref_store(t, a, b, c, d, 0.0);
}
