/* libFuzzer target for the public API (issue 12): fa_forward / fa_backward,
 * fa_forward_kvcache and fa_merge_states on ref and cpu with fa_tensor /
 * fa_options / fa_kvcache decoded from the input bytes. The first byte
 * picks the call (LLVMFuzzerTestOneInput at the end); below is what the
 * attention calls decode, then fuzz_kvcache and fuzz_merge say what they add.
 *
 * What it decodes: the pass and backend; B, Hq, Hkv, Lq, Lk, D, Dv (small
 * mostly, sometimes 0, negative or huge); per tensor (q, k, v, o, lse,
 * dout, dq, dk, dv, dbias, mask, bias) a NULL pointer or NULL data, a dtype
 * (invalid enum values included), a memory space, shape perturbations,
 * strides (contiguous, [B, L, H, D], padded, reversed, 0, arbitrary small,
 * or hostile: +-2^61, 2^62, INT64_MIN/MAX) and a placement (its own slice
 * of a shared arena, or over another tensor's slice); every option (scale,
 * softcap, causal, align, window, dropout, seed, offset, deterministic,
 * block sizes, ALiBi slopes, seqlens / cu_seqlens and their contents,
 * num_seqs, mask and bias of any broadcast shape).
 *
 * Why accepted calls can only touch memory we own: every tensor whose byte
 * extent we can compute and that is at most SLICE_CAP lives inside one
 * malloc'ed arena (ASan watches its edges). A tensor whose extent
 * overflows, or is larger than that, is given a data pointer from which its
 * extent wraps around the address space (near the last address, or near
 * address 0), so validation must refuse it: if the library accepts it, the
 * first access crashes and the fuzzer reports it.
 *
 * What it checks:
 *  - the status is FA_OK or one of the documented ones (FA_ERR_INTERNAL or
 *    an unknown value is a finding);
 *  - on failure: the context's message is non-empty and says the status's
 *    name, and no byte of the arena changed (outputs untouched);
 *  - on success: the message is empty, no byte outside the outputs'
 *    elements changed (inputs, padding, other tensors), and no output
 *    element overlaps an input element or another output element;
 *  - sanitizers (ASan, UBSan) and libFuzzer's own timeout and RSS limit
 *    catch the rest. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

enum { SLICE_CAP = 256 << 10, WORK_CAP = 1 << 20, MAX_ELEMS = 1 << 18 };

/* ---- the byte reader ---------------------------------------------------- */

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t u8(reader *r) {
  if (!r->n) return 0;
  --r->n;
  return *r->p++;
}
static uint32_t u32(reader *r) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)u8(r) << (8 * i);
  return v;
}
static uint64_t u64(reader *r) {
  return (uint64_t)u32(r) | (uint64_t)u32(r) << 32;
}

#define E(x) ((int64_t)1 << (x))
static const int64_t k_hostile[] = {0,     -1,     -2,    E(31),  -E(31),    E(32),     E(40),         E(58),    -E(58),
                                    E(61), -E(61), E(62), -E(62), INT64_MAX, INT64_MIN, INT64_MAX - 1, E(60) + 1};
enum { NHOSTILE = sizeof k_hostile / sizeof k_hostile[0] };

/* A size: 1..8 mostly (hd: 1..16), sometimes 0 or a hostile value. */
static int64_t dim(reader *r, int hd) {
  const uint8_t b = u8(r);
  if (b < 240) return 1 + b % (hd ? 16 : 8);
  return k_hostile[b % NHOSTILE];
}

/* ---- tensors -------------------------------------------------------------- */

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_DBIAS, T_MASK, T_BIAS, NT };
static const char *const k_names[NT] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "dbias", "mask", "bias"};

typedef struct tdesc {
  fa_tensor t;
  int ndim;     /* 4, 3 for lse */
  int present;  /* 0: pass a NULL fa_tensor pointer */
  int place;    /* 0: own slice, 1: over tensor `over`, 2: fake address (extent too large) */
  int over;     /* index of the tensor it is placed over */
  uint64_t off; /* byte offset inside that tensor's slice */
  uint64_t lo;  /* bytes below data */
  uint64_t hi;  /* bytes from data to the end of the last element */
  int overflow; /* extent not computable */
  int misalign; /* data not aligned to the element size (must be refused) */
  size_t at;    /* offset of data in the arena (place 0/1) */
} tdesc;

static size_t esize(fa_dtype dt) {
  switch (dt) {
    case FA_F32: return 4;
    case FA_F64: return 8;
    case FA_F16:
    case FA_BF16: return 2;
    case FA_BOOL:
    case FA_F8_E4M3: return 1;
  }
  return 1; /* invalid dtypes are refused before any access */
}

/* The extent as validation computes it: dims of size <= 1 never stepped. */
static void extent(tdesc *d) {
  const uint64_t es = esize(d->t.dtype);
  uint64_t lo = 0, hi = 0;
  d->overflow = 0;
  for (int i = 0; i < d->ndim; ++i) {
    if (d->t.shape[i] <= 1) continue;
    const int64_t s = d->t.stride[i];
    const uint64_t as = s < 0 ? 0u - (uint64_t)s : (uint64_t)s;
    uint64_t span;
    if (__builtin_mul_overflow((uint64_t)(d->t.shape[i] - 1), as, &span) || span > (uint64_t)INT64_MAX) {
      d->overflow = 1;
      return;
    }
    uint64_t *side = s < 0 ? &lo : &hi;
    if (__builtin_add_overflow(*side, span, side)) {
      d->overflow = 1;
      return;
    }
  }
  if (__builtin_mul_overflow(lo, es, &d->lo) || __builtin_mul_overflow(hi + 1, es, &d->hi) || hi + 1 == 0)
    d->overflow = 1;
}

/* A size as a layout sees it: hostile ones (they get refused) count as 1. */
static int64_t sz(int64_t x) {
  return x > 0 && x < E(20) ? x : 1;
}

/* Strides for a logical shape. */
static void strides(reader *r, tdesc *d) {
  int64_t *sh = d->t.shape, *st = d->t.stride;
  int64_t s[4] = {0}, n = 1;
  const uint8_t mode = u8(r);
  int64_t pad = 0;
  switch (mode % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    default: /* contiguous */
      for (int i = 3; i >= 0; --i) s[i] = n, n *= sz(sh[i]);
      break;
    case 7: /* [B, L, H, D] */ s[3] = 1, s[1] = sz(sh[3]), s[2] = sz(sh[3]) * sz(sh[1]), s[0] = s[2] * sz(sh[2]); break;
    case 8: /* padded */
      pad = 1 + u8(r) % 5;
      for (int i = 3; i >= 0; --i) s[i] = n, n = n * (sz(sh[i])) + pad;
      break;
    case 9: /* reversed: every stride negative */
      for (int i = 3; i >= 0; --i) s[i] = -n, n *= sz(sh[i]);
      break;
    case 10:
    case 11: /* arbitrary small strides, any sign, 0 included */
      for (int i = 0; i < 4; ++i) s[i] = (int8_t)u8(r) % 24;
      break;
    case 12:
    case 13: /* contiguous, one stride hostile */
      for (int i = 3; i >= 0; --i) s[i] = n, n *= sz(sh[i]);
      s[u8(r) % 4] = k_hostile[u8(r) % NHOSTILE];
      break;
    case 14: /* all strides raw 64-bit */
      for (int i = 0; i < 4; ++i) s[i] = (int64_t)u64(r);
      break;
    case 15: /* contiguous, one dim with stride 0 */
      for (int i = 3; i >= 0; --i) s[i] = n, n *= sz(sh[i]);
      s[u8(r) % 4] = 0;
      break;
  }
  memcpy(st, s, sizeof s);
}

