/* One element of a tensor of any dtype, as double: the slow, exact access
 * the eager and checking code uses (ref, the CLI, the tests). Hot loops of
 * the tiled backends pack tiles with their own converters instead. */
#ifndef FA_CORE_ELEMENT_H
#define FA_CORE_ELEMENT_H

#include <stdint.h>
#include <string.h>

#include "../rules/fp8.h"
#include "../rules/half.h"
#include "flashattn.h"

/* Element offset of index (a, b, c, d) in t (element strides). */
static inline int64_t fa__elem_offset(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* The element off elements from data, converted to double (bool: 0 or 1). */
static inline double fa__elem_get(const void *data, fa_dtype t, int64_t off) {
  const unsigned char *p = (const unsigned char *)data + off * (int64_t)fa_dtype_size(t);
  switch (t) {
    case FA_F32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case FA_F64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case FA_F16:
    case FA_BF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return t == FA_F16 ? fa__f16_to_f32(h) : fa__bf16_to_f32(h);
    }
    case FA_BOOL: return *p ? 1.0 : 0.0;
    case FA_F8_E4M3: return fa__e4m3_to_double(*p);
  }
  return 0.0;
}

/* Stores v, rounded to nearest even in the element's dtype. */
static inline void fa__elem_set(void *data, fa_dtype t, int64_t off, double v) {
  unsigned char *p = (unsigned char *)data + off * (int64_t)fa_dtype_size(t);
  switch (t) {
    case FA_F32: {
      const float f = (float)v;
      memcpy(p, &f, 4);
      break;
    }
    case FA_F64: memcpy(p, &v, 8); break;
    case FA_F16:
    case FA_BF16: {
      const uint16_t h = t == FA_F16 ? fa__f32_to_f16((float)v) : fa__f32_to_bf16((float)v);
      memcpy(p, &h, 2);
      break;
    }
    case FA_BOOL: *p = v != 0; break;
    case FA_F8_E4M3: *p = fa__double_to_e4m3(v); break;
  }
}

#endif
