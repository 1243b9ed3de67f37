/* Names of the public enums, and the small value helpers of the API. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../rules/dropout.h"
#include "flashattn.h"

const char *fa_status_name(fa_status s) {
  switch (s) {
    case FA_OK: return "FA_OK";
    case FA_ERR_NULL_POINTER: return "FA_ERR_NULL_POINTER";
    case FA_ERR_BAD_SIZE: return "FA_ERR_BAD_SIZE";
    case FA_ERR_SHAPE: return "FA_ERR_SHAPE";
    case FA_ERR_OVERLAP: return "FA_ERR_OVERLAP";
    case FA_ERR_DTYPE: return "FA_ERR_DTYPE";
    case FA_ERR_DROPOUT: return "FA_ERR_DROPOUT";
    case FA_ERR_HEADS: return "FA_ERR_HEADS";
    case FA_ERR_SEQLENS: return "FA_ERR_SEQLENS";
    case FA_ERR_OPTION: return "FA_ERR_OPTION";
    case FA_ERR_UNSUPPORTED: return "FA_ERR_UNSUPPORTED";
    case FA_ERR_NO_BACKEND: return "FA_ERR_NO_BACKEND";
    case FA_ERR_MEMORY_SPACE: return "FA_ERR_MEMORY_SPACE";
    case FA_ERR_OUT_OF_MEMORY: return "FA_ERR_OUT_OF_MEMORY";
    case FA_ERR_DEVICE: return "FA_ERR_DEVICE";
    case FA_ERR_INTERNAL: return "FA_ERR_INTERNAL";
  }
  return "FA_ERR_UNKNOWN";
}

const char *fa_dtype_name(fa_dtype t) {
  switch (t) {
    case FA_F32: return "f32";
    case FA_F64: return "f64";
    case FA_F16: return "f16";
    case FA_BF16: return "bf16";
    case FA_BOOL: return "bool";
    case FA_F8_E4M3: return "e4m3";
  }
  return "unknown";
}

size_t fa_dtype_size(fa_dtype t) {
  switch (t) {
    case FA_F32: return 4;
    case FA_F64: return 8;
    case FA_F16:
    case FA_BF16: return 2;
    case FA_BOOL:
    case FA_F8_E4M3: return 1;
  }
  return 0;
}

const char *fa_backend_name(fa_backend b) {
  switch (b) {
    case FA_BACKEND_AUTO: return "auto";
    case FA_BACKEND_REF: return "ref";
    case FA_BACKEND_CPU: return "cpu";
    case FA_BACKEND_CUDA: return "cuda";
    default: return "unknown";
  }
}

fa_status fa_backend_from_name(const char *name, fa_backend *out) {
  if (!name || !out) return FA_ERR_NULL_POINTER;
  for (int b = FA_BACKEND_AUTO; b < FA_BACKEND_COUNT; ++b)
    if (strcmp(name, fa_backend_name((fa_backend)b)) == 0) {
      *out = (fa_backend)b;
      return FA_OK;
    }
  return FA_ERR_OPTION;
}

const char *fa_cpu_isa_name(fa_cpu_isa isa) {
  switch (isa) {
    case FA_ISA_AUTO: return "auto";
    case FA_ISA_GENERIC: return "generic";
    case FA_ISA_AVX2: return "avx2";
    case FA_ISA_AVX512: return "avx512";
    case FA_ISA_AVX512BF16: return "avx512bf16";
    case FA_ISA_AMX: return "amx";
  }
  return "unknown";
}

fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  t.shape[3] = d3;
  t.stride[3] = 1;
  t.stride[2] = d3;
  t.stride[1] = d2 * d3;
  t.stride[0] = d1 * d2 * d3;
  t.memory = FA_MEMORY_AUTO;
  return t;
}

void fa_options_init(fa_options *opt) {
  if (opt) memset(opt, 0, sizeof *opt);
}

int fa_dropout_keep(double p, uint64_t seed, uint32_t offset, int64_t b, int64_t h, int64_t num_heads, int64_t i,
                    int64_t j) {
  if (!(p > 0)) return 1;
  if (!(p < 1)) return 0;
  return fa__dropout_keep(seed, offset, fa__dropout_threshold(p), b * num_heads + h, i, j);
}

fa_status fa_dropout_mask(double p, uint64_t seed, uint32_t offset, int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                          uint8_t *keep, char *why, size_t why_size) {
  if (why && why_size) why[0] = '\0';
  if (!(p >= 0 && p < 1)) {
    if (why) snprintf(why, why_size, "p = %g is outside [0, 1)", p);
    return FA_ERR_DROPOUT;
  }
  const int64_t dims[4] = {B, H, Lq, Lk};
  const char *names[4] = {"B", "H", "Lq", "Lk"};
  size_t n = 1;
  for (int d = 0; d < 4; ++d) {
    if (dims[d] <= 0 || (uint64_t)dims[d] > SIZE_MAX / n) {
      if (why)
        snprintf(why, why_size, "%s = %lld must be > 0 (and the mask must fit in memory)", names[d],
                 (long long)dims[d]);
      return FA_ERR_BAD_SIZE;
    }
    n *= (size_t)dims[d];
  }
  if (!keep) {
    if (why) snprintf(why, why_size, "keep is NULL");
    return FA_ERR_NULL_POINTER;
  }
  if (!(p > 0)) {
    memset(keep, 1, n);
    return FA_OK;
  }
  const uint32_t threshold = fa__dropout_threshold(p);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Lq; ++i) {
      uint8_t *row = keep + (size_t)(bh * Lq + i) * (size_t)Lk;
      for (int64_t j = 0; j < Lk; j += 4) { /* one Philox call serves four columns */
        const fa__u32x4 r = fa__dropout_words(seed, offset, bh, i, j);
        for (int64_t c = j; c < j + 4 && c < Lk; ++c) row[c] = r.v[c & 3] < threshold;
      }
    }
  return FA_OK;
}