/* One tensor of logical shape want (ndim dims), default dtype dt. */
static void decode_tensor(reader *r, tdesc *d, int idx, const int64_t want[4], int ndim, fa_dtype dt) {
  memset(d, 0, sizeof *d);
  d->ndim = ndim;
  d->present = 1;
  const uint8_t flags = u8(r);
  if (flags == 255) d->present = 0;
  d->t.dtype = dt;
  const uint8_t dtb = u8(r);
  if (dtb >= 240) d->t.dtype = (fa_dtype)(dtb < 250 ? dtb % 6 : (int)(int8_t)dtb); /* 5, negative: invalid */
  d->t.memory = FA_MEMORY_AUTO;
  const uint8_t mb = u8(r);
  if (mb >= 248)
    d->t.memory = (fa_memory)(mb % 5); /* CUDA, 3, 4: refused here */
  else if (mb >= 128)
    d->t.memory = FA_MEMORY_HOST;
  for (int i = 0; i < 4; ++i) d->t.shape[i] = i < ndim ? want[i] : 1;
  const uint8_t sb = u8(r);
  if (sb >= 224) d->t.shape[sb % 4] = dim(r, 0); /* a shape that disagrees (or broadcasts) */
  strides(r, d);
  extent(d);
  const uint8_t pb = u8(r);
  d->misalign = pb == 231 && esize(d->t.dtype) > 1;
  if (pb >= 232 && idx > 0) {
    d->place = 1;
    d->over = u8(r) % idx;
    d->off = u8(r);
  }
  if (d->overflow || d->lo > SLICE_CAP || d->hi > SLICE_CAP) d->place = 2;
  d->t.data = (void *)1; /* set once the arena exists; NULL data decided here */
  if (flags >= 250 && flags < 255) d->t.data = NULL;
}

/* ---- the arena and its checks ---------------------------------------------- */

/* Adds 1 to map[] at every byte of every element of d (at most MAX_ELEMS
 * elements; returns 0 if there were more). */
static int mark(const tdesc *d, const unsigned char *arena, unsigned char *map) {
  int64_t n[4] = {1, 1, 1, 1};
  uint64_t total = 1;
  for (int i = 0; i < d->ndim; ++i) {
    n[i] = d->t.shape[i] > 0 ? d->t.shape[i] : 0;
    if (n[i] > MAX_ELEMS) return 0;
    total *= (uint64_t)n[i];
    if (total > MAX_ELEMS) return 0;
  }
  const size_t es = esize(d->t.dtype);
  const unsigned char *base = (const unsigned char *)d->t.data;
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        for (int64_t e = 0; e < n[3]; ++e) {
          const int64_t off = (n[0] > 1 ? a * d->t.stride[0] : 0) + (n[1] > 1 ? b * d->t.stride[1] : 0) +
                              (n[2] > 1 ? c * d->t.stride[2] : 0) + (n[3] > 1 ? e * d->t.stride[3] : 0);
          const unsigned char *p = base + off * (int64_t)es;
          for (size_t k = 0; k < es; ++k) {
            unsigned char *m = &map[p - arena + (ptrdiff_t)k];
            if (*m < 255) ++*m;
          }
        }
  return 1;
}

/* The call being checked, printed with a finding. */
static const tdesc *g_t;
static const char *const *g_names;
static int g_nt;
static const unsigned char *g_arena;
static const char *g_call;
static int g_backend;

static void finding(const char *what, fa_status st, const char *msg) {
  fprintf(stderr, "fuzz_api: %s (status %s, message \"%s\")\n", what, fa_status_name(st), msg ? msg : "");
  fprintf(stderr, "  %s on backend %d\n", g_call ? g_call : "?", g_backend);
  for (int i = 0; g_t && i < g_nt; ++i) {
    const tdesc *d = &g_t[i];
    fprintf(stderr,
            "  %-8s present %d data %s%+lld dtype %d shape [%lld %lld %lld %lld] stride [%lld %lld %lld %lld]\n",
            g_names[i], d->present, d->t.data ? (d->place == 2 ? "fake" : "arena") : "NULL",
            d->t.data && d->place != 2 ? (long long)((const unsigned char *)d->t.data - g_arena) : 0LL, (int)d->t.dtype,
            (long long)d->t.shape[0], (long long)d->t.shape[1], (long long)d->t.shape[2], (long long)d->t.shape[3],
            (long long)d->t.stride[0], (long long)d->t.stride[1], (long long)d->t.stride[2], (long long)d->t.stride[3]);
  }
  abort();
}

static uint64_t g_rng;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

/* ---- pieces every call shares ---------------------------------------------- */

/* The head byte: pass bit, backend (AUTO, CUDA and invalid values through
 * a second byte), a NULL context, how the arena is filled. */
typedef struct head_t {
  int bit0, null_ctx, fill;
  fa_backend backend;
} head_t;

static head_t decode_head(reader *r) {
  head_t h;
  const uint8_t head = u8(r);
  h.bit0 = head & 1;
  h.backend = (head >> 1) & 1 ? FA_BACKEND_CPU : FA_BACKEND_REF;
  if ((head >> 2) == 63) h.backend = (fa_backend)(int8_t)u8(r); /* AUTO, CUDA, invalid */
  h.null_ctx = head == 0xfe;
  h.fill = (head >> 2) & 3;
  return h;
}

/* Every option of fa_options but the lengths, mask, bias and slopes. */
static void decode_options(reader *r, fa_options *o) {
  const uint8_t ob = u8(r);
  o->causal = ob & 1;
  o->align = (ob >> 1) & 1 ? FA_ALIGN_BOTTOM_RIGHT : FA_ALIGN_TOP_LEFT;
  if (ob == 0xff) o->align = (fa_align)(int8_t)u8(r);
  o->use_window = (ob >> 2) & 1;
  if (o->use_window) {
    const uint8_t wb = u8(r);
    o->window_left = wb < 200 ? (int64_t)(wb % 12) - 2 : k_hostile[wb % NHOSTILE];
    const uint8_t wr = u8(r);
    o->window_right = wr < 200 ? (int64_t)(wr % 12) - 2 : k_hostile[wr % NHOSTILE];
  }
  if ((ob >> 3) & 1) {
    static const double scales[] = {0.0, 0.125, 1.0, -1.0, 1e4, -1e30, 1e300, NAN, INFINITY, 5e-324};
    o->scale = scales[u8(r) % 10];
  }
  if ((ob >> 4) & 1) {
    static const double caps[] = {0.0, 1.0, 30.0, 1e-300, -1.0, NAN, INFINITY, 1e300};
    o->softcap = caps[u8(r) % 8];
  }
  if ((ob >> 5) & 1) {
    static const double ps[] = {0.0, 0.1, 0.5, 0.999999, 1.0, -0.1, NAN, 1e-9};
    o->dropout_p = ps[u8(r) % 8];
    o->dropout_seed = u64(r);
    o->dropout_offset = u32(r);
  }
  o->deterministic = (ob >> 6) & 1;
  if ((ob >> 7) & 1) {
    static const int blocks[] = {0, 1, 3, 16, 64, 1000, -1, 0x7fffffff};
    const uint8_t bb = u8(r);
    o->block_q = blocks[bb % 8];
    o->block_k = blocks[(bb >> 3) % 8];
  }
}

