/* The argument checks that validation shares: validate.c (attention) and
 * validate_kvcache.c (the KV cache, merging partial results). Each returns
 * FA_OK, or a status with err naming the argument. Internal. */
#ifndef FA_CORE_CHECKS_H
#define FA_CORE_CHECKS_H

#include <stdint.h>

#include "backend.h"

#define FAIL(st, ...)              \
  do {                             \
    fa__err_set(err, __VA_ARGS__); \
    return (st);                   \
  } while (0)

#define CHECK(expr)               \
  do {                            \
    const fa_status st_ = (expr); \
    if (st_ != FA_OK) return st_; \
  } while (0)

/* Byte range [lo, hi) a tensor's elements (or an array) can touch. */
typedef struct fa__extent {
  const char *name;
  uintptr_t lo, hi;
} fa__extent;

int fa__is_float_dtype(fa_dtype t);
fa_status fa__need_tensor(const fa_tensor *t, const char *name, fa__err *err);
fa_status fa__need_sizes(const fa_tensor *t, const char *name, int ndim, fa__err *err);
fa_status fa__need_shape(const fa_tensor *t, const char *name, int ndim, const int64_t *want, fa__err *err);
fa_status fa__broadcastable(fa_tensor *t, const char *name, const int64_t *logical, fa__err *err);
uint64_t fa__abs_u64(int64_t x);
fa_status fa__extent_of(const fa_tensor *t, const char *name, int ndim, fa__extent *e, fa__err *err);
fa_status fa__output_injective(const fa_tensor *t, const char *name, int ndim, fa__err *err);
fa_status fa__sizes_fit(int64_t B, int64_t Hq, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, fa__err *err);
fa_status fa__no_overlap(const fa__extent *outs, int nout, const fa__extent *ins, int nin, fa__err *err);
fa__extent fa__array_extent(const void *p, uint64_t n, uint64_t es, const char *name);
fa_status fa__resolve_memory(fa_tensor **ts, const char **names, int n, fa_memory *out, fa__err *err);
/* Where a call reads device-resident values back from: the memory of its
 * tensors and, for CUDA memory, the context's stream (the copy waits for the
 * work queued on it, as the kernels that read the values would). */
typedef struct fa__readback {
  fa_memory where;
  void *stream;
} fa__readback;
/* Reads n int32 values of the array called name into *dst (malloc'd). On a
 * stream that is capturing a CUDA graph there is nothing to read yet (a
 * graph replays later, with whatever the array then holds): FA_ERR_UNSUPPORTED
 * naming the array, and hint (if not NULL) says what to do instead. */
fa_status fa__read_ints(const int32_t *src, int64_t n, const char *name, const char *hint, fa__readback from,
                        int32_t **dst, fa__err *err);
fa_status fa__check_seqlens(const int32_t *s, int64_t B, int64_t max, const char *name, fa__readback from,
                            fa__err *err);
fa_status fa__check_cu_seqlens(const int32_t *cu, int64_t nseq, int64_t total, const char *name, fa__readback from,
                               int64_t *longest, fa__err *err);
/* Scalar options; q_offset and k_offset in [0, FA__MAX_POSITION_OFFSET]. */
#define FA__MAX_POSITION_OFFSET ((int64_t)1 << 60)
fa_status fa__check_options(const fa_options *o, fa__err *err);
/* The backends get stride 0 on every size-1 dim (never stepped along, so its
 * stride was not checked and no address may be formed from it). */
void fa__zero_unit_strides(fa_tensor *const *ts, int n);

#endif
