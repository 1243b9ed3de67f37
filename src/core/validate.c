/* Turns the public arguments of a call into an fa__problem, or a status and
 * a message that names the argument. Every check of DESIGN.md's "Bad input"
 * lives here, once, before any backend runs. */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../rules/dropout.h"

#ifdef FA_HAVE_CUDA
#include "../cuda/cuda_hooks.h"
#endif

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

static int is_float_dtype(fa_dtype t) {
  return t == FA_F32 || t == FA_F64 || t == FA_F16 || t == FA_BF16;
}

static fa_status need_tensor(const fa_tensor *t, const char *name, fa__err *err) {
  if (!t) FAIL(FA_ERR_NULL_POINTER, "%s is NULL", name);
  if (!t->data) FAIL(FA_ERR_NULL_POINTER, "%s->data is NULL", name);
  if ((int)t->dtype < FA_F32 || (int)t->dtype > FA_BOOL) FAIL(FA_ERR_DTYPE, "%s->dtype is not an fa_dtype", name);
  if ((int)t->memory < FA_MEMORY_AUTO || (int)t->memory > FA_MEMORY_CUDA)
    FAIL(FA_ERR_OPTION, "%s->memory is not an fa_memory", name);
  return FA_OK;
}

static fa_status need_sizes(const fa_tensor *t, const char *name, int ndim, fa__err *err) {
  for (int d = 0; d < ndim; ++d)
    if (t->shape[d] <= 0) FAIL(FA_ERR_BAD_SIZE, "%s->shape[%d] = %lld must be > 0", name, d, (long long)t->shape[d]);
  return FA_OK;
}

static fa_status need_shape(const fa_tensor *t, const char *name, int ndim, const int64_t *want, fa__err *err) {
  for (int d = 0; d < ndim; ++d)
    if (t->shape[d] != want[d])
      FAIL(FA_ERR_SHAPE, "%s->shape[%d] = %lld, expected %lld", name, d, (long long)t->shape[d], (long long)want[d]);
  return FA_OK;
}

/* A [B, Hq, Lq, Lk] operand (mask, bias): each dim is the logical size, or 1
 * (broadcast). Broadcast dims get stride 0 in the copy the backends see. */