/* Slices for place-0 tensors, place-1 ones inside them; returns the size. */
static size_t arena_layout(tdesc *t, int nt) {
  size_t total = 64;
  for (int i = 0; i < nt; ++i)
    if (t[i].place == 0) {
      t[i].at = total + (size_t)t[i].lo + (size_t)t[i].misalign;
      total = (total + (size_t)(t[i].lo + t[i].hi) + 1 + 64 + 7) / 8 * 8;
    }
  for (int i = 0; i < nt; ++i)
    if (t[i].place == 1) {
      const tdesc *u = &t[t[i].over];
      size_t at = u->place == 2 ? 64 : u->at + (size_t)t[i].off;
      if (at < t[i].lo) at = (size_t)t[i].lo;
      if (at + t[i].hi > total) at = total > t[i].hi ? total - (size_t)t[i].hi : 0;
      if (at < t[i].lo || at + t[i].hi > total) {
        t[i].place = 0; /* does not fit: its own slice after all */
        t[i].at = total + (size_t)t[i].lo + (size_t)t[i].misalign;
        total = (total + (size_t)(t[i].lo + t[i].hi) + 1 + 64 + 7) / 8 * 8;
      } else {
        t[i].at = at - (t[i].misalign ? 0 : at % esize(t[i].t.dtype)); /* lo is whole elements: still >= lo */
      }
    }
  return total;
}

static void arena_fill(unsigned char *arena, size_t total, int fill, size_t seed) {
  g_rng = 0x9e3779b97f4a7c15ull ^ seed;
  for (size_t i = 0; i < total; ++i) {
    switch (fill) {
      case 0: arena[i] = (unsigned char)rnd(); break;                       /* anything: NaN, Inf, huge */
      case 1: arena[i] = i % 4 == 3 ? 0x3e : (unsigned char)rnd(); break;   /* f32 ~ 0.1..0.5 */
      case 2: arena[i] = i % 2 == 1 ? 0x3c : (unsigned char)rnd(); break;   /* f16 / bf16-ish small */
      default: arena[i] = i % 4 == 3 ? 0x7f : i % 4 == 2 ? 0x80 : 0; break; /* f32 Inf */
    }
  }
}

/* Data pointers: the arena for place 0/1, a wrapping fake address for place 2. */
static void arena_point(tdesc *t, int nt, unsigned char *arena) {
  for (int i = 0; i < nt; ++i) {
    if (!t[i].t.data) continue;
    if (t[i].place == 2) {
      /* extent larger than we could give: make it wrap the address space */
      t[i].t.data =
          t[i].hi > SLICE_CAP || t[i].overflow ? (void *)(UINTPTR_MAX - SLICE_CAP) : (void *)(uintptr_t)SLICE_CAP;
    } else {
      t[i].t.data = arena + t[i].at;
    }
  }
}

/* The status and message of a call. */
static void check_status(fa_status st, const char *msg, int null_ctx) {
  if ((int)st < FA_OK || (int)st > FA_ERR_INTERNAL) finding("a status outside fa_status", st, msg);
  if (st == FA_ERR_INTERNAL || st == FA_ERR_DEVICE) finding("an internal or device error", st, msg);
  if (null_ctx) {
    if (st != FA_ERR_NULL_POINTER) finding("NULL context not refused", st, msg);
  } else if (st != FA_OK) {
    if (!msg || !msg[0]) finding("a failure with an empty message", st, msg);
    if (!strstr(msg, fa_status_name(st))) finding("a message that does not say its status", st, msg);
  } else if (msg[0]) {
    finding("a success with a message", st, msg);
  }
}

/* A byte range of the arena read as an input that is not a tensor (the
 * kv-cache call's int and float arrays placed over a tensor). */
typedef struct region {
  size_t at, n;
} region;

/* What may change: on failure nothing; on success the elements of the
 * outputs (out[i]), each once, none over an input (in[i], xin). */
static void check_memory(fa_status st, const tdesc *t, int nt, const int *out, const int *in, const region *xin, int nx,
                         const unsigned char *arena, const unsigned char *before, size_t total) {
  if (st != FA_OK) {
    if (memcmp(before, arena, total) != 0) finding("a refused call wrote memory", st, "");
    return;
  }
  unsigned char *outmap = (unsigned char *)calloc(total, 1), *inmap = (unsigned char *)calloc(total, 1);
  if (!outmap || !inmap) abort();
  for (int i = 0; i < nt; ++i) {
    const tdesc *d = &t[i];
    if ((!out[i] && !in[i]) || !d->t.data) continue;
    if (d->place == 2) finding("accepted a tensor whose extent wraps the address space", st, g_names[i]);
    if (out[i] && !mark(d, arena, outmap)) finding("accepted an output with more elements than memory", st, g_names[i]);
    if (in[i]) mark(d, arena, inmap); /* inputs may broadcast (stride 0): counts over 1 are fine */
  }
  for (int k = 0; k < nx; ++k) memset(inmap + xin[k].at, 1, xin[k].n);
  for (size_t i = 0; i < total; ++i) {
    if (outmap[i] > 1) finding("accepted outputs whose elements overlap", st, "");
    if (outmap[i] && inmap[i]) finding("accepted an output over an input", st, "");
    if (!outmap[i] && arena[i] != before[i]) finding("a write outside the outputs", st, "");
  }
  free(outmap), free(inmap);
}

/* Writes value pattern pat into every element of a float tensor in the
 * arena (lse parts: -inf rows, +inf, NaN, small finite). */
static void set_elems(const tdesc *d, unsigned char *arena, int pat, reader *r) {
  if (d->place == 2 || !d->t.data || (d->t.dtype != FA_F32 && d->t.dtype != FA_F64)) return;
  int64_t n[4] = {1, 1, 1, 1};
  uint64_t total = 1;
  for (int i = 0; i < d->ndim; ++i) {
    n[i] = d->t.shape[i] > 0 ? d->t.shape[i] : 0;
    if (n[i] > MAX_ELEMS || (total *= (uint64_t)n[i]) > MAX_ELEMS) return;
  }
  unsigned char *base = (unsigned char *)d->t.data;
  const size_t es = esize(d->t.dtype);
  uint64_t k = 0;
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c, ++k) {
        const int64_t off = (n[0] > 1 ? a * d->t.stride[0] : 0) + (n[1] > 1 ? b * d->t.stride[1] : 0) +
                            (n[2] > 1 ? c * d->t.stride[2] : 0);
        unsigned char *p = base + off * (int64_t)es;
        if (p < arena) return;
        double v;
        switch (pat) {
          case 1: v = -INFINITY; break;
          case 2: v = k % 2 ? -INFINITY : (double)(u8(r) % 9) - 4.0; break;
          case 3: v = (double)(u8(r) % 17) / 4.0 - 2.0; break;
          case 4: v = k % 3 == 0 ? INFINITY : k % 3 == 1 ? NAN : -INFINITY; break;
          default: v = k % 2 ? 88.0 : -1e30; break; /* far apart: exp underflows */
        }
        if (es == 4) {
          const float f = (float)v;
          memcpy(p, &f, 4);
        } else {
          memcpy(p, &v, 8);
        }
      }
}

/* ---- fa_forward / fa_backward ----------------------------------------------- */

