#include "tensor_io.h"

#include <math.h>

#include "core/element.h"
#include "rules/half.h"

double cli_tensor_get(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return fa__elem_get(t->data, t->dtype, fa__elem_offset(t, a, b, c, d));
}

void cli_tensor_set(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v) {
  fa__elem_set(t->data, t->dtype, fa__elem_offset(t, a, b, c, d), v);
}

double cli_quantize(double v, fa_dtype dtype) {
  switch (dtype) {
    case FA_F32: return (float)v;
    case FA_F16: return fa__f16_to_f32(fa__f32_to_f16((float)v));
    case FA_BF16: return fa__bf16_to_f32(fa__f32_to_bf16((float)v));
    default: return v;
  }
}

int64_t cli_tensor_numel(const fa_tensor *t, int ndim) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= t->shape[d];
  return n;
}

size_t cli_tensor_bytes(const fa_tensor *t, int ndim) {
  return (size_t)cli_tensor_numel(t, ndim) * fa_dtype_size(t->dtype);
}

/* splitmix64: a good 64-bit mix, enough for test data. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double unit(uint64_t bits) { /* (0, 1) */
  return ((double)(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double cli_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  return unit(mix(mix(seed ^ mix(stream)) + i));
}

double cli_rand_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t h = mix(mix(seed ^ mix(stream)) + i);
  const double u1 = unit(h), u2 = unit(mix(h));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