static fa_status broadcastable(fa_tensor *t, const char *name, const int64_t *logical, fa__err *err) {
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
static uint64_t abs_u64(int64_t x) {
  return x < 0 ? 0u - (uint64_t)x : (uint64_t)x;
}

/* Byte range [lo, hi) a tensor's elements can touch. */
typedef struct extent {
  const char *name;
  uintptr_t lo, hi;
} extent;

/* The byte range of t, or FA_ERR_SHAPE when it cannot be one: its byte
 * extent sum((shape[d] - 1) * |stride[d]|) * element size (plus the last
 * element) overflows int64, or [lo, hi) taken from the data pointer runs
 * below address 0 or past the last address. Without this a hostile stride
 * (2^61 on an f32 tensor) wraps the pointer arithmetic of every backend,
 * and the overlap checks below, which compare these ranges, are fooled by
 * the wrap. Dims of size 1 are never stepped along: their stride is free. */
static fa_status extent_of(const fa_tensor *t, const char *name, int ndim, extent *e, fa__err *err) {
  const uint64_t es = fa_dtype_size(t->dtype);
  const uint64_t max_elems = (uint64_t)INT64_MAX / es - 1; /* lo + hi, so that (lo + hi + 1) * es fits */
  uint64_t lo = 0, hi = 0;                                 /* elements below / above data */
  for (int d = 0; d < ndim; ++d) {
    if (t->shape[d] <= 1) continue;
    uint64_t span;
    if (__builtin_mul_overflow((uint64_t)(t->shape[d] - 1), abs_u64(t->stride[d]), &span) || span > max_elems)
      FAIL(FA_ERR_SHAPE, "%s->stride[%d] = %lld with shape[%d] = %lld: the tensor's byte extent overflows", name, d,
           (long long)t->stride[d], d, (long long)t->shape[d]);
    if (t->stride[d] < 0)
      lo += span;
    else
      hi += span;
    if (lo + hi > max_elems) /* each is <= max_elems < 2^63: the sum does not wrap */
      FAIL(FA_ERR_SHAPE, "%s->stride[%d] = %lld: the tensor's byte extent overflows", name, d, (long long)t->stride[d]);
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
static fa_status output_injective(const fa_tensor *t, const char *name, int ndim, fa__err *err) {
  int order[4] = {0, 1, 2, 3};
  for (int a = 0; a < ndim; ++a)
    for (int b = a + 1; b < ndim; ++b)
      if (abs_u64(t->stride[order[b]]) < abs_u64(t->stride[order[a]])) {
        const int tmp = order[a];
        order[a] = order[b];
        order[b] = tmp;
      }
  uint64_t span = 1; /* elements covered by the dims so far */
  for (int a = 0; a < ndim; ++a) {
    const int d = order[a];
    if (t->shape[d] == 1) continue;
    const uint64_t s = abs_u64(t->stride[d]);
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
static fa_status sizes_fit(int64_t B, int64_t Hq, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, fa__err *err) {
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

static fa_status no_overlap(const extent *outs, int nout, const extent *ins, int nin, fa__err *err) {
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
static extent array_extent(const void *p, uint64_t n, uint64_t es, const char *name) {
  extent e;
  const uint64_t base = (uint64_t)(uintptr_t)p, room = (uint64_t)UINTPTR_MAX - base;
  e.name = name;
  e.lo = (uintptr_t)base;
  e.hi = n > room / es ? UINTPTR_MAX : (uintptr_t)(base + n * es);
  return e;
}

/* Resolves FA_MEMORY_AUTO and checks every tensor lives in one place. */
static fa_status resolve_memory(fa_tensor **ts, const char **names, int n, fa_memory *out, fa__err *err) {
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

/* Reads n int32 values that may live in device memory. */
static fa_status read_ints(const int32_t *src, int64_t n, fa_memory where, int32_t **dst, fa__err *err) {
  *dst = (int32_t *)malloc((size_t)n * sizeof(int32_t));
  if (!*dst) FAIL(FA_ERR_OUT_OF_MEMORY, "cannot allocate %lld ints to check sequence lengths", (long long)n);
  if (where == FA_MEMORY_HOST) {
    memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return FA_OK;
  }
#ifdef FA_HAVE_CUDA
  {
    const fa_status st = fa__cuda_copy_to_host(*dst, src, (size_t)n * sizeof(int32_t), err);
    if (st != FA_OK) {
      free(*dst);
      *dst = NULL;
    }
    return st;
  }
#else
  free(*dst);
  *dst = NULL;
  FAIL(FA_ERR_NO_BACKEND, "device memory without a cuda backend");
#endif
}

/* Per-batch lengths: each in [0, max]. */
static fa_status check_seqlens(const int32_t *s, int64_t B, int64_t max, const char *name, fa_memory where,
                               fa__err *err) {
  int32_t *h;
  CHECK(read_ints(s, B, where, &h, err));
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
static fa_status check_cu_seqlens(const int32_t *cu, int64_t nseq, int64_t total, const char *name, fa_memory where,
                                  int64_t *longest, fa__err *err) {
  int32_t *h;
  CHECK(read_ints(cu, nseq + 1, where, &h, err));
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

static fa_status check_options(const fa_options *o, fa__err *err) {
  if (!isfinite(o->scale)) FAIL(FA_ERR_OPTION, "opt->scale = %g must be finite (0 = 1/sqrt(D))", o->scale);
  if (!(o->softcap >= 0) || !isfinite(o->softcap))
    FAIL(FA_ERR_OPTION, "opt->softcap = %g must be finite and >= 0 (0 = off)", o->softcap);
  if (!(o->dropout_p >= 0 && o->dropout_p < 1))
    FAIL(FA_ERR_DROPOUT, "opt->dropout_p = %g is outside [0, 1)", o->dropout_p);
  if (o->align != FA_ALIGN_TOP_LEFT && o->align != FA_ALIGN_BOTTOM_RIGHT)
    FAIL(FA_ERR_OPTION, "opt->align = %d is not an fa_align", (int)o->align);
  if (o->block_q < 0) FAIL(FA_ERR_OPTION, "opt->block_q = %d must be >= 0 (0 = default)", o->block_q);
  if (o->block_k < 0) FAIL(FA_ERR_OPTION, "opt->block_k = %d must be >= 0 (0 = default)", o->block_k);
  return FA_OK;
}

static fa_status kv_problem_build(fa__problem *p, const fa__call *c, fa__err *err);

fa_status fa__problem_build(fa__problem *p, const fa__call *c, fa__err *err) {
  if (c->kvcache) return kv_problem_build(p, c, err);
  static const fa_options defaults;
  const fa_options *o = c->opt ? c->opt : &defaults;
  const int bwd = c->pass == FA__BACKWARD;
  memset(p, 0, sizeof *p);
  p->pass = c->pass;

  /* presence */
  CHECK(need_tensor(c->q, "q", err));
  CHECK(need_tensor(c->k, "k", err));
  CHECK(need_tensor(c->v, "v", err));
  if (bwd) {
    CHECK(need_tensor(c->o, "o", err));
    CHECK(need_tensor(c->dout, "dout", err));
    CHECK(need_tensor(c->lse, "lse", err));
    CHECK(need_tensor(c->dq, "dq", err));
    CHECK(need_tensor(c->dk, "dk", err));
    CHECK(need_tensor(c->dv, "dv", err));
  } else {
    CHECK(need_tensor(c->o, "o", err));
    if (c->lse && c->lse->data) CHECK(need_tensor(c->lse, "lse", err));
  }
  CHECK(check_options(o, err));
  {
    const void *arrays[] = {o->seqlens_q, o->seqlens_k, o->cu_seqlens_q, o->cu_seqlens_k, o->alibi_slopes};
    const char *names[] = {"opt->seqlens_q", "opt->seqlens_k", "opt->cu_seqlens_q", "opt->cu_seqlens_k",
                           "opt->alibi_slopes"};
    for (int i = 0; i < 5; ++i)
      if ((uintptr_t)arrays[i] % 4 != 0)
        FAIL(FA_ERR_OPTION, "%s = %p is not aligned to its 4-byte elements", names[i], arrays[i]);
  }

  /* dtypes */
  const fa_dtype dt = c->q->dtype;
  if (!is_float_dtype(dt)) FAIL(FA_ERR_DTYPE, "q->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(dt));
  {
    const fa_tensor *same[] = {
        c->k, c->v, c->o, bwd ? c->dout : NULL, bwd ? c->dq : NULL, bwd ? c->dk : NULL, bwd ? c->dv : NULL};
    const char *names[] = {"k", "v", "o", "dout", "dq", "dk", "dv"};
    for (int i = 0; i < 7; ++i)
      if (same[i] && same[i]->dtype != dt)
        FAIL(FA_ERR_DTYPE, "%s->dtype = %s differs from q->dtype = %s", names[i], fa_dtype_name(same[i]->dtype),
             fa_dtype_name(dt));
  }
  const int has_lse = c->lse && c->lse->data;
  if (has_lse && c->lse->dtype != FA_F32 && c->lse->dtype != FA_F64)
    FAIL(FA_ERR_DTYPE, "lse->dtype = %s, expected f32 (or f64 on ref)", fa_dtype_name(c->lse->dtype));

  /* sizes */
  CHECK(need_sizes(c->q, "q", 4, err));
  CHECK(need_sizes(c->k, "k", 4, err));
  CHECK(need_sizes(c->v, "v", 4, err));
  const int varlen = o->cu_seqlens_q || o->cu_seqlens_k;
  if (varlen && !(o->cu_seqlens_q && o->cu_seqlens_k))
    FAIL(FA_ERR_NULL_POINTER, "%s is NULL: the packed layout needs both cu_seqlens_q and cu_seqlens_k",
         o->cu_seqlens_q ? "opt->cu_seqlens_k" : "opt->cu_seqlens_q");
  if (varlen && (o->seqlens_q || o->seqlens_k))
    FAIL(FA_ERR_OPTION, "opt->seqlens_q/k and opt->cu_seqlens_q/k cannot both be given");
  if (varlen && o->num_seqs <= 0)
    FAIL(FA_ERR_BAD_SIZE, "opt->num_seqs = %lld must be > 0 with cu_seqlens", (long long)o->num_seqs);
  if (varlen && (o->num_seqs > INT32_MAX || (uint64_t)o->num_seqs >= SIZE_MAX / sizeof(int32_t)))
    FAIL(FA_ERR_BAD_SIZE, "opt->num_seqs = %lld is more than the 2^31 - 1 sequences int32 offsets can describe",
         (long long)o->num_seqs);

  const int64_t Bt = c->q->shape[0], Hq = c->q->shape[1], Lq = c->q->shape[2], D = c->q->shape[3];
  const int64_t Hkv = c->k->shape[1], Lk = c->k->shape[2], Dv = c->v->shape[3];
  if (varlen && Bt != 1)
    FAIL(FA_ERR_SHAPE, "q->shape[0] = %lld, expected 1 in the packed (cu_seqlens) layout", (long long)Bt);
  {
    const int64_t want_k[4] = {Bt, Hkv, Lk, D};
    const int64_t want_v[4] = {Bt, Hkv, Lk, Dv};
    CHECK(need_shape(c->k, "k", 4, want_k, err));
    CHECK(need_shape(c->v, "v", 4, want_v, err));
  }
  if (Hq % Hkv != 0)
    FAIL(FA_ERR_HEADS, "q has %lld heads, not a multiple of the %lld heads of k and v", (long long)Hq, (long long)Hkv);
  {
    const int64_t want_o[4] = {Bt, Hq, Lq, Dv};
    CHECK(need_shape(c->o, "o", 4, want_o, err));
    if (has_lse) CHECK(need_shape(c->lse, "lse", 3, want_o, err));
    if (bwd) {
      CHECK(need_shape(c->dout, "dout", 4, want_o, err));
      CHECK(need_shape(c->dq, "dq", 4, c->q->shape, err));
      CHECK(need_shape(c->dk, "dk", 4, c->k->shape, err));
      CHECK(need_shape(c->dv, "dv", 4, c->v->shape, err));
    }
  }
  CHECK(sizes_fit(varlen ? o->num_seqs : Bt, Hq, Lq, Lk, D, Dv, err));

  /* memory space */
  fa_tensor q = *c->q, k = *c->k, v = *c->v, out = *c->o, lse, dout, dq, dk, dv, mask = o->mask, bias = o->bias, dbias;
  memset(&lse, 0, sizeof lse);
  memset(&dout, 0, sizeof dout);
  memset(&dq, 0, sizeof dq);
  memset(&dk, 0, sizeof dk);
  memset(&dv, 0, sizeof dv);
  memset(&dbias, 0, sizeof dbias);
  if (has_lse) lse = *c->lse;
  if (bwd) {
    dout = *c->dout;
    dq = *c->dq;
    dk = *c->dk;
    dv = *c->dv;
  }
  const int has_mask = mask.data != NULL, has_bias = bias.data != NULL;
  const int want_dbias = bwd && c->dbias && c->dbias->data;
  if (want_dbias) {
    CHECK(need_tensor(c->dbias, "dbias", err));
    if (!has_bias) FAIL(FA_ERR_OPTION, "dbias is given but opt->bias is not");
    dbias = *c->dbias;
  }
  if (has_mask) CHECK(need_tensor(&mask, "opt->mask", err));
  if (has_bias) CHECK(need_tensor(&bias, "opt->bias", err));
  {
    fa_tensor *ts[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask, &bias, &dbias};
    const char *names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "opt->mask", "opt->bias", "dbias"};
    CHECK(resolve_memory(ts, names, 12, &p->memory, err));
  }

  /* byte extents, before anything below (or a backend) steps along a stride */
  extent outs[5], ins[8];
  int no = 0, ni = 0;
  CHECK(extent_of(&q, "q", 4, &ins[ni++], err));
  CHECK(extent_of(&k, "k", 4, &ins[ni++], err));
  CHECK(extent_of(&v, "v", 4, &ins[ni++], err));
  if (bwd) {
    CHECK(extent_of(&out, "o", 4, &ins[ni++], err));
    CHECK(extent_of(&dout, "dout", 4, &ins[ni++], err));
    CHECK(extent_of(&lse, "lse", 3, &ins[ni++], err));
    CHECK(extent_of(&dq, "dq", 4, &outs[no++], err));
    CHECK(extent_of(&dk, "dk", 4, &outs[no++], err));
    CHECK(extent_of(&dv, "dv", 4, &outs[no++], err));
  } else {
    CHECK(extent_of(&out, "o", 4, &outs[no++], err));
    if (has_lse) CHECK(extent_of(&lse, "lse", 3, &outs[no++], err));
  }

  /* lengths */
  int64_t B = Bt, maxq = Lq, maxk = Lk;
  if (varlen) {
    B = o->num_seqs;
    CHECK(check_cu_seqlens(o->cu_seqlens_q, B, Lq, "opt->cu_seqlens_q", p->memory, &maxq, err));
    CHECK(check_cu_seqlens(o->cu_seqlens_k, B, Lk, "opt->cu_seqlens_k", p->memory, &maxk, err));
  } else {
    if (o->seqlens_q) CHECK(check_seqlens(o->seqlens_q, B, Lq, "opt->seqlens_q", p->memory, err));
    if (o->seqlens_k) CHECK(check_seqlens(o->seqlens_k, B, Lk, "opt->seqlens_k", p->memory, err));
  }

  /* mask, bias, dbias: [B, Hq, Lq, Lk] with broadcasting */
  const int64_t logical[4] = {B, Hq, maxq, maxk};
  if (has_mask) {
    if (mask.dtype != FA_BOOL) FAIL(FA_ERR_DTYPE, "opt->mask->dtype = %s, expected bool", fa_dtype_name(mask.dtype));
    CHECK(need_sizes(&mask, "opt->mask", 4, err));
    CHECK(broadcastable(&mask, "opt->mask", logical, err));
    CHECK(extent_of(&mask, "opt->mask", 4, &ins[ni++], err));
  }
  if (has_bias) {
    if (!is_float_dtype(bias.dtype))
      FAIL(FA_ERR_DTYPE, "opt->bias->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(bias.dtype));
    CHECK(need_sizes(&bias, "opt->bias", 4, err));
    CHECK(broadcastable(&bias, "opt->bias", logical, err));
    CHECK(extent_of(&bias, "opt->bias", 4, &ins[ni++], err));
  }
  if (want_dbias) {
    if (!is_float_dtype(dbias.dtype))
      FAIL(FA_ERR_DTYPE, "dbias->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(dbias.dtype));
    CHECK(need_shape(&dbias, "dbias", 4, o->bias.shape, err));
    CHECK(extent_of(&dbias, "dbias", 4, &outs[no++], err));
    CHECK(output_injective(&dbias, "dbias", 4, err));
    for (int d = 0; d < 4; ++d) /* summed dims: the backend accumulates into index 0 */
      if (dbias.shape[d] == 1) dbias.stride[d] = 0;
  }

  /* overlap: outputs must not alias inputs or each other */
  if (bwd) {
    CHECK(output_injective(&dq, "dq", 4, err));
    CHECK(output_injective(&dk, "dk", 4, err));
    CHECK(output_injective(&dv, "dv", 4, err));
  } else {
    CHECK(output_injective(&out, "o", 4, err));
    if (has_lse) CHECK(output_injective(&lse, "lse", 3, err));
  }
  CHECK(no_overlap(outs, no, ins, ni, err));

  /* A size-1 dimension is never stepped along, so its stride is not
   * checked above, however hostile; the backends get 0 there, so that no
   * address is ever formed from it (a kernel that computes row pointers it
   * does not load from would otherwise overflow a pointer). lse's shape[3]
   * and stride[3] mean nothing. */
  {
    fa_tensor *ts[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask, &bias, &dbias};
    for (int i = 0; i < 12; ++i)
      for (int d = 0; d < 4; ++d)
        if (ts[i]->shape[d] == 1) ts[i]->stride[d] = 0;
    lse.stride[3] = 0;
  }

  /* resolved problem */
  p->B = B;
  p->Hq = Hq;
  p->Hkv = Hkv;
  p->group = Hq / Hkv;
  p->Lq = maxq;
  p->Lk = maxk;
  p->D = D;
  p->Dv = Dv;
  p->dtype = dt;
  p->varlen = varlen;
  p->q = q;
  p->k = k;
  p->v = v;
  p->o = out;
  p->lse = lse;
  p->dout = dout;
  p->dq = dq;
  p->dk = dk;
  p->dv = dv;
  p->mask = mask;
  p->bias = bias;
  p->dbias = dbias;
  p->seqlens_q = varlen ? NULL : o->seqlens_q;
  p->seqlens_k = varlen ? NULL : o->seqlens_k;
  p->cu_seqlens_q = o->cu_seqlens_q;
  p->cu_seqlens_k = o->cu_seqlens_k;
  p->scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)D);
  p->softcap = o->softcap;
  p->alibi_slopes = o->alibi_slopes;
  p->window_left = -1;
  p->window_right = -1;
  if (o->use_window) {
    p->window_left = o->window_left < 0 ? -1 : o->window_left;
    p->window_right = o->window_right < 0 ? -1 : o->window_right;
  }
  if (o->causal) p->window_right = 0; /* causal AND window: j <= diag(i) + min(right, 0) */
  /* A window edge farther than any row-to-key distance bounds nothing, and
   * diag(i) - left, diag(i) + right would overflow int64 near INT64_MAX: cut
   * both to Lq + Lk, which every |diag(i) - j| stays below (same result). */
  if (p->window_left > maxq + maxk) p->window_left = maxq + maxk;
  if (p->window_right > maxq + maxk) p->window_right = maxq + maxk;
  p->bottom_right = o->align == FA_ALIGN_BOTTOM_RIGHT;
  p->dropout_p = o->dropout_p;
  if (o->dropout_p > 0) {
    p->dropout_threshold = fa__dropout_threshold(o->dropout_p);
    p->dropout_scale = 1.0 / (1.0 - o->dropout_p);
  } else {
    p->dropout_threshold = 0xffffffffu;
    p->dropout_scale = 1.0;
  }
  p->dropout_seed = o->dropout_seed;
  p->dropout_offset = o->dropout_offset;
  p->deterministic = o->deterministic;
  p->block_q = o->block_q;
  p->block_k = o->block_k;
  return FA_OK;
}

/* ---- fa_forward_kvcache ------------------------------------------------- */

/* Options the cache call cannot take: it fixes the lengths and alignment itself. */
static fa_status kv_options(const fa_options *o, fa__err *err) {
  CHECK(check_options(o, err));
  if (o->mask.data) FAIL(FA_ERR_OPTION, "opt->mask: fa_forward_kvcache takes no boolean mask");
  if (o->bias.data) FAIL(FA_ERR_OPTION, "opt->bias: fa_forward_kvcache takes no additive bias");
  if (o->dropout_p != 0) FAIL(FA_ERR_OPTION, "opt->dropout_p = %g: fa_forward_kvcache has no dropout", o->dropout_p);
  if (o->seqlens_q || o->seqlens_k || o->cu_seqlens_q || o->cu_seqlens_k)
    FAIL(FA_ERR_OPTION, "opt->%s: fa_forward_kvcache takes the lengths from cache->cache_seqlens",
         o->seqlens_q      ? "seqlens_q"
         : o->seqlens_k    ? "seqlens_k"
         : o->cu_seqlens_q ? "cu_seqlens_q"
                           : "cu_seqlens_k");
  if ((uintptr_t)o->alibi_slopes % 4 != 0)
    FAIL(FA_ERR_OPTION, "opt->alibi_slopes = %p is not aligned to its 4-byte elements", (const void *)o->alibi_slopes);
  return FA_OK;
}

static fa_status kv_problem_build(fa__problem *p, const fa__call *c, fa__err *err) {
  static const fa_options defaults;
  const fa_options *o = c->opt ? c->opt : &defaults;
  const fa_kvcache *kc = c->cache;
  memset(p, 0, sizeof *p);
  p->pass = FA__FORWARD;
  p->kvcache = 1;

  CHECK(need_tensor(c->q, "q", err));
  if (!kc) FAIL(FA_ERR_NULL_POINTER, "cache is NULL");
  CHECK(need_tensor(&kc->k_cache, "cache->k_cache", err));
  CHECK(need_tensor(&kc->v_cache, "cache->v_cache", err));
  CHECK(need_tensor(c->o, "o", err));
  const int has_lse = c->lse && c->lse->data;
  if (has_lse) CHECK(need_tensor(c->lse, "lse", err));
  const int has_new = kc->k_new.data || kc->v_new.data;
  if (has_new) {
    if (!kc->k_new.data) FAIL(FA_ERR_NULL_POINTER, "cache->k_new.data is NULL but cache->v_new is given");
    if (!kc->v_new.data) FAIL(FA_ERR_NULL_POINTER, "cache->v_new.data is NULL but cache->k_new is given");
    CHECK(need_tensor(&kc->k_new, "cache->k_new", err));
    CHECK(need_tensor(&kc->v_new, "cache->v_new", err));
  }
  if (!kc->cache_seqlens) FAIL(FA_ERR_NULL_POINTER, "cache->cache_seqlens is NULL");
  CHECK(kv_options(o, err));
  {
    const void *arrays[] = {kc->cache_seqlens, kc->block_table, kc->rotary_cos, kc->rotary_sin};
    const char *names[] = {"cache->cache_seqlens", "cache->block_table", "cache->rotary_cos", "cache->rotary_sin"};
    for (int i = 0; i < 4; ++i)
      if ((uintptr_t)arrays[i] % 4 != 0)
        FAIL(FA_ERR_OPTION, "%s = %p is not aligned to its 4-byte elements", names[i], arrays[i]);
  }
  if (kc->num_splits < 0) FAIL(FA_ERR_OPTION, "cache->num_splits = %d must be >= 0 (0 = auto)", kc->num_splits);

  /* dtypes */
  const fa_dtype dt = c->q->dtype;
  if (!is_float_dtype(dt)) FAIL(FA_ERR_DTYPE, "q->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(dt));
  {
    const fa_tensor *same[] = {&kc->k_cache, &kc->v_cache, c->o, has_new ? &kc->k_new : NULL,
                               has_new ? &kc->v_new : NULL};
    const char *names[] = {"cache->k_cache", "cache->v_cache", "o", "cache->k_new", "cache->v_new"};
    for (int i = 0; i < 5; ++i)
      if (same[i] && same[i]->dtype != dt)
        FAIL(FA_ERR_DTYPE, "%s->dtype = %s differs from q->dtype = %s", names[i], fa_dtype_name(same[i]->dtype),
             fa_dtype_name(dt));
  }
  if (has_lse && c->lse->dtype != FA_F32 && c->lse->dtype != FA_F64)
    FAIL(FA_ERR_DTYPE, "lse->dtype = %s, expected f32 (or f64 on ref)", fa_dtype_name(c->lse->dtype));

  /* shapes */
  CHECK(need_sizes(c->q, "q", 4, err));
  CHECK(need_sizes(&kc->k_cache, "cache->k_cache", 4, err));
  CHECK(need_sizes(&kc->v_cache, "cache->v_cache", 4, err));
  const int64_t B = c->q->shape[0], Hq = c->q->shape[1], Lq = c->q->shape[2], D = c->q->shape[3];
  const int64_t pages = kc->k_cache.shape[0], Hkv = kc->k_cache.shape[1], rows = kc->k_cache.shape[2];
  const int64_t Dv = kc->v_cache.shape[3];
  const int paged = kc->block_table != NULL;
  int64_t capacity = rows, bt_stride = 0;
  if (kc->k_cache.shape[3] != D)
    FAIL(FA_ERR_SHAPE, "cache->k_cache->shape[3] = %lld, expected D = %lld (q->shape[3])",
         (long long)kc->k_cache.shape[3], (long long)D);
  if (paged) {
    if (kc->max_blocks <= 0)
      FAIL(FA_ERR_BAD_SIZE, "cache->max_blocks = %lld must be > 0 with a block table", (long long)kc->max_blocks);
    bt_stride = kc->block_table_stride ? kc->block_table_stride : kc->max_blocks;
    if (bt_stride < kc->max_blocks)
      FAIL(FA_ERR_SHAPE, "cache->block_table_stride = %lld is less than cache->max_blocks = %lld",
           (long long)kc->block_table_stride, (long long)kc->max_blocks);
    if (__builtin_mul_overflow(kc->max_blocks, rows, &capacity) || capacity > INT32_MAX ||
        __builtin_mul_overflow(bt_stride, B, &(int64_t){0}) || bt_stride * B > (int64_t)(SIZE_MAX / 8))
      FAIL(FA_ERR_SHAPE, "cache->max_blocks = %lld pages of %lld rows: more keys than int32 lengths describe",
           (long long)kc->max_blocks, (long long)rows);
  } else if (pages != B) {
    FAIL(FA_ERR_SHAPE, "cache->k_cache->shape[0] = %lld, expected B = %lld (q->shape[0]; no block table)",
         (long long)pages, (long long)B);
  }
  {
    const int64_t want_v[4] = {pages, Hkv, rows, Dv};
    CHECK(need_shape(&kc->v_cache, "cache->v_cache", 3, want_v, err));
  }
  if (Hq % Hkv != 0)
    FAIL(FA_ERR_HEADS, "q has %lld heads, not a multiple of the %lld heads of the KV cache", (long long)Hq,
         (long long)Hkv);
  int64_t L_new = 0;
  if (has_new) {
    CHECK(need_sizes(&kc->k_new, "cache->k_new", 4, err));
    L_new = kc->k_new.shape[2];
    const int64_t want_k[4] = {B, Hkv, L_new, D}, want_v[4] = {B, Hkv, L_new, Dv};
    CHECK(need_shape(&kc->k_new, "cache->k_new", 4, want_k, err));
    CHECK(need_shape(&kc->v_new, "cache->v_new", 4, want_v, err));
  }
  {
    const int64_t want_o[4] = {B, Hq, Lq, Dv};
    CHECK(need_shape(c->o, "o", 4, want_o, err));
    if (has_lse) CHECK(need_shape(c->lse, "lse", 3, want_o, err));
  }
  CHECK(sizes_fit(B, Hq, Lq, capacity, D, Dv, err));
  const int has_rot = kc->rotary_cos || kc->rotary_sin;
  if (has_rot) {
    if (!kc->rotary_cos || !kc->rotary_sin)
      FAIL(FA_ERR_NULL_POINTER, "%s is NULL but %s is given",
           kc->rotary_cos ? "cache->rotary_sin" : "cache->rotary_cos",
           kc->rotary_cos ? "cache->rotary_cos" : "cache->rotary_sin");
    if (kc->rotary_dim <= 0 || kc->rotary_dim % 2 || kc->rotary_dim > D)
      FAIL(FA_ERR_OPTION, "cache->rotary_dim = %lld must be even and in [2, D = %lld]", (long long)kc->rotary_dim,
           (long long)D);
    if (kc->rotary_len <= 0) FAIL(FA_ERR_BAD_SIZE, "cache->rotary_len = %lld must be > 0", (long long)kc->rotary_len);
  }

  /* memory */
  fa_tensor q = *c->q, kcache = kc->k_cache, vcache = kc->v_cache, out = *c->o, lse, knew, vnew;
  memset(&lse, 0, sizeof lse);
  memset(&knew, 0, sizeof knew);
  memset(&vnew, 0, sizeof vnew);
  if (has_lse) lse = *c->lse;
  if (has_new) {
    knew = kc->k_new;
    vnew = kc->v_new;
  }
  {
    fa_tensor *ts[] = {&q, &kcache, &vcache, &knew, &vnew, &out, &lse};
    const char *names[] = {"q", "cache->k_cache", "cache->v_cache", "cache->k_new", "cache->v_new", "o", "lse"};
    CHECK(resolve_memory(ts, names, 7, &p->memory, err));
  }

  /* extents and overlap: the caches are outputs when the call appends */
  extent outs[4], ins[5];
  int no = 0, ni = 0;
  CHECK(extent_of(&q, "q", 4, &ins[ni++], err));
  CHECK(extent_of(&out, "o", 4, &outs[no++], err));
  CHECK(output_injective(&out, "o", 4, err));
  if (has_lse) {
    CHECK(extent_of(&lse, "lse", 3, &outs[no++], err));
    CHECK(output_injective(&lse, "lse", 3, err));
  }
  if (has_new) {
    CHECK(extent_of(&knew, "cache->k_new", 4, &ins[ni++], err));
    CHECK(extent_of(&vnew, "cache->v_new", 4, &ins[ni++], err));
    CHECK(extent_of(&kcache, "cache->k_cache", 4, &outs[no++], err));
    CHECK(extent_of(&vcache, "cache->v_cache", 4, &outs[no++], err));
    CHECK(output_injective(&kcache, "cache->k_cache", 4, err));
    CHECK(output_injective(&vcache, "cache->v_cache", 4, err));
  } else {
    CHECK(extent_of(&kcache, "cache->k_cache", 4, &ins[ni++], err));
    CHECK(extent_of(&vcache, "cache->v_cache", 4, &ins[ni++], err));
  }
  CHECK(no_overlap(outs, no, ins, ni, err));

  /* lengths, pages, rotary positions: read before anything is written */
  {
    int32_t *len, *bt = NULL;
    CHECK(read_ints(kc->cache_seqlens, B, p->memory, &len, err));
    fa_status st = FA_OK;
    int64_t longest = 0;
    for (int64_t b = 0; b < B && st == FA_OK; ++b) {
      if (len[b] < 0 || len[b] > capacity - L_new) {
        fa__err_set(err,
                    "cache->cache_seqlens[%lld] = %d is outside [0, %lld]: the cache holds %lld keys per sequence "
                    "and the call appends %lld",
                    (long long)b, len[b], (long long)(capacity - L_new), (long long)capacity, (long long)L_new);
        st = FA_ERR_SEQLENS;
      } else if (len[b] > longest) {
        longest = len[b];
      }
    }
    /* only the entries of the pages each sequence uses: the rest need not exist */
    for (int64_t b = 0; b < B && st == FA_OK && paged; ++b) {
      const int64_t used = (len[b] + L_new + rows - 1) / rows;
      if (used == 0) continue;
      st = read_ints(kc->block_table + b * bt_stride, used, p->memory, &bt, err);
      for (int64_t i = 0; i < used && st == FA_OK; ++i) {
        const int32_t pg = bt[i];
        if (pg < 0 || pg >= pages) {
          fa__err_set(err, "cache->block_table[%lld][%lld] = %d is not a page of k_cache (it has %lld)", (long long)b,
                      (long long)i, pg, (long long)pages);
          st = FA_ERR_SEQLENS;
        }
      }
      free(bt);
      bt = NULL;
    }
    if (st == FA_OK && has_rot) {
      const int64_t need = longest + (Lq > L_new ? Lq : L_new);
      if (need > kc->rotary_len) {
        fa__err_set(err, "cache->rotary_len = %lld: positions up to %lld are rotated (cache_seqlens + %lld)",
                    (long long)kc->rotary_len, (long long)(need - 1), (long long)(Lq > L_new ? Lq : L_new));
        st = FA_ERR_SEQLENS;
      }
    }
    /* The backends read these arrays again while they write o, lse and
     * (appending) the caches: under an output, the values checked here
     * could change mid-call (a cache_seqlens inside k_cache, overwritten
     * by the append, would steer the next writes anywhere). */
    if (st == FA_OK) {
      extent arr[5];
      int na = 0;
      uint64_t bt_end = 0;
      for (int64_t b = 0; b < B && paged; ++b) {
        const int64_t used = (len[b] + L_new + rows - 1) / rows;
        if (used > 0 && (uint64_t)(b * bt_stride + used) > bt_end) bt_end = (uint64_t)(b * bt_stride + used);
      }
      arr[na++] = array_extent(kc->cache_seqlens, (uint64_t)B, 4, "cache->cache_seqlens");
      if (bt_end) arr[na++] = array_extent(kc->block_table, bt_end, 4, "cache->block_table");
      if (has_rot) {
        uint64_t n;
        const int64_t rot_rows = longest + (Lq > L_new ? Lq : L_new);
        if (__builtin_mul_overflow((uint64_t)rot_rows, (uint64_t)(kc->rotary_dim / 2), &n)) n = UINT64_MAX / 8;
        arr[na++] = array_extent(kc->rotary_cos, n, 4, "cache->rotary_cos");
        arr[na++] = array_extent(kc->rotary_sin, n, 4, "cache->rotary_sin");
      }
      if (o->alibi_slopes) arr[na++] = array_extent(o->alibi_slopes, (uint64_t)Hq, 4, "opt->alibi_slopes");
      st = no_overlap(outs, no, arr, na, err);
    }
    free(len);
    free(bt);
    if (st != FA_OK) return st;
  }

  {
    fa_tensor *ts[] = {&q, &kcache, &vcache, &knew, &vnew, &out, &lse};
    for (int i = 0; i < 7; ++i)
      for (int d = 0; d < 4; ++d)
        if (ts[i]->shape[d] == 1) ts[i]->stride[d] = 0;
    lse.stride[3] = 0;
  }

  p->B = B;
  p->Hq = Hq;
  p->Hkv = Hkv;
  p->group = Hq / Hkv;
  p->Lq = Lq;
  p->Lk = capacity;
  p->D = D;
  p->Dv = Dv;
  p->dtype = dt;
  p->q = q;
  p->k = kcache;
  p->v = vcache;
  p->o = out;
  p->lse = lse;
  p->scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)D);
  p->softcap = o->softcap;
  p->alibi_slopes = o->alibi_slopes;
  p->window_left = -1;
  p->window_right = -1;
  if (o->use_window) {
    p->window_left = o->window_left < 0 ? -1 : o->window_left;
    p->window_right = o->window_right < 0 ? -1 : o->window_right;
  }
  if (o->causal) p->window_right = 0;
  if (p->window_left > Lq + capacity) p->window_left = Lq + capacity;
  if (p->window_right > Lq + capacity) p->window_right = Lq + capacity;
  p->bottom_right = 1;
  p->dropout_threshold = 0xffffffffu;
  p->dropout_scale = 1.0;
  p->block_q = o->block_q;
  p->block_k = o->block_k;

  fa__kv *kv = &p->kv;
  kv->map.block_table = kc->block_table;
  kv->map.bt_stride = bt_stride;
  kv->map.page_size = paged ? rows : capacity;
  kv->cache_seqlens = kc->cache_seqlens;
  kv->k_new = knew;
  kv->v_new = vnew;
  kv->L_new = L_new;
  kv->capacity = capacity;
  kv->rotary_cos = has_rot ? kc->rotary_cos : NULL;
  kv->rotary_sin = has_rot ? kc->rotary_sin : NULL;
  kv->rotary_dim = has_rot ? kc->rotary_dim : 0;
  kv->rotary_interleaved = kc->rotary_interleaved != 0;
  kv->num_splits = kc->num_splits;
  return FA_OK;
}

/* ---- fa_merge_states ---------------------------------------------------- */

fa_status fa__merge_check(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, const fa_tensor *o,
                          const fa_tensor *lse, fa_memory *memory, fa__err *err) {
  if (n < 1) FAIL(FA_ERR_BAD_SIZE, "n = %d must be >= 1", n);
  if (!o_parts) FAIL(FA_ERR_NULL_POINTER, "o_parts is NULL");
  if (!lse_parts) FAIL(FA_ERR_NULL_POINTER, "lse_parts is NULL");
  CHECK(need_tensor(o, "o", err));
  const int has_lse = lse && lse->data;
  if (has_lse) CHECK(need_tensor(lse, "lse", err));
  if (!is_float_dtype(o->dtype)) FAIL(FA_ERR_DTYPE, "o->dtype = %s, expected a float dtype", fa_dtype_name(o->dtype));
  if (has_lse && lse->dtype != FA_F32 && lse->dtype != FA_F64)
    FAIL(FA_ERR_DTYPE, "lse->dtype = %s, expected f32 or f64", fa_dtype_name(lse->dtype));
  CHECK(need_sizes(o, "o", 4, err));
  if (has_lse) CHECK(need_shape(lse, "lse", 3, o->shape, err));
  fa_tensor outs_t[2] = {*o, has_lse ? *lse : (fa_tensor){0}};
  extent outs[2];
  int no = 0;
  fa_memory where = FA_MEMORY_AUTO;
  {
    fa_tensor *ts[] = {&outs_t[0], &outs_t[1]};
    const char *names[] = {"o", "lse"};
    CHECK(resolve_memory(ts, names, 2, &where, err));
  }
  CHECK(extent_of(&outs_t[0], "o", 4, &outs[no++], err));
  CHECK(output_injective(&outs_t[0], "o", 4, err));
  if (has_lse) {
    CHECK(extent_of(&outs_t[1], "lse", 3, &outs[no++], err));
    CHECK(output_injective(&outs_t[1], "lse", 3, err));
  }
  for (int i = 0; i < n; ++i) {
    char on[32], ln[32];
    snprintf(on, sizeof on, "o_parts[%d]", i);
    snprintf(ln, sizeof ln, "lse_parts[%d]", i);
    fa_tensor op = o_parts[i], lp = lse_parts[i];
    CHECK(need_tensor(&op, on, err));
    CHECK(need_tensor(&lp, ln, err));
    if (!is_float_dtype(op.dtype))
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s, expected a float dtype", on, fa_dtype_name(op.dtype));
    if (op.dtype != o_parts[0].dtype)
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s differs from o_parts[0]->dtype = %s", on, fa_dtype_name(op.dtype),
           fa_dtype_name(o_parts[0].dtype));
    if (lp.dtype != FA_F32 && lp.dtype != FA_F64)
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s, expected f32 or f64", ln, fa_dtype_name(lp.dtype));
    CHECK(need_shape(&op, on, 4, o->shape, err));
    CHECK(need_shape(&lp, ln, 3, o->shape, err));
    fa_tensor *ts[] = {&outs_t[0], &op, &lp};
    const char *names[] = {"o", on, ln};
    fa_memory m2;
    CHECK(resolve_memory(ts, names, 3, &m2, err));
    extent ins[2];
    CHECK(extent_of(&op, on, 4, &ins[0], err));
    CHECK(extent_of(&lp, ln, 3, &ins[1], err));
    CHECK(no_overlap(outs, no, ins, 2, err));
  }
  *memory = where;
  return FA_OK;
}