static void fuzz_attn(reader *rd, fa_context *ctx) {
  reader r = *rd;
  const head_t hd = decode_head(&r);
  const int bwd = hd.bit0, null_ctx = hd.null_ctx, fill = hd.fill;
  const fa_backend backend = hd.backend;

  const int64_t B = dim(&r, 0), Hkv = dim(&r, 0), g = dim(&r, 0), Lq = dim(&r, 0), Lk = dim(&r, 0);
  const int64_t D = dim(&r, 1), Dv = dim(&r, 1);
  const int64_t Hq = g > 0 && g < 16 && Hkv > 0 && Hkv < 16 ? g * Hkv : g; /* usually a multiple of Hkv */
  const fa_dtype dt = (fa_dtype)(u8(&r) % 4);

  fa_options o;
  fa_options_init(&o);
  decode_options(&r, &o);
  /* lengths: 0 none, 1 seqlens, 2 cu_seqlens */
  const uint8_t lb = u8(&r);
  const int lenmode = lb % 3 == 0 ? 0 : lb % 7 == 1 ? 2 : lb % 7 == 2 ? 1 : 0;
  int32_t *seq_q = NULL, *seq_k = NULL, *cu_q = NULL, *cu_k = NULL;
  int64_t nseq = 0, Bt = B, Lqt = Lq, Lkt = Lk, maxq = Lq, maxk = Lk;
  if (lenmode == 1 && B > 0 && B <= 4096) {
    seq_q = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    seq_k = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    for (int64_t b = 0; b < B; ++b) {
      const uint8_t x = u8(&r), y = u8(&r);
      seq_q[b] = x < 250 ? (int32_t)(x % (Lq > 0 && Lq < 100 ? Lq + 1 : 9)) : (int32_t)(x - 253) * 1000;
      seq_k[b] = y < 250 ? (int32_t)(y % (Lk > 0 && Lk < 100 ? Lk + 1 : 9)) : (int32_t)(y - 253) * 1000;
    }
    if (lb & 8) free(seq_q), seq_q = NULL;
    if (lb & 16) free(seq_k), seq_k = NULL;
  } else if (lenmode == 2) {
    const uint8_t nb = u8(&r);
    nseq = nb < 240 ? 1 + nb % 6 : k_hostile[nb % NHOSTILE];
    Bt = 1;
    if (nseq > 0 && nseq <= 64) {
      cu_q = (int32_t *)malloc((size_t)(nseq + 1) * sizeof(int32_t));
      cu_k = (int32_t *)malloc((size_t)(nseq + 1) * sizeof(int32_t));
      cu_q[0] = cu_k[0] = 0;
      maxq = maxk = 0;
      for (int64_t b = 0; b < nseq; ++b) {
        const uint8_t x = u8(&r), y = u8(&r);
        cu_q[b + 1] = cu_q[b] + (x < 250 ? x % 6 : (int32_t)x - 252);
        cu_k[b + 1] = cu_k[b] + (y < 250 ? y % 6 : (int32_t)y - 252);
        if (cu_q[b + 1] - cu_q[b] > maxq) maxq = cu_q[b + 1] - cu_q[b];
        if (cu_k[b + 1] - cu_k[b] > maxk) maxk = cu_k[b + 1] - cu_k[b];
      }
      if (u8(&r) & 1) cu_q[0] = 1;
      Lqt = cu_q[nseq] > 0 ? cu_q[nseq] : 1;
      Lkt = cu_k[nseq] > 0 ? cu_k[nseq] : 1;
      if (maxq == 0) maxq = 1;
      if (maxk == 0) maxk = 1;
    }
    if (lb & 8) { /* one of the pair missing, or seqlens too */
      free(cu_k);
      cu_k = NULL;
    }
  }
  o.seqlens_q = seq_q, o.seqlens_k = seq_k;
  o.cu_seqlens_q = cu_q, o.cu_seqlens_k = cu_k;
  o.num_seqs = nseq;
  if (lenmode == 2 && !cu_q && !cu_k && nseq > 64) { /* hostile num_seqs: the library must refuse before reading */
    static const int32_t small[2] = {0, 0};
    if (nseq <= INT32_MAX) nseq = 0; /* would read nseq + 1 entries: we cannot give them */
    o.cu_seqlens_q = o.cu_seqlens_k = nseq ? small : NULL;
    o.num_seqs = nseq;
  }
  float *slopes = NULL;
  if ((lb & 32) && Hq > 0 && Hq <= 4096) {
    slopes = (float *)malloc((size_t)Hq * sizeof(float));
    for (int64_t h = 0; h < Hq; ++h) slopes[h] = (float)(u8(&r) % 17) / 8.0f - (h == 3 ? 3.0f : 0.0f);
    o.alibi_slopes = slopes;
  }

  /* tensors */
  const int64_t sq[4] = {Bt, Hq, Lqt, D}, sk[4] = {Bt, Hkv, Lkt, D}, sv[4] = {Bt, Hkv, Lkt, Dv},
                so[4] = {Bt, Hq, Lqt, Dv};
  const int64_t Bl = lenmode == 2 ? nseq : Bt;
  int64_t sm[4] = {Bl, Hq, maxq, maxk}, sb[4] = {Bl, Hq, maxq, maxk};
  const uint8_t bc = u8(&r); /* broadcast dims of mask (low nibble) and bias */
  for (int i = 0; i < 4; ++i) {
    if ((bc >> i) & 1) sm[i] = 1;
    if ((bc >> (4 + i)) & 1) sb[i] = 1;
  }
  tdesc t[NT];
  const int64_t *shapes[NT] = {sq, sk, sv, so, so, so, sq, sk, sv, sb, sm, sb};
  for (int i = 0; i < NT; ++i) {
    fa_dtype tdt = dt;
    if (i == T_LSE) tdt = dt == FA_F64 && backend == FA_BACKEND_REF ? FA_F64 : FA_F32;
    if (i == T_MASK) tdt = FA_BOOL;
    if (i == T_BIAS || i == T_DBIAS) tdt = (fa_dtype)(u8(&r) % 4);
    decode_tensor(&r, &t[i], i, shapes[i], i == T_LSE ? 3 : 4, tdt);
  }
  /* the library reads q->shape[0] seqlens and q->shape[1] slopes: give it
   * that many when q's shape was perturbed (and agrees with the rest) */
  {
    const int64_t nb = t[T_Q].t.shape[0], nh = t[T_Q].t.shape[1];
    int32_t **sl[2] = {&seq_q, &seq_k};
    for (int i = 0; i < 2; ++i)
      if (*sl[i] && nb != B) {
        int32_t *n = nb > 0 && nb <= 65536 ? (int32_t *)calloc((size_t)nb, sizeof(int32_t)) : NULL;
        if (n) memcpy(n, *sl[i], (size_t)(nb < B ? nb : B) * sizeof(int32_t));
        free(*sl[i]);
        *sl[i] = n;
      }
    o.seqlens_q = seq_q, o.seqlens_k = seq_k;
    if (slopes && nh != Hq) {
      float *n = nh > 0 && nh <= 65536 ? (float *)calloc((size_t)nh, sizeof(float)) : NULL;
      free(slopes);
      slopes = n;
      o.alibi_slopes = slopes;
    }
  }
  const uint8_t extra = u8(&r);
  const int no_opt = (extra >> 5) == 7; /* opt = NULL: defaults, no mask or bias */
  const int has_lse = bwd || !(extra & 1), has_mask = !no_opt && ((extra >> 1) & 1),
            has_bias = !no_opt && ((extra >> 2) & 1), has_dbias = bwd && has_bias && ((extra >> 3) & 1);

  /* Sizes that validation accepts but that would take minutes (broadcast
   * inputs of any length): not worth an execution. */
  {
    const int varlen = !no_opt && (o.cu_seqlens_q || o.cu_seqlens_k);
    const int64_t dims[5] = {varlen ? o.num_seqs : t[T_Q].t.shape[0], t[T_Q].t.shape[1], t[T_Q].t.shape[2],
                             t[T_K].t.shape[2],
                             t[T_Q].t.shape[3] > t[T_V].t.shape[3] ? t[T_Q].t.shape[3] : t[T_V].t.shape[3]};
    uint64_t w = 1;
    int sane = 1;
    for (int i = 0; i < 5; ++i)
      if (dims[i] <= 0 || __builtin_mul_overflow(w, (uint64_t)dims[i], &w)) sane = 0;
    if (sane && w > WORK_CAP && w <= ((uint64_t)1 << 60)) goto out;
  }

  {
    const size_t total = arena_layout(t, NT);
    unsigned char *arena = (unsigned char *)malloc(total), *before = (unsigned char *)malloc(total);
    if (!arena || !before) abort();
    arena_fill(arena, total, fill, rd->n);
    arena_point(t, NT, arena);
    memcpy(before, arena, total);
    g_t = t, g_names = k_names, g_nt = NT, g_arena = arena, g_call = bwd ? "fa_backward" : "fa_forward";
    g_backend = (int)backend;

    fa_tensor *p[NT];
    for (int i = 0; i < NT; ++i) p[i] = t[i].present ? &t[i].t : NULL;
    if (!has_lse) p[T_LSE] = (extra & 16) ? NULL : (t[T_LSE].t.data = NULL, &t[T_LSE].t);
    o.mask = has_mask && p[T_MASK] ? t[T_MASK].t : (fa_tensor){0};
    o.bias = has_bias && p[T_BIAS] ? t[T_BIAS].t : (fa_tensor){0};
    if (!has_dbias) p[T_DBIAS] = NULL;
    const fa_options *popt = no_opt ? NULL : &o;

    fa_context *c = null_ctx ? NULL : ctx;
    fa_status st;
    if (bwd)
      st = fa_backward(c, backend, p[T_Q], p[T_K], p[T_V], p[T_O], p[T_DOUT], p[T_LSE], popt, p[T_DQ], p[T_DK], p[T_DV],
                       p[T_DBIAS]);
    else
      st = fa_forward(c, backend, p[T_Q], p[T_K], p[T_V], popt, p[T_O], p[T_LSE]);

    const char *msg = c ? fa_context_last_error(c) : NULL;
    check_status(st, msg, null_ctx);
    int out[NT] = {0}, in[NT] = {0};
    const int outs_f[] = {T_O, T_LSE}, outs_b[] = {T_DQ, T_DK, T_DV, T_DBIAS};
    const int ins_f[] = {T_Q, T_K, T_V, T_MASK, T_BIAS}, ins_b[] = {T_Q, T_K, T_V, T_MASK, T_BIAS, T_O, T_DOUT, T_LSE};
    for (int k = 0; k < (bwd ? 4 : 2); ++k) {
      const int i = (bwd ? outs_b : outs_f)[k];
      out[i] = p[i] && t[i].t.data;
    }
    for (int k = 0; k < (bwd ? 8 : 5); ++k) {
      const int i = (bwd ? ins_b : ins_f)[k];
      if ((i == T_MASK && !has_mask) || (i == T_BIAS && !has_bias)) continue;
      in[i] = p[i] && t[i].t.data;
    }
    check_memory(st, t, NT, out, in, NULL, 0, arena, before, total);
    free(arena), free(before);
  }
out:
  free(seq_q), free(seq_k), free(cu_q), free(cu_k), free(slopes);
}

