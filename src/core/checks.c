/* The argument checks that validation shares (checks.h). */
#include "checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FA_HAVE_CUDA
#include "../cuda/cuda_hooks.h"
#endif

int fa__is_float_dtype(fa_dtype t) {
  return t == FA_F32 || t == FA_F64 || t == FA_F16 || t == FA_BF16;
}

fa_status fa__need_tensor(const fa_tensor *t, const char *name, fa__err *err) {
  if (!t) FAIL(FA_ERR_NULL_POINTER, "%s is NULL", name);
  if (!t->data) FAIL(FA_ERR_NULL_POINTER, "%s->data is NULL", name);
  if ((int)t->dtype < FA_F32 || (int)t->dtype > FA_F8_E4M3) FAIL(FA_ERR_DTYPE, "%s->dtype is not an fa_dtype", name);
  if ((int)t->memory < FA_MEMORY_AUTO || (int)t->memory > FA_MEMORY_CUDA)
    FAIL(FA_ERR_OPTION, "%s->memory is not an fa_memory", name);
  return FA_OK;
}

fa_status fa__need_sizes(const fa_tensor *t, const char *name, int ndim, fa__err *err) {
  for (int d = 0; d < ndim; ++d)
    if (t->shape[d] <= 0) FAIL(FA_ERR_BAD_SIZE, "%s->shape[%d] = %lld must be > 0", name, d, (long long)t->shape[d]);
  return FA_OK;
}

fa_status fa__need_shape(const fa_tensor *t, const char *name, int ndim, const int64_t *want, fa__err *err) {
  for (int d = 0; d < ndim; ++d)
    if (t->shape[d] != want[d])
      FAIL(FA_ERR_SHAPE, "%s->shape[%d] = %lld, expected %lld", name, d, (long long)t->shape[d], (long long)want[d]);
  return FA_OK;
}

/* A [B, Hq, Lq, Lk] operand (mask, bias): each dim is the logical size, or 1
 * (broadcast). Broadcast dims get stride 0 in the copy the backends see. */
fa_status fa__broadcastable(fa_tensor *t, const char *name, const int64_t *logical, fa__err *err) {
  for (int d = 0; d < 4; ++d) {
    if (t->shape[d] == 1 && logical[d] != 1) {
      t->stride[d] = 0;
    } else if (t->shape[d] != logical[d]) {
      FAIL(FA_ERR_SHAPE, "%s->shape[%d] = %lld, expected %lld or 1 (broadcast)", name, d, (long long)t->shape[d],
           (long long)logical[d]);
    } else if (logical[d] == 1) {
      t->stride[d] = 0;
    }
  }
  return FA_OK;
}

/* |x| as an unsigned 64-bit number (INT64_MIN included). */
uint64_t fa__abs_u64(int64_t x) {
  return x < 0 ? 0u - (uint64_t)x : (uint64_t)x;
}

/* The byte range of t, or FA_ERR_SHAPE when it cannot be one: its byte
 * extent sum((shape[d] - 1) * |stride[d]|) * element size (plus the last
 * element) overflows int64, or [lo, hi) taken from the data pointer runs
 * below address 0 or past the last address. Without this a hostile stride
 * (2^61 on an f32 tensor) wraps the pointer arithmetic of every backend,
 * and the overlap checks below, which compare these ranges, are fooled by
 * the wrap. Dims of size 1 are never stepped along: their stride is free. */