/* ---- fa_forward_kvcache ------------------------------------------------------ */

/* Decodes: sizes (B, Hkv, group, Lq, L_new, D, Dv), dtype; contiguous or
 * paged; the page size or capacity, max_blocks, block_table_stride and the
 * number of pages (hostile values included); num_splits (0, small, huge,
 * negative); every option, and one of those the call refuses (mask, bias,
 * seqlens, cu_seqlens, dropout, misaligned slopes); rotary (dim even, odd,
 * 0, > D, hostile; rotary_len exact, one short, hostile); the seven tensors
 * as fuzz_attn does (q, k_cache, v_cache, k_new, v_new, o, lse); then the
 * arrays: cache_seqlens (in range, at the capacity's edge, hostile), the
 * block table (every entry, or only those of the pages each sequence uses:
 * the header promises no other entry is read; pages in range, one past,
 * hostile), rotary tables (the rows of the rotated positions, no more), ALiBi
 * slopes: each in its own malloc of exactly that size, misaligned, or
 * placed over one of the tensors (the library must refuse one under an
 * output: it reads them while it writes). With k_new the caches are outputs
 * (the append may write them), else inputs; on failure nothing, the caches
 * included, may have changed. */

enum { V_Q, V_KC, V_VC, V_KN, V_VN, V_O, V_LSE, NV };
static const char *const k_vnames[NV] = {"q", "k_cache", "v_cache", "k_new", "v_new", "o", "lse"};

/* An int32 or float array of the cache call (cache_seqlens, block_table,
 * rotary tables, ALiBi slopes): its own malloc of exactly the bytes the
 * library may read (ASan watches both ends), misaligned, or placed over a
 * tensor of the arena (the library must refuse it over an output). */
typedef struct xarr {
  unsigned char *mem;  /* own malloc (or NULL) */
  unsigned char *copy; /* the bytes before the call */
  size_t n;            /* bytes */
  size_t read;         /* of which the library reads the first (the block table: the used entries) */
  int mode;            /* 0 own, 1 misaligned, 2 over tensor `over` */
  int over;
  void *p; /* what the call gets */
} xarr;

static void xarr_decode(reader *r, xarr *x, size_t n) {
  memset(x, 0, sizeof *x);
  x->n = x->read = n;
  const uint8_t m = u8(r);
  x->mode = m < 224 ? 0 : m < 248 ? 2 : 1;
  if (x->mode == 2) x->over = u8(r) % NV;
}

/* Gives x its memory and writes the values vals[n] there (arena: before the snapshot). */
static void xarr_place(xarr *x, const void *vals, const tdesc *t, unsigned char *arena, size_t total, region *reg,
                       int *nreg) {
  if (x->mode == 2) {
    const tdesc *d = &t[x->over];
    if (d->t.data && d->place != 2) {
      const size_t at = (size_t)((unsigned char *)d->t.data - arena) / 4 * 4;
      if (at + x->n <= total) {
        memcpy(arena + at, vals, x->n);
        x->p = arena + at;
        reg[(*nreg)++] = (region){at, x->read}; /* an output may cover entries never read */
        return;
      }
    }
    x->mode = 0;
  }
  x->mem = (unsigned char *)malloc(x->n + (x->mode == 1) + 1);
  x->copy = (unsigned char *)malloc(x->n + 1);
  if (!x->mem || !x->copy) abort();
  x->p = x->mem + (x->mode == 1);
  memcpy(x->p, vals, x->n);
  memcpy(x->copy, vals, x->n);
  if (!x->n) x->mem = (unsigned char *)realloc(x->mem, 1), x->p = x->mem; /* a valid pointer to nothing */
}

static void xarr_done(xarr *x, fa_status st) {
  if (x->mem && x->n && memcmp(x->p, x->copy, x->n) != 0) finding("the call wrote into an input array", st, "");
  free(x->mem), free(x->copy);
}