fa_status fa__extent_of(const fa_tensor *t, const char *name, int ndim, fa__extent *e, fa__err *err) {
  const uint64_t es = fa_dtype_size(t->dtype);
  const uint64_t max_elems = (uint64_t)INT64_MAX / es - 1; /* lo + hi, so that (lo + hi + 1) * es fits */
  uint64_t lo = 0, hi = 0;                                 /* elements below / above data */
  for (int d = 0; d < ndim; ++d) {
    if (t->shape[d] <= 1) continue;
    uint64_t span;
    if (__builtin_mul_overflow((uint64_t)(t->shape[d] - 1), fa__abs_u64(t->stride[d]), &span) || span > max_elems)
      FAIL(FA_ERR_SHAPE, "%s->stride[%d] = %lld with shape[%d] = %lld: the tensor's byte fa__extent overflows", name, d,
           (long long)t->stride[d], d, (long long)t->shape[d]);
    if (t->stride[d] < 0)
      lo += span;
    else
      hi += span;
    if (lo + hi > max_elems) /* each is <= max_elems < 2^63: the sum does not wrap */
      FAIL(FA_ERR_SHAPE, "%s->stride[%d] = %lld: the tensor's byte fa__extent overflows", name, d,
           (long long)t->stride[d]);
  }
  const uint64_t base = (uint64_t)(uintptr_t)t->data, below = lo * es, above = (hi + 1) * es;
  if (base % es != 0) /* the backends load whole elements: a misaligned one is undefined behaviour in C */
    FAIL(FA_ERR_SHAPE, "%s->data = %p is not aligned to its %u-byte %s elements", name, t->data, (unsigned)es,
         fa_dtype_name(t->dtype));
  if (below > base)
    FAIL(FA_ERR_SHAPE, "%s: its negative strides reach %llu bytes below data = %p, past address 0", name,
         (unsigned long long)below, t->data);
  if (above > (uint64_t)UINTPTR_MAX - base)
    FAIL(FA_ERR_SHAPE, "%s: its strides reach %llu bytes above data = %p, past the last address", name,
         (unsigned long long)above, t->data);
  e->name = name;
  e->lo = (uintptr_t)(base - below);
  e->hi = (uintptr_t)(base + above);
  return FA_OK;
}

/* An output must not write one element twice: sorted by stride, each
 * dimension's stride must clear the whole extent of the smaller ones.
 * Runs after extent_of accepted t, so every (shape - 1) * |stride| fits in
 * int64 and shape * |stride| in uint64. */
fa_status fa__output_injective(const fa_tensor *t, const char *name, int ndim, fa__err *err) {
  int order[4] = {0, 1, 2, 3};
  for (int a = 0; a < ndim; ++a)
    for (int b = a + 1; b < ndim; ++b)
      if (fa__abs_u64(t->stride[order[b]]) < fa__abs_u64(t->stride[order[a]])) {
        const int tmp = order[a];
        order[a] = order[b];
        order[b] = tmp;
      }
  uint64_t span = 1; /* elements covered by the dims so far */
  for (int a = 0; a < ndim; ++a) {
    const int d = order[a];
    if (t->shape[d] == 1) continue;
    const uint64_t s = fa__abs_u64(t->stride[d]);
    if (s < span)
      FAIL(FA_ERR_OVERLAP, "%s: stride[%d] = %lld makes elements of %s overlap each other", name, d,
           (long long)t->stride[d], name);
    span = s * (uint64_t)t->shape[d];
  }
  return FA_OK;
}

/* Every size product a backend forms (a head's Lq x Lk scores in ref, the
 * elements of a tensor, tile and row counts) is a product of some of B,
 * Hq, Lq, Lk and max(D, Dv). Bounding the product of all five by 2^60 keeps
 * each of those, in bytes, inside int64 and size_t. Only inputs that
 * broadcast with stride 0 can describe such sizes at all: an output's own
 * extent already bounds its element count. */
fa_status fa__sizes_fit(int64_t B, int64_t Hq, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, fa__err *err) {
  uint64_t limit = (uint64_t)1 << 60;
  if ((uint64_t)SIZE_MAX / 16 < limit) limit = (uint64_t)SIZE_MAX / 16;
  const int64_t dims[5] = {B, Hq, Lq, Lk, D > Dv ? D : Dv};
  uint64_t n = 1;
  for (int i = 0; i < 5; ++i)
    if (__builtin_mul_overflow(n, (uint64_t)dims[i], &n) || n > limit)
      FAIL(FA_ERR_SHAPE,
           "q and k: the sizes B = %lld, Hq = %lld, Lq = %lld, Lk = %lld, max(D, Dv) = %lld multiply to more than "
           "%llu, more than the library can index",
           (long long)B, (long long)Hq, (long long)Lq, (long long)Lk, (long long)dims[4], (unsigned long long)limit);
  return FA_OK;
}

fa_status fa__no_overlap(const fa__extent *outs, int nout, const fa__extent *ins, int nin, fa__err *err) {
  for (int a = 0; a < nout; ++a) {
    for (int b = 0; b < nin; ++b)
      if (outs[a].lo < ins[b].hi && ins[b].lo < outs[a].hi)
        FAIL(FA_ERR_OVERLAP, "output %s overlaps input %s in memory", outs[a].name, ins[b].name);
    for (int b = a + 1; b < nout; ++b)
      if (outs[a].lo < outs[b].hi && outs[b].lo < outs[a].hi)
        FAIL(FA_ERR_OVERLAP, "output %s overlaps output %s in memory", outs[a].name, outs[b].name);
  }
  return FA_OK;
}

/* The bytes of an array of n elements of es bytes (int32 lengths, page
 * indices, float tables) for the overlap check: up to the last address. */
fa__extent fa__array_extent(const void *p, uint64_t n, uint64_t es, const char *name) {
  fa__extent e;
  const uint64_t base = (uint64_t)(uintptr_t)p, room = (uint64_t)UINTPTR_MAX - base;
  e.name = name;
  e.lo = (uintptr_t)base;
  e.hi = n > room / es ? UINTPTR_MAX : (uintptr_t)(base + n * es);
  return e;
}

/* Resolves FA_MEMORY_AUTO and checks every tensor lives in one place. */
fa_status fa__resolve_memory(fa_tensor **ts, const char **names, int n, fa_memory *out, fa__err *err) {
  fa_memory where = FA_MEMORY_AUTO;
  const char *first = NULL;
  for (int i = 0; i < n; ++i) {
    if (!ts[i] || !ts[i]->data) continue;
    fa_memory m = ts[i]->memory;
    if (m == FA_MEMORY_AUTO) {
#ifdef FA_HAVE_CUDA
      m = fa__cuda_is_device_pointer(ts[i]->data) ? FA_MEMORY_CUDA : FA_MEMORY_HOST;
#else
      m = FA_MEMORY_HOST;
#endif
    }
    ts[i]->memory = m;
    if (where == FA_MEMORY_AUTO) {
      where = m;
      first = names[i];
    } else if (m != where) {
      FAIL(FA_ERR_MEMORY_SPACE, "%s is in %s memory but %s is in %s memory", names[i],
           m == FA_MEMORY_CUDA ? "CUDA device" : "host", first, where == FA_MEMORY_CUDA ? "CUDA device" : "host");
    }
  }
#ifndef FA_HAVE_CUDA
  if (where == FA_MEMORY_CUDA)
    FAIL(FA_ERR_NO_BACKEND, "%s is marked as CUDA memory, but this build has no cuda backend", first);
#endif
  *out = where == FA_MEMORY_AUTO ? FA_MEMORY_HOST : where;
  return FA_OK;
}

fa_status fa__read_ints(const int32_t *src, int64_t n, const char *name, const char *hint, fa__readback from,
                        int32_t **dst, fa__err *err) {
  *dst = (int32_t *)malloc((size_t)n * sizeof(int32_t));
  if (!*dst) FAIL(FA_ERR_OUT_OF_MEMORY, "cannot allocate %lld ints to check %s", (long long)n, name);
  if (from.where == FA_MEMORY_HOST) {
    memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return FA_OK;
  }
#ifdef FA_HAVE_CUDA
  {
    const fa_status st = fa__cuda_read_back(*dst, src, (size_t)n * sizeof(int32_t), from.stream, name, hint, err);
    if (st != FA_OK) {
      free(*dst);
      *dst = NULL;
    }
    return st;
  }
#else
  (void)hint;
  free(*dst);
  *dst = NULL;
  FAIL(FA_ERR_NO_BACKEND, "%s is in device memory, but this build has no cuda backend", name);
#endif
}

/* What a graph capture can do instead of reading fa_forward's lengths. */
static const char seqlens_hint[] = "pass the lengths in host memory, or make the call outside the capture";