/* a + b for the harness's own arithmetic: negative values count as 0, saturating. */
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t s;
  if (a < 0) a = 0;
  if (b < 0) b = 0;
  return __builtin_add_overflow(a, b, &s) ? INT64_MAX : s;
}

static int32_t pick_int(uint8_t b, int64_t lo, int64_t hi) {
  static const int32_t bad[] = {-1, INT32_MIN, INT32_MAX, -2, 1 << 30};
  if (b < 216) return (int32_t)(hi > lo ? lo + b % (hi - lo) : lo);
  if (b < 240) return (int32_t)(hi + b % 3 - 1); /* at the edge: hi - 1 is fine, hi, hi + 1 are not */
  return bad[b % 5];
}

static void fuzz_kvcache(reader *rd, fa_context *ctx) {
  reader r = *rd;
  const head_t hd = decode_head(&r);
  const int64_t B = dim(&r, 0), Hkv = dim(&r, 0), g = dim(&r, 0), Lq = dim(&r, 0), Lnew0 = dim(&r, 0);
  const int64_t D = dim(&r, 1), Dv = dim(&r, 1);
  const int64_t Hq = g > 0 && g < 16 && Hkv > 0 && Hkv < 16 ? g * Hkv : g;
  const fa_dtype dt = (fa_dtype)(u8(&r) % 4);
  /* kb: 1 paged, 2 no k_new, 4 rotary, 8 interleaved, 16 ALiBi, 32 no lse, 64 opt NULL, 128 cache NULL */
  const uint8_t kb = u8(&r);
  const int paged = kb & 1, has_new = !(kb & 2), want_rot = (kb >> 2) & 1, no_opt = kb == 0xc0;
  const uint8_t rb = u8(&r);
  int64_t rows = paged ? (rb < 200   ? 1 + rb % 8
                          : rb < 232 ? 16
                                     : k_hostile[rb % NHOSTILE])
                       : (rb < 232 ? 1 + rb % 24 : k_hostile[rb % NHOSTILE]);
  int64_t max_blocks = 0, bt_stride = 0, pages = B;
  int bt_full = 0;
  if (paged) {
    const uint8_t mb = u8(&r), sb = u8(&r), pb = u8(&r);
    max_blocks = mb < 232 ? 1 + mb % 6 : k_hostile[mb % NHOSTILE];
    bt_stride = sb < 160                             ? 0
                : sb < 216 && max_blocks < E(40)     ? max_blocks + sb % 3
                : sb < 232 && max_blocks > INT64_MIN ? max_blocks - 1
                                                     : k_hostile[sb % NHOSTILE];
    pages = pb < 232 ? 1 + pb % 8 : k_hostile[pb % NHOSTILE];
    bt_full = u8(&r) & 1;
  }
  const uint8_t nsb = u8(&r);
  static const int splits_bad[] = {-1, 4096, 0x7fffffff, 100000, INT32_MIN, 65};
  const int num_splits = nsb < 128 ? 0 : nsb < 232 ? nsb % 9 : splits_bad[nsb % 6];

  fa_options o;
  fa_options_init(&o);
  decode_options(&r, &o);
  /* options the call refuses */
  static const uint8_t s_mask[8];
  static const float s_bias[8];
  static const int32_t s_ints[64];
  static const float s_slopes[2];
  const uint8_t refb = u8(&r);
  if (refb >= 232) {
    switch (refb % 8) {
      case 0: o.mask = (fa_tensor){(void *)s_mask, FA_BOOL, {1, 1, 1, 1}, {1, 1, 1, 1}, FA_MEMORY_AUTO}; break;
      case 1: o.bias = (fa_tensor){(void *)s_bias, FA_F32, {1, 1, 1, 1}, {1, 1, 1, 1}, FA_MEMORY_AUTO}; break;
      case 2: o.seqlens_q = s_ints; break;
      case 3: o.seqlens_k = s_ints; break;
      case 4: o.cu_seqlens_q = s_ints, o.num_seqs = 1; break;
      case 5: o.cu_seqlens_k = s_ints, o.cu_seqlens_q = s_ints, o.num_seqs = 1; break;
      case 6: o.dropout_p = 0.25; break;
      default: o.alibi_slopes = (const float *)((const char *)s_slopes + 2); break;
    }
  }
  /* rotary */
  int64_t rot_dim = 0, rot_len = 0;
  uint8_t rlb = 0;
  if (want_rot) {
    const uint8_t db = u8(&r);
    const int64_t dmax = D > 0 && D <= 16 ? D : 16;
    rot_dim = db < 200   ? 2 * (1 + db % (dmax / 2 > 0 ? dmax / 2 : 1))
              : db < 232 ? (int64_t)(db % 5) * 2 - 1 + (db & 1 ? dmax + 1 : 0)
                         : k_hostile[db % NHOSTILE];
    rlb = u8(&r); /* rot_len is decided once the lengths are known */
  }

  /* tensors */
  const int64_t sq[4] = {B, Hq, Lq, D}, skc[4] = {pages, Hkv, rows, D}, svc[4] = {pages, Hkv, rows, Dv},
                skn[4] = {B, Hkv, Lnew0, D}, svn[4] = {B, Hkv, Lnew0, Dv}, so[4] = {B, Hq, Lq, Dv};
  const int64_t *shapes[NV] = {sq, skc, svc, skn, svn, so, so};
  tdesc t[NV];
  for (int i = 0; i < NV; ++i) {
    const fa_dtype tdt = i == V_LSE ? (dt == FA_F64 && hd.backend == FA_BACKEND_REF ? FA_F64 : FA_F32) : dt;
    decode_tensor(&r, &t[i], i, shapes[i], i == V_LSE ? 3 : 4, tdt);
  }
  if (!has_new) t[V_KN].t.data = t[V_VN].t.data = NULL;
  if (!t[V_KN].present) t[V_KN].t.data = NULL; /* fa_kvcache holds them by value */
  if (!t[V_VN].present) t[V_VN].t.data = NULL;
  if (!t[V_KC].present) t[V_KC].t.data = NULL;
  if (!t[V_VC].present) t[V_VC].t.data = NULL;
  if (kb & 32) t[V_LSE].t.data = NULL;

  /* what the library will read, from the tensors it gets */
  const int64_t qB = t[V_Q].t.shape[0], qH = t[V_Q].t.shape[1], qL = t[V_Q].t.shape[2];
  const int64_t krows = t[V_KC].t.shape[2];
  const int newgiven = t[V_KN].t.data || t[V_VN].t.data;
  const int64_t Lnew = newgiven ? t[V_KN].t.shape[2] : 0;
  int64_t cap = krows;
  if (paged && (max_blocks <= 0 || krows <= 0 || __builtin_mul_overflow(max_blocks, krows, &cap))) cap = -1;
  const int nB = qB > 0 && qB <= 4096 ? (int)qB : 1;
  int32_t *lens = (int32_t *)malloc((size_t)nB * sizeof(int32_t));
  const int64_t hi = cap > 0 && Lnew >= 0 && Lnew <= cap && cap - Lnew < 4096 ? cap - Lnew + 1 : cap > 0 ? 4096 : 9;
  int lens_ok = qB == nB && cap > 0 && Lnew >= 0 && Lnew <= cap;
  int64_t longest = 0;
  for (int b = 0; b < nB; ++b) {
    lens[b] = pick_int(u8(&r), 0, hi);
    if (lens_ok && (lens[b] < 0 || lens[b] > cap - Lnew)) lens_ok = 0;
    if (lens[b] > longest) longest = lens[b];
  }
  xarr xl, xbt, xcos, xsin, xal;
  memset(&xbt, 0, sizeof xbt), memset(&xcos, 0, sizeof xcos), memset(&xsin, 0, sizeof xsin),
      memset(&xal, 0, sizeof xal);
  float *rot = NULL, *al = NULL;
  xarr_decode(&r, &xl, (size_t)nB * sizeof(int32_t));
  /* block table: every entry, or only those of the pages each sequence uses */
  int32_t *bt = NULL;
  size_t nbt = 0;
  if (paged) {
    const int64_t st = bt_stride ? bt_stride : max_blocks;
    uint64_t full = 0;
    const int full_ok = st > 0 && max_blocks > 0 && !__builtin_mul_overflow((uint64_t)(nB - 1), (uint64_t)st, &full) &&
                        !__builtin_add_overflow(full, (uint64_t)max_blocks, &full) && full <= 65536;
    if (bt_full && full_ok) {
      nbt = (size_t)full;
    } else if (lens_ok && st >= max_blocks && krows > 0) {
      for (int b = 0; b < nB; ++b) {
        const int64_t x = lens[b] + Lnew, used = x > 0 ? (x - 1) / krows + 1 : 0;
        uint64_t end;
        if (used > 0 && (__builtin_mul_overflow((uint64_t)b, (uint64_t)st, &end) || (end += (uint64_t)used) > 65536))
          goto skip;
        if (used > 0 && end > nbt) nbt = (size_t)end;
      }
    } else {
      nbt = full_ok ? (size_t)full : 1; /* refused before the table is read */
    }
    bt = (int32_t *)malloc((nbt + 1) * sizeof(int32_t));
    const int64_t np = pages > 0 && pages <= 4096 ? pages : 8;
    for (size_t i = 0; i < nbt; ++i) bt[i] = pick_int(u8(&r), 0, np);
  }
  xarr_decode(&r, &xbt, nbt * sizeof(int32_t));
  if (paged && lens_ok && krows > 0) { /* the entries of the pages used (none if the call is refused earlier) */
    const int64_t st = bt_stride ? bt_stride : max_blocks;
    size_t end = 0;
    for (int b = 0; b < nB && st >= max_blocks; ++b) {
      const int64_t x = lens[b] + Lnew, used = x > 0 ? (x - 1) / krows + 1 : 0;
      if (used > 0 && (uint64_t)b * (uint64_t)st + (uint64_t)used > end)
        end = (size_t)((uint64_t)b * (uint64_t)st + (uint64_t)used);
    }
    if (end * sizeof(int32_t) < xbt.read) xbt.read = end * sizeof(int32_t);
  }
  /* rotary tables: the rows of the positions rotated, or fewer */
  size_t rot_n = 0;
  if (want_rot) {
    const int64_t need = sat_add(longest, qL > Lnew ? qL : Lnew);
    static const int64_t lens_bad[] = {0, -1, INT64_MAX, E(40), INT64_MIN};
    rot_len = rlb < 200 ? need : rlb < 232 ? (need < INT64_MAX - 2 ? need + rlb % 3 - 1 : need) : lens_bad[rlb % 5];
    const int64_t rows_given = rot_len < need ? rot_len : need;
    const int64_t half = rot_dim > 1 && rot_dim <= 64 ? rot_dim / 2 : 1;
    rot_n = rows_given > 0 && rows_given <= 8192 ? (size_t)(rows_given * half) : 1;
  }
  xarr_decode(&r, &xcos, rot_n * sizeof(float));
  xarr_decode(&r, &xsin, rot_n * sizeof(float));
  const int want_alibi = (kb >> 4) & 1 && qH > 0 && qH <= 4096;
  xarr_decode(&r, &xal, want_alibi ? (size_t)qH * sizeof(float) : 0);
  rot = (float *)malloc((rot_n + 1) * sizeof(float));
  al = (float *)malloc(((size_t)(want_alibi ? qH : 0) + 1) * sizeof(float));
  for (size_t i = 0; i < rot_n; ++i) rot[i] = (float)(u8(&r) % 17) / 8.0f - 1.0f;
  for (int64_t h = 0; want_alibi && h < qH; ++h) al[h] = (float)(u8(&r) % 17) / 8.0f;

  /* sizes validation accepts but that take too long: not worth an execution */
  {
    const int64_t dims[5] = {qB, qH, qL, sat_add(sat_add(longest, Lnew), 1), D > Dv ? D : Dv};
    uint64_t w = 1;
    int sane = 1;
    for (int i = 0; i < 5; ++i)
      if (dims[i] <= 0 || __builtin_mul_overflow(w, (uint64_t)dims[i], &w)) sane = 0;
    if (sane && w > WORK_CAP) goto skip;
  }
  {
    const uint8_t extra = u8(&r);
    const size_t total = arena_layout(t, NV);
    unsigned char *arena = (unsigned char *)malloc(total), *before = (unsigned char *)malloc(total);
    if (!arena || !before) abort();
    arena_fill(arena, total, hd.fill, rd->n);
    arena_point(t, NV, arena);
    region reg[5];
    int nreg = 0;
    xarr_place(&xl, lens, t, arena, total, reg, &nreg);
    xarr_place(&xbt, bt ? bt : lens, t, arena, total, reg, &nreg);
    xarr_place(&xcos, rot, t, arena, total, reg, &nreg);
    xarr_place(&xsin, rot, t, arena, total, reg, &nreg);
    xarr_place(&xal, al, t, arena, total, reg, &nreg);
    memcpy(before, arena, total);
    g_t = t, g_names = k_vnames, g_nt = NV, g_arena = arena, g_call = "fa_forward_kvcache";
    g_backend = (int)hd.backend;

    fa_kvcache kc;
    memset(&kc, 0, sizeof kc);
    kc.k_cache = t[V_KC].t;
    kc.v_cache = t[V_VC].t;
    kc.k_new = t[V_KN].t;
    kc.v_new = t[V_VN].t;
    kc.cache_seqlens = (extra & 3) == 3 ? NULL : (const int32_t *)xl.p;
    kc.block_table = paged ? (const int32_t *)xbt.p : NULL;
    kc.max_blocks = max_blocks;
    kc.block_table_stride = bt_stride;
    if (want_rot) {
      kc.rotary_cos = (extra & 12) == 12 ? NULL : (const float *)xcos.p;
      kc.rotary_sin = (extra & 12) == 8 ? NULL : (const float *)xsin.p;
      kc.rotary_dim = rot_dim;
      kc.rotary_len = rot_len;
      kc.rotary_interleaved = (kb >> 3) & 1;
    }
    kc.num_splits = num_splits;
    if (want_alibi && !o.alibi_slopes) o.alibi_slopes = (const float *)xal.p;
    fa_tensor *pq = t[V_Q].present ? &t[V_Q].t : NULL, *po = t[V_O].present ? &t[V_O].t : NULL;
    fa_tensor *pl = (extra & 16) || !t[V_LSE].present ? NULL : &t[V_LSE].t;
    const fa_kvcache *pc = (kb & 128) && (extra & 32) ? NULL : &kc;

    if (getenv("FA_FUZZ_PRINT")) { /* what a finding was: FA_FUZZ_PRINT=1 fuzz_api crash-file */
      fprintf(stderr,
              "kvcache: backend %d paged %d rows %lld max_blocks %lld bt_stride %lld pages %lld splits %d block_k %d\n",
              (int)hd.backend, paged, (long long)rows, (long long)max_blocks, (long long)bt_stride, (long long)pages,
              num_splits, o.block_k);
      for (int b = 0; b < nB && b < 8; ++b) fprintf(stderr, "  cache_seqlens[%d] = %d\n", b, lens[b]);
      for (int i = 0; i < NV; ++i)
        fprintf(stderr, "  %-8s data %p dtype %d shape [%lld %lld %lld %lld] stride [%lld %lld %lld %lld]\n",
                k_vnames[i], t[i].t.data, (int)t[i].t.dtype, (long long)t[i].t.shape[0], (long long)t[i].t.shape[1],
                (long long)t[i].t.shape[2], (long long)t[i].t.shape[3], (long long)t[i].t.stride[0],
                (long long)t[i].t.stride[1], (long long)t[i].t.stride[2], (long long)t[i].t.stride[3]);
    }
    fa_context *c = hd.null_ctx ? NULL : ctx;
    const fa_status st = fa_forward_kvcache(c, hd.backend, pq, pc, no_opt ? NULL : &o, po, pl);

    const char *msg = c ? fa_context_last_error(c) : NULL;
    check_status(st, msg, hd.null_ctx);
    if (getenv("FA_FUZZ_PRINT")) fprintf(stderr, "%s: %s \"%s\"\n", g_call, fa_status_name(st), msg ? msg : "");
    int out[NV] = {0}, in[NV] = {0};
    const int appends = kc.k_new.data || kc.v_new.data;
    out[V_O] = po && po->data;
    out[V_LSE] = pl && pl->data;
    in[V_Q] = pq && pq->data;
    out[V_KC] = appends, out[V_VC] = appends;
    in[V_KC] = !appends, in[V_VC] = !appends;
    in[V_KN] = in[V_VN] = appends;
    check_memory(st, t, NV, out, in, reg, nreg, arena, before, total);
    free(arena), free(before);
  }
skip:
  xarr_done(&xl, FA_OK), xarr_done(&xbt, FA_OK), xarr_done(&xcos, FA_OK), xarr_done(&xsin, FA_OK);
  xarr_done(&xal, FA_OK);
  free(lens), free(bt), free(rot), free(al);
}