/* Per-batch lengths: each in [0, max]. */
fa_status fa__check_seqlens(const int32_t *s, int64_t B, int64_t max, const char *name, fa__readback from,
                            fa__err *err) {
  int32_t *h;
  CHECK(fa__read_ints(s, B, name, seqlens_hint, from, &h, err));
  for (int64_t b = 0; b < B; ++b)
    if (h[b] < 0 || h[b] > max) {
      const int32_t bad = h[b];
      free(h);
      FAIL(FA_ERR_SEQLENS, "%s[%lld] = %d is outside [0, %lld]", name, (long long)b, bad, (long long)max);
    }
  free(h);
  return FA_OK;
}

/* Cumulative offsets: start at 0, never decrease, end within total; returns
 * the longest sequence. */
fa_status fa__check_cu_seqlens(const int32_t *cu, int64_t nseq, int64_t total, const char *name, fa__readback from,
                               int64_t *longest, fa__err *err) {
  int32_t *h;
  CHECK(fa__read_ints(cu, nseq + 1, name, seqlens_hint, from, &h, err));
  fa_status st = FA_OK;
  int64_t mx = 0;
  if (h[0] != 0) {
    fa__err_set(err, "%s[0] = %d, must be 0", name, h[0]);
    st = FA_ERR_SEQLENS;
  }
  for (int64_t b = 0; st == FA_OK && b < nseq; ++b) {
    if (h[b + 1] < h[b]) {
      fa__err_set(err, "%s decreases at %lld (%d -> %d)", name, (long long)b, h[b], h[b + 1]);
      st = FA_ERR_SEQLENS;
    } else if (h[b + 1] - h[b] > mx) {
      mx = h[b + 1] - h[b];
    }
  }
  if (st == FA_OK && h[nseq] > total) {
    fa__err_set(err, "%s[%lld] = %d exceeds the %lld rows of the tensor", name, (long long)nseq, h[nseq],
                (long long)total);
    st = FA_ERR_SEQLENS;
  }
  free(h);
  *longest = mx > 0 ? mx : 1;
  return st;
}

fa_status fa__check_options(const fa_options *o, fa__err *err) {
  if (!isfinite(o->scale)) FAIL(FA_ERR_OPTION, "opt->scale = %g must be finite (0 = 1/sqrt(D))", o->scale);
  if (!(o->softcap >= 0) || !isfinite(o->softcap))
    FAIL(FA_ERR_OPTION, "opt->softcap = %g must be finite and >= 0 (0 = off)", o->softcap);
  if (!(o->dropout_p >= 0 && o->dropout_p < 1))
    FAIL(FA_ERR_DROPOUT, "opt->dropout_p = %g is outside [0, 1)", o->dropout_p);
  if (o->align != FA_ALIGN_TOP_LEFT && o->align != FA_ALIGN_BOTTOM_RIGHT)
    FAIL(FA_ERR_OPTION, "opt->align = %d is not an fa_align", (int)o->align);
  if (o->block_q < 0) FAIL(FA_ERR_OPTION, "opt->block_q = %d must be >= 0 (0 = default)", o->block_q);
  if (o->block_k < 0) FAIL(FA_ERR_OPTION, "opt->block_k = %d must be >= 0 (0 = default)", o->block_k);
  /* positions i + offset and diag(i) +- a window edge stay far from int64's end */
  if (o->q_offset < 0 || o->q_offset > FA__MAX_POSITION_OFFSET)
    FAIL(FA_ERR_OPTION, "opt->q_offset = %lld is outside [0, 2^60]", (long long)o->q_offset);
  if (o->k_offset < 0 || o->k_offset > FA__MAX_POSITION_OFFSET)
    FAIL(FA_ERR_OPTION, "opt->k_offset = %lld is outside [0, 2^60]", (long long)o->k_offset);
  return FA_OK;
}

void fa__zero_unit_strides(fa_tensor *const *ts, int n) {
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < 4; ++d)
      if (ts[i]->shape[d] == 1) ts[i]->stride[d] = 0;
}