/* ---- fa_merge_states ----------------------------------------------------------- */

/* Decodes: n (0..16, negative), [B, H, L, Dv], the parts' dtype, o's dtype
 * (sometimes another), f32 or f64 lse; o, lse and every part as fuzz_attn
 * decodes tensors (so parts that disagree in shape, dtype, stride or place,
 * over o included); what each lse part holds (-inf rows, +inf/NaN, values
 * far apart); NULL o_parts / lse_parts / lse. The arrays of parts are
 * exactly n long (ASan sees a part read past n). */

enum { MAXPARTS = 16, NM = 2 + 2 * MAXPARTS };

static void fuzz_merge(reader *rd, fa_context *ctx) {
  static char names_buf[NM][20];
  static const char *names[NM];
  if (!names[0]) {
    for (int i = 0; i < NM; ++i) {
      if (i < 2)
        snprintf(names_buf[i], sizeof names_buf[i], "%s", i ? "lse" : "o");
      else
        snprintf(names_buf[i], sizeof names_buf[i], "%s[%d]", i % 2 ? "lse_parts" : "o_parts", (i - 2) / 2);
      names[i] = names_buf[i];
    }
  }
  reader r = *rd;
  const head_t hd = decode_head(&r);
  const uint8_t nb = u8(&r);
  static const int n_bad[] = {-1, INT32_MIN, 0, -100};
  const int n = nb < 200 ? nb % 6 : nb < 240 ? 6 + nb % (MAXPARTS - 5) : n_bad[nb % 4];
  const int np = n > 0 ? n : 0, nt = 2 + 2 * np;
  const int64_t B = dim(&r, 0), H = dim(&r, 0), L = dim(&r, 0), Dv = dim(&r, 1);
  const uint8_t db = u8(&r);
  const fa_dtype dt = (fa_dtype)(db % 4), odt = (db >> 4) < 12 ? dt : (fa_dtype)((db >> 4) % 4);
  const fa_dtype ldt = (db >> 2) & 1 ? FA_F64 : FA_F32;
  const uint8_t fb = u8(&r); /* 1 o_parts NULL, 2 lse_parts NULL, 4 lse NULL, 8 lse data NULL (only with fb >= 240) */
  const int64_t so[4] = {B, H, L, Dv};
  tdesc t[NM];
  for (int i = 0; i < nt; ++i)
    decode_tensor(&r, &t[i], i, so, i % 2 ? 3 : 4, i < 2 ? (i ? ldt : odt) : i % 2 ? ldt : dt);
  uint8_t pat[MAXPARTS];
  for (int k = 0; k < np; ++k) pat[k] = u8(&r) % 6;
  {
    const size_t total = arena_layout(t, nt);
    unsigned char *arena = (unsigned char *)malloc(total), *before = (unsigned char *)malloc(total);
    if (!arena || !before) abort();
    arena_fill(arena, total, hd.fill, rd->n);
    arena_point(t, nt, arena);
    for (int k = 0; k < np; ++k)
      if (t[3 + 2 * k].place == 0) set_elems(&t[3 + 2 * k], arena, pat[k], &r);
    memcpy(before, arena, total);
    g_t = t, g_names = names, g_nt = nt, g_arena = arena, g_call = "fa_merge_states";
    g_backend = (int)hd.backend;

    /* exactly n parts: ASan sees a read of a part past n */
    fa_tensor *op = (fa_tensor *)malloc((size_t)(np ? np : 1) * sizeof(fa_tensor));
    fa_tensor *lp = (fa_tensor *)malloc((size_t)(np ? np : 1) * sizeof(fa_tensor));
    if (!op || !lp) abort();
    for (int k = 0; k < np; ++k) op[k] = t[2 + 2 * k].t, lp[k] = t[3 + 2 * k].t;
    const int hostile = fb >= 240;
    fa_tensor *po = t[0].present ? &t[0].t : NULL, *pl = t[1].present ? &t[1].t : NULL;
    if (hostile && (fb & 4)) pl = NULL;
    if (hostile && (fb & 8) && pl) pl->data = NULL;
    fa_context *c = hd.null_ctx ? NULL : ctx;
    const fa_status st =
        fa_merge_states(c, hd.backend, n, hostile && (fb & 1) ? NULL : op, hostile && (fb & 2) ? NULL : lp, po, pl);
    const char *msg = c ? fa_context_last_error(c) : NULL;
    check_status(st, msg, hd.null_ctx);
    if (getenv("FA_FUZZ_PRINT")) fprintf(stderr, "%s: %s \"%s\"\n", g_call, fa_status_name(st), msg ? msg : "");
    int out[NM] = {0}, in[NM] = {0};
    out[0] = po && po->data;
    out[1] = pl && pl->data;
    for (int i = 2; i < nt; ++i) in[i] = 1;
    check_memory(st, t, nt, out, in, NULL, 0, arena, before, total);
    free(op), free(lp), free(arena), free(before);
  }
}

/* The first byte picks the call: fa_forward / fa_backward (0..127),
 * fa_forward_kvcache (128..223), fa_merge_states (224..255). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fa_context *ctx;
  if (!ctx) {
    if (fa_context_create(&ctx) != FA_OK) abort();
    fa_context_set_threads(ctx, 1);
  }
  reader r = {data, size};
  const uint8_t sel = u8(&r);
  if (sel < 128)
    fuzz_attn(&r, ctx);
  else if (sel < 224)
    fuzz_kvcache(&r, ctx);
  else
    fuzz_merge(&r, ctx);
  return 0;
}
