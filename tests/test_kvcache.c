/* fa_forward_kvcache on every backend of support/backends.c (the cpu one
 * under every ISA), against a float64 reference written here from the
 * semantics of docs/semantics.md ("KV cache"): the cache after the call
 * bit for bit (the appended rows rounded to the cache's dtype, every other
 * byte untouched), O and LSE within the dtype's tolerance; split counts
 * 1 .. many equal up to rounding, and a given split count the same bits
 * on 1 and 2 threads (cuda: and the same bits whether the decode kernel
 * merges the splits or the combine kernel does). cuda runs every case
 * whose head dims are multiples of 8 (f16, bf16, f32; any page size) and
 * refuses the rest (FA_ERR_UNSUPPORTED), leaving the cache alone. Then the
 * bad inputs: each status names the argument and the cache is untouched;
 * and fa_merge_states on cuda against the host merge. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/element.h"
#include "rules/rotary.h"
#include "support/backends.h"
#include "support/cm.h"
#include "support/device.h"
#include "support/rng.h"

typedef struct kvcase {
  const char *name;
  int B, Hq, Hkv, Lq, Lnew, D, Dv;
  int page;       /* 0 = contiguous */
  int cap;        /* contiguous: capacity; paged: max_blocks * page */
  int seqlens[4]; /* [B] */
  int shuffle;    /* paged: pages in a random order */
  int shared;     /* paged: every sequence reads sequence 0's first page */
  int blhd;       /* contiguous: the [B, L, H, D] memory layout */
  int causal, wl, wr;
  double softcap;
  int alibi;
  int rot_dim, interleaved; /* rot_dim 0 = no rotary */
} kvcase;

static const kvcase cases[] = {
    {"contig_no_append_mha", .B = 3, .Hq = 2, .Hkv = 2, .Lq = 1, .D = 16, .Dv = 16, .cap = 40, .seqlens = {5, 0, 37}},
    {"contig_append_gqa_full", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 1, .Lnew = 1, .D = 16, .Dv = 8, .cap = 40,
     .seqlens = {0, 39}, .causal = 1},
    {"contig_blhd_append_lq5", .B = 2, .Hq = 4, .Hkv = 1, .Lq = 5, .Lnew = 5, .D = 8, .Dv = 8, .cap = 33,
     .seqlens = {28, 3}, .blhd = 1, .causal = 1},
    {"paged16_shuffled_append3_boundary", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 3, .Lnew = 3, .D = 16, .Dv = 16, .page = 16,
     .cap = 48, .seqlens = {13, 30}, .shuffle = 1, .causal = 1},
    {"paged1_mqa_lq16", .B = 2, .Hq = 4, .Hkv = 1, .Lq = 16, .Lnew = 16, .D = 8, .Dv = 4, .page = 1, .cap = 40,
     .seqlens = {0, 20}, .shuffle = 1, .causal = 1},
    {"paged7_shared_prefix", .B = 3, .Hq = 2, .Hkv = 1, .Lq = 2, .D = 8, .Dv = 8, .page = 7, .cap = 35,
     .seqlens = {7, 20, 35}, .shuffle = 1, .shared = 1},
    {"paged16_page_end_full", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 4, .Lnew = 4, .D = 16, .Dv = 16, .page = 16, .cap = 32,
     .seqlens = {12, 28}, .causal = 1},
    {"rotary_neox_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 2, .Lnew = 2, .D = 16, .Dv = 16, .page = 16, .cap = 64,
     .seqlens = {17, 40}, .shuffle = 1, .causal = 1, .rot_dim = 16},
    {"rotary_gptj_half_window_softcap_alibi", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 3, .Lnew = 1, .D = 16, .Dv = 8,
     .cap = 50, .seqlens = {30, 9}, .causal = 1, .wl = 5, .wr = 0, .softcap = 3.0, .alibi = 1, .rot_dim = 8,
     .interleaved = 1},
    {"long_splits_gqa", .B = 1, .Hq = 8, .Hkv = 2, .Lq = 2, .Lnew = 1, .D = 32, .Dv = 32, .page = 64, .cap = 1024,
     .seqlens = {900}, .shuffle = 1, .causal = 1},
    {"long_contig_noncausal", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 1, .D = 24, .Dv = 24, .cap = 700, .seqlens = {699, 300}},
    {"empty_rows_lq_gt_lk", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 6, .D = 8, .Dv = 8, .cap = 8, .seqlens = {0, 3},
     .causal = 1},
    /* cuda's split merge in the decode kernel at its sizes: 16 rows per kv
     * head (one full tensor-core row block; f32: two of 8), D = 128 (64
     * splits of 16 rows do not fit the block's shared memory at once: merged
     * a few splits at a time), next to a sequence whose one key is in split
     * 0 and whose first row sees no key; then D = 256 on CUDA cores, 8 rows,
     * where the combine kernel cannot stage 64 splits (its other path) */
    {"long_gqa16_d128_merge_chunks", .B = 2, .Hq = 16, .Hkv = 2, .Lq = 2, .Lnew = 1, .D = 128, .Dv = 128, .page = 32,
     .cap = 2048, .seqlens = {1500, 0}, .shuffle = 1, .causal = 1},
    {"long_gqa8_d256", .B = 1, .Hq = 8, .Hkv = 1, .Lq = 1, .D = 256, .Dv = 256, .cap = 1100, .seqlens = {1037}},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- host problem ------------------------------------------------------ */

typedef struct kvprob {
  const kvcase *c;
  fa_dtype dt;
  int pages, page_size, max_blocks;
  int64_t kc_shape[4], kc_stride[4], vc_shape[4], vc_stride[4];
  size_t kc_bytes, vc_bytes;
  unsigned char *kc, *vc;         /* the caches before the call */
  unsigned char *kc_exp, *vc_exp; /* after it, as the semantics say */
  unsigned char *q, *knew, *vnew;
  int32_t *seqlens, *bt;
  float *cosv, *sinv, *slopes;
  int rot_len;
  double *o_exp, *lse_exp; /* [B, Hq, Lq, Dv], [B, Hq, Lq] */
} kvprob;

static size_t es(fa_dtype dt) {
  return fa_dtype_size(dt);
}

static void strides_for(const int64_t shape[4], int paged_or_blhd, int64_t st[4]) {
  if (paged_or_blhd) { /* memory [P, L, H, D], logical [P, H, L, D] */
    st[3] = 1;
    st[1] = shape[3];
    st[2] = shape[1] * shape[3];
    st[0] = shape[2] * st[2];
  } else {
    st[3] = 1;
    st[2] = shape[3];
    st[1] = shape[2] * shape[3];
    st[0] = shape[1] * st[1];
  }
}

static int64_t off(const int64_t st[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * st[0] + b * st[1] + c * st[2] + d * st[3];
}

static void locate(const kvprob *P, int b, int64_t j, int64_t *page, int64_t *row) {
  if (!P->c->page) {
    *page = b;
    *row = j;
  } else {
    *page = P->bt[b * P->max_blocks + j / P->page_size];
    *row = j % P->page_size;
  }
}

static void fill(trng *r, unsigned char *buf, fa_dtype dt, size_t n) {
  for (size_t e = 0; e < n; ++e) fa__elem_set(buf, dt, (int64_t)e, trng_normal(r));
}

static void prob_make(kvprob *P, const kvcase *c, fa_dtype dt) {
  memset(P, 0, sizeof *P);
  P->c = c;
  P->dt = dt;
  trng r = {0x5eed + (uint64_t)dt * 77 + (uint64_t)c->D};
  const int paged = c->page > 0;
  P->page_size = paged ? c->page : c->cap;
  P->max_blocks = paged ? c->cap / c->page : 1;
  P->pages = paged ? c->B * P->max_blocks + 3 : c->B;
  const int64_t ks[4] = {P->pages, c->Hkv, P->page_size, c->D}, vs[4] = {P->pages, c->Hkv, P->page_size, c->Dv};
  memcpy(P->kc_shape, ks, sizeof ks);
  memcpy(P->vc_shape, vs, sizeof vs);
  strides_for(ks, paged || c->blhd, P->kc_stride);
  strides_for(vs, paged || c->blhd, P->vc_stride);
  P->kc_bytes = (size_t)(ks[0] * ks[1] * ks[2] * ks[3]) * es(dt);
  P->vc_bytes = (size_t)(vs[0] * vs[1] * vs[2] * vs[3]) * es(dt);
  P->kc = malloc(P->kc_bytes);
  P->vc = malloc(P->vc_bytes);
  fill(&r, P->kc, dt, P->kc_bytes / es(dt));
  fill(&r, P->vc, dt, P->vc_bytes / es(dt));
  const size_t nq = (size_t)(c->B * c->Hq * c->Lq * c->D), nk = (size_t)(c->B * c->Hkv * (c->Lnew ? c->Lnew : 1));
  P->q = malloc(nq * es(dt));
  P->knew = malloc(nk * (size_t)c->D * es(dt));
  P->vnew = malloc(nk * (size_t)c->Dv * es(dt));
  fill(&r, P->q, dt, nq);
  fill(&r, P->knew, dt, nk * (size_t)c->D);
  fill(&r, P->vnew, dt, nk * (size_t)c->Dv);
  P->seqlens = malloc((size_t)c->B * sizeof(int32_t));
  for (int b = 0; b < c->B; ++b) P->seqlens[b] = c->seqlens[b];
  if (paged) { /* a permutation of the pages (or the identity), page 0 of seq 0 shared */
    const int n = P->pages;
    int *perm = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; ++i) perm[i] = i;
    if (c->shuffle)
      for (int i = n - 1; i > 0; --i) {
        const int k = (int)(trng_u64(&r) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
      }
    P->bt = malloc((size_t)(c->B * P->max_blocks) * sizeof(int32_t));
    for (int b = 0; b < c->B; ++b)
      for (int i = 0; i < P->max_blocks; ++i) P->bt[b * P->max_blocks + i] = perm[b * P->max_blocks + i];
    if (c->shared)
      for (int b = 1; b < c->B; ++b) P->bt[b * P->max_blocks] = P->bt[0];
    free(perm);
  }
  if (c->rot_dim) {
    int mx = 0;
    for (int b = 0; b < c->B; ++b) mx = c->seqlens[b] > mx ? c->seqlens[b] : mx;
    P->rot_len = mx + (c->Lq > c->Lnew ? c->Lq : c->Lnew);
    P->cosv = malloc((size_t)(P->rot_len * c->rot_dim / 2) * sizeof(float));
    P->sinv = malloc((size_t)(P->rot_len * c->rot_dim / 2) * sizeof(float));
    for (int pos = 0; pos < P->rot_len; ++pos)
      for (int t = 0; t < c->rot_dim / 2; ++t) {
        const double th = pos * pow(10000.0, -2.0 * t / c->rot_dim);
        P->cosv[pos * c->rot_dim / 2 + t] = (float)cos(th);
        P->sinv[pos * c->rot_dim / 2 + t] = (float)sin(th);
      }
  }
  if (c->alibi) {
    P->slopes = malloc((size_t)c->Hq * sizeof(float));
    for (int h = 0; h < c->Hq; ++h) P->slopes[h] = (float)(0.25 * (h + 1));
  }

  /* the cache after the call: k_new rotated at cache_seqlens[b] + t */
  P->kc_exp = malloc(P->kc_bytes);
  P->vc_exp = malloc(P->vc_bytes);
  memcpy(P->kc_exp, P->kc, P->kc_bytes);
  memcpy(P->vc_exp, P->vc, P->vc_bytes);
  double x[256];
  for (int b = 0; b < c->B; ++b)
    for (int h = 0; h < c->Hkv; ++h)
      for (int t = 0; t < c->Lnew; ++t) {
        const int64_t pos = c->seqlens[b] + t;
        int64_t pg, row;
        locate(P, b, pos, &pg, &row);
        const int64_t base = ((int64_t)(b * c->Hkv + h) * c->Lnew + t);
        for (int d = 0; d < c->D; ++d) x[d] = fa__elem_get(P->knew, dt, base * c->D + d);
        if (c->rot_dim)
          fa__rotary_d(x, c->rot_dim, c->interleaved, P->cosv + pos * c->rot_dim / 2, P->sinv + pos * c->rot_dim / 2);
        for (int d = 0; d < c->D; ++d) fa__elem_set(P->kc_exp, dt, off(P->kc_stride, pg, h, row, d), x[d]);
        for (int d = 0; d < c->Dv; ++d)
          fa__elem_set(P->vc_exp, dt, off(P->vc_stride, pg, h, row, d), fa__elem_get(P->vnew, dt, base * c->Dv + d));
      }

  /* O and LSE: the textbook softmax over the keys of the cache after the call */
  const int64_t nrow = (int64_t)c->B * c->Hq * c->Lq;
  P->o_exp = malloc((size_t)(nrow * c->Dv) * sizeof(double));
  P->lse_exp = malloc((size_t)nrow * sizeof(double));
  const double scale = 1.0 / sqrt((double)c->D);
  double *sc = malloc((size_t)(c->cap + 1) * sizeof(double));
  for (int b = 0; b < c->B; ++b) {
    const int64_t lk = c->seqlens[b] + c->Lnew;
    for (int h = 0; h < c->Hq; ++h) {
      const int kvh = h / (c->Hq / c->Hkv);
      for (int i = 0; i < c->Lq; ++i) {
        const int64_t row = ((int64_t)b * c->Hq + h) * c->Lq + i;
        for (int d = 0; d < c->D; ++d) x[d] = fa__elem_get(P->q, dt, row * c->D + d);
        if (c->rot_dim) {
          const int64_t pos = c->seqlens[b] + i;
          fa__rotary_d(x, c->rot_dim, c->interleaved, P->cosv + pos * c->rot_dim / 2, P->sinv + pos * c->rot_dim / 2);
        }
        const int64_t diag = i + lk - c->Lq;
        double mx = -INFINITY;
        for (int64_t j = 0; j < lk; ++j) {
          sc[j] = -INFINITY;
          if (c->causal && j > diag + c->wr) continue;
          if (c->wl > 0 && j < diag - c->wl) continue;
          int64_t pg, rw;
          locate(P, b, j, &pg, &rw);
          double dot = 0;
          for (int d = 0; d < c->D; ++d) dot += x[d] * fa__elem_get(P->kc_exp, dt, off(P->kc_stride, pg, kvh, rw, d));
          double s = scale * dot;
          if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
          if (c->alibi) s -= P->slopes[h] * fabs((double)(diag - j));
          sc[j] = s;
          mx = fmax(mx, s);
        }
        double l = 0;
        for (int e = 0; e < c->Dv; ++e) P->o_exp[row * c->Dv + e] = 0;
        for (int64_t j = 0; j < lk && mx != -INFINITY; ++j) {
          if (sc[j] == -INFINITY) continue;
          const double w = exp(sc[j] - mx);
          l += w;
          int64_t pg, rw;
          locate(P, b, j, &pg, &rw);
          for (int e = 0; e < c->Dv; ++e)
            P->o_exp[row * c->Dv + e] += w * fa__elem_get(P->vc_exp, dt, off(P->vc_stride, pg, kvh, rw, e));
        }
        for (int e = 0; e < c->Dv; ++e) P->o_exp[row * c->Dv + e] = l > 0 ? P->o_exp[row * c->Dv + e] / l : 0;
        P->lse_exp[row] = l > 0 ? mx + log(l) : -INFINITY;
      }
    }
  }
  free(sc);
}

static void prob_free(kvprob *P) {
  void *ps[] = {P->kc,      P->vc, P->kc_exp, P->vc_exp, P->q,      P->knew,  P->vnew,
                P->seqlens, P->bt, P->cosv,   P->sinv,   P->slopes, P->o_exp, P->lse_exp};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; ++i) free(ps[i]);
}

/* ---- one call on a backend, in its memory ------------------------------ */

typedef struct kvrun {
  int dev;
  void *kc, *vc, *q, *knew, *vnew, *o, *lse, *seqlens, *bt, *cosv, *sinv, *slopes;
  size_t o_bytes, lse_bytes;
} kvrun;

static void *put(int dev, const void *src, size_t bytes) {
  if (!src) return NULL;
  if (!dev) {
    void *p = malloc(bytes);
    memcpy(p, src, bytes);
    return p;
  }
  void *p = tdev_alloc(bytes);
  assert_non_null(p);
  assert_int_equal(tdev_to_device(p, src, bytes), 0);
  return p;
}

static void get(int dev, void *dst, const void *src, size_t bytes) {
  if (!dev)
    memcpy(dst, src, bytes);
  else
    assert_int_equal(tdev_to_host(dst, src, bytes), 0);
}

static void run_free(kvrun *R) {
  void *ps[] = {R->kc, R->vc, R->q, R->knew, R->vnew, R->o, R->lse, R->seqlens, R->bt, R->cosv, R->sinv, R->slopes};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; ++i)
    if (ps[i]) R->dev ? tdev_free(ps[i]) : free(ps[i]);
}

static fa_tensor tens(void *data, fa_dtype dt, const int64_t shape[4], const int64_t st[4], int dev) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dt;
  memcpy(t.shape, shape, sizeof t.shape);
  memcpy(t.stride, st, sizeof t.stride);
  t.memory = dev ? FA_MEMORY_CUDA : FA_MEMORY_HOST;
  return t;
}

/* Runs the call; o/lse come back as doubles, the caches into kc/vc. */
static fa_status run_call(fa_context *ctx, fa_backend be, int dev, const kvprob *P, int num_splits, double *o,
                          double *lse, unsigned char *kc, unsigned char *vc) {
  const kvcase *c = P->c;
  const fa_dtype dt = P->dt;
  kvrun R;
  memset(&R, 0, sizeof R);
  R.dev = dev;
  const size_t nq = (size_t)(c->B * c->Hq * c->Lq), nk = (size_t)(c->B * c->Hkv * (c->Lnew ? c->Lnew : 1));
  R.kc = put(dev, P->kc, P->kc_bytes);
  R.vc = put(dev, P->vc, P->vc_bytes);
  R.q = put(dev, P->q, nq * (size_t)c->D * es(dt));
  R.knew = put(dev, P->knew, nk * (size_t)c->D * es(dt));
  R.vnew = put(dev, P->vnew, nk * (size_t)c->Dv * es(dt));
  R.o_bytes = nq * (size_t)c->Dv * es(dt);
  R.lse_bytes = nq * sizeof(float);
  unsigned char *poison = malloc(R.o_bytes);
  memset(poison, 0xff, R.o_bytes); /* NaN in every dtype */
  R.o = put(dev, poison, R.o_bytes);
  R.lse = put(dev, poison, R.lse_bytes);
  free(poison);
  R.seqlens = put(dev, P->seqlens, (size_t)c->B * sizeof(int32_t));
  if (P->bt) R.bt = put(dev, P->bt, (size_t)(c->B * P->max_blocks) * sizeof(int32_t));
  if (P->cosv) {
    R.cosv = put(dev, P->cosv, (size_t)(P->rot_len * c->rot_dim / 2) * sizeof(float));
    R.sinv = put(dev, P->sinv, (size_t)(P->rot_len * c->rot_dim / 2) * sizeof(float));
  }
  if (P->slopes) R.slopes = put(dev, P->slopes, (size_t)c->Hq * sizeof(float));

  const int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D}, os[4] = {c->B, c->Hq, c->Lq, c->Dv};
  const int64_t ls[4] = {c->B, c->Hq, c->Lq, 1}, kn[4] = {c->B, c->Hkv, c->Lnew, c->D},
                vn[4] = {c->B, c->Hkv, c->Lnew, c->Dv};
  int64_t qst[4], ost[4], lst[4], knst[4], vnst[4];
  strides_for(qs, 0, qst);
  strides_for(os, 0, ost);
  strides_for(ls, 0, lst);
  strides_for(kn, 0, knst);
  strides_for(vn, 0, vnst);
  fa_tensor tq = tens(R.q, dt, qs, qst, dev), to = tens(R.o, dt, os, ost, dev), tl = tens(R.lse, FA_F32, ls, lst, dev);
  fa_kvcache kv;
  memset(&kv, 0, sizeof kv);
  kv.k_cache = tens(R.kc, dt, P->kc_shape, P->kc_stride, dev);
  kv.v_cache = tens(R.vc, dt, P->vc_shape, P->vc_stride, dev);
  kv.cache_seqlens = R.seqlens;
  kv.block_table = R.bt;
  kv.max_blocks = P->bt ? P->max_blocks : 0;
  if (c->Lnew) {
    kv.k_new = tens(R.knew, dt, kn, knst, dev);
    kv.v_new = tens(R.vnew, dt, vn, vnst, dev);
  }
  kv.rotary_cos = R.cosv;
  kv.rotary_sin = R.sinv;
  kv.rotary_len = P->rot_len;
  kv.rotary_dim = c->rot_dim;
  kv.rotary_interleaved = c->interleaved;
  kv.num_splits = num_splits;
  fa_options opt;
  fa_options_init(&opt);
  opt.causal = c->causal;
  if (c->wl > 0) {
    opt.use_window = 1;
    opt.window_left = c->wl;
    opt.window_right = c->causal ? c->wr : -1;
  }
  opt.softcap = c->softcap;
  opt.alibi_slopes = R.slopes;
  const fa_status st = fa_forward_kvcache(ctx, be, &tq, &kv, &opt, &to, &tl);
  get(dev, kc, R.kc, P->kc_bytes);
  get(dev, vc, R.vc, P->vc_bytes);
  if (st == FA_OK) {
    unsigned char *ob = malloc(R.o_bytes);
    float *lb = malloc(R.lse_bytes);
    get(dev, ob, R.o, R.o_bytes);
    get(dev, lb, R.lse, R.lse_bytes);
    for (size_t e = 0; e < nq * (size_t)c->Dv; ++e) o[e] = fa__elem_get(ob, dt, (int64_t)e);
    for (size_t e = 0; e < nq; ++e) lse[e] = lb[e];
    free(ob);
    free(lb);
  }
  run_free(&R);
  return st;
}

static double tol_of(fa_dtype dt) {
  return dt == FA_F64 ? 1e-10 : dt == FA_F32 ? 2e-4 : dt == FA_F16 ? 2e-2 : 5e-2;
}

/* max |x - r| / max(1, max |r|); -inf LSE must match exactly (returns inf otherwise) */
static double err_of(const double *x, const double *r, int64_t n) {
  double md = 0, mr = 1;
  for (int64_t e = 0; e < n; ++e) {
    if (isinf(r[e]) || isinf(x[e])) {
      if (x[e] != r[e]) return INFINITY;
      continue;
    }
    if (isnan(x[e])) return NAN;
    md = fmax(md, fabs(x[e] - r[e]));
    mr = fmax(mr, fabs(r[e]));
  }
  return md / mr;
}

static const fa_dtype all_dts[] = {FA_F32, FA_F64, FA_F16, FA_BF16};

/* cuda merges a split call's partial results in the combine kernel
 * (the default; FLASHATTN_CUDA_DECODE_FUSED_MERGE=0) or in the decode
 * kernel (=1: the last split block of each row block): both must give the
 * same bits for a given num_splits. Returns the number of split counts where they differ;
 * the variable is as it was afterwards. */
static int merge_paths_differ(fa_context *ctx, int dev, const kvprob *P) {
  static const char *const var = "FLASHATTN_CUDA_DECODE_FUSED_MERGE";
  const kvcase *c = P->c;
  const int64_t nrow = (int64_t)c->B * c->Hq * c->Lq;
  const size_t ob = (size_t)(nrow * c->Dv) * sizeof(double), lb = (size_t)nrow * sizeof(double);
  double *o1 = malloc(ob), *o2 = malloc(ob), *l1 = malloc(lb), *l2 = malloc(lb);
  unsigned char *kc = malloc(P->kc_bytes), *vc = malloc(P->vc_bytes);
  const char *was = getenv(var);
  char *keep = was ? strdup(was) : NULL;
  static const int splits[] = {2, 3, 7, 16, 17, 64, 0};
  int bad = 0;
  for (size_t si = 0; si < sizeof splits / sizeof splits[0]; ++si) {
    assert_int_equal(setenv(var, "0", 1), 0);
    const fa_status s1 = run_call(ctx, FA_BACKEND_CUDA, dev, P, splits[si], o1, l1, kc, vc);
    assert_int_equal(setenv(var, "1", 1), 0);
    const fa_status s2 = run_call(ctx, FA_BACKEND_CUDA, dev, P, splits[si], o2, l2, kc, vc);
    if (s1 != FA_OK || s2 != FA_OK || memcmp(o1, o2, ob) != 0 || memcmp(l1, l2, lb) != 0) {
      print_message("%s %s splits %d: the fused split merge (%s) and the combine kernel (%s) differ%s\n", c->name,
                    fa_dtype_name(P->dt), splits[si], fa_status_name(s2), fa_status_name(s1),
                    s1 == FA_OK && s2 == FA_OK ? " in bits" : "");
      ++bad;
    }
  }
  if (keep) {
    assert_int_equal(setenv(var, keep, 1), 0);
    free(keep);
  } else {
    assert_int_equal(unsetenv(var), 0);
  }
  free(o1);
  free(o2);
  free(l1);
  free(l2);
  free(kc);
  free(vc);
  return bad;
}

static void check_backend(const tb_backend *be, const tb_variant *var) {
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  tb_variant_apply(ctx, var);
  const int dev = be->memory == FA_MEMORY_CUDA;
  int fails = 0;
  for (int ci = 0; ci < NCASES; ++ci)
    for (size_t di = 0; di < 4; ++di) {
      const kvcase *c = &cases[ci];
      const fa_dtype dt = all_dts[di];
      kvprob P;
      prob_make(&P, c, dt);
      const int64_t nrow = (int64_t)c->B * c->Hq * c->Lq;
      double *o = malloc((size_t)(nrow * c->Dv) * sizeof(double)), *lse = malloc((size_t)nrow * sizeof(double));
      double *o1 = malloc((size_t)(nrow * c->Dv) * sizeof(double));
      unsigned char *kc = malloc(P.kc_bytes), *vc = malloc(P.vc_bytes);
      fa_status want = FA_OK;
      /* cuda: head dims that are multiples of 8 (its 16-byte copies), no f64 */
      if (be->id == FA_BACKEND_CUDA && (c->D % 8 || c->Dv % 8)) want = FA_ERR_UNSUPPORTED;
      if (be->id == FA_BACKEND_CPU && dt == FA_F64) want = FA_ERR_DTYPE;
      if (be->id == FA_BACKEND_CUDA && dt == FA_F64) want = FA_ERR_DTYPE;
      static const int splits[] = {0, 1, 2, 3, 7, 16, 64};
      for (size_t si = 0; si < sizeof splits / sizeof splits[0]; ++si) {
        const fa_status st = run_call(ctx, be->id, dev, &P, splits[si], o, lse, kc, vc);
        const int ok_cache = want == FA_OK ? !memcmp(kc, P.kc_exp, P.kc_bytes) && !memcmp(vc, P.vc_exp, P.vc_bytes)
                                           : !memcmp(kc, P.kc, P.kc_bytes) && !memcmp(vc, P.vc, P.vc_bytes);
        if (st != want || !ok_cache) {
          print_message("%s %s %s splits %d: status %s (want %s), cache %s: %s\n", c->name, fa_dtype_name(dt),
                        var->name, splits[si], fa_status_name(st), fa_status_name(want),
                        ok_cache ? "as expected" : "WRONG", fa_context_last_error(ctx));
          ++fails;
          break;
        }
        if (st != FA_OK) {
          if (!fa_context_last_error(ctx)[0]) ++fails;
          break;
        }
        const double eo = err_of(o, P.o_exp, nrow * c->Dv), el = err_of(lse, P.lse_exp, nrow);
        const double tol = tol_of(dt);
        if (!(eo <= tol) || !(el <= fmax(tol, 1e-6))) { /* lse is f32 */
          print_message("%s %s %s splits %d: O err %.3g, LSE err %.3g (tol %g)\n", c->name, fa_dtype_name(dt),
                        var->name, splits[si], eo, el, tol);
          ++fails;
        }
        if (si == 0)
          memcpy(o1, o, (size_t)(nrow * c->Dv) * sizeof(double));
        else if (!(err_of(o, o1, nrow * c->Dv) <= tol)) {
          print_message("%s %s: splits %d and auto differ by %.3g\n", c->name, fa_dtype_name(dt), splits[si],
                        err_of(o, o1, nrow * c->Dv));
          ++fails;
        }
      }
      /* a given split count: the same bits on 1 and 2 threads */
      if (want == FA_OK && be->id != FA_BACKEND_REF) {
        assert_int_equal(fa_context_set_threads(ctx, 1), FA_OK);
        assert_int_equal(run_call(ctx, be->id, dev, &P, 3, o, lse, kc, vc), FA_OK);
        assert_int_equal(fa_context_set_threads(ctx, 2), FA_OK);
        assert_int_equal(run_call(ctx, be->id, dev, &P, 3, o1, lse, kc, vc), FA_OK);
        if (memcmp(o, o1, (size_t)(nrow * c->Dv) * sizeof(double)) != 0) {
          print_message("%s %s: num_splits 3 differs between 1 and 2 threads\n", c->name, fa_dtype_name(dt));
          ++fails;
        }
        tb_variant_apply(ctx, var);
      }
      if (want == FA_OK && be->id == FA_BACKEND_CUDA) fails += merge_paths_differ(ctx, dev, &P);
      free(o);
      free(o1);
      free(lse);
      free(kc);
      free(vc);
      prob_free(&P);
    }
  fa_context_destroy(ctx);
  if (fails) fail_msg("%d kv-cache checks failed on %s (%s)", fails, be->name, var->name);
}

static void test_backends(void **state) {
  (void)state;
  int ran = 0;
  for (int i = 0; i < tb_nbackends; ++i) {
    const tb_backend *be = &tb_backends[i];
    if (fa_backend_available(be->id, NULL, 0) != FA_OK) {
      print_message("%s: not available here, skipped\n", be->name);
      continue;
    }
    if (be->memory == FA_MEMORY_CUDA && !tdev_available()) continue;
    tb_variant vars[8];
    const int nv = be->variants(vars, 8);
    for (int v = 0; v < nv; ++v) {
      if (vars[v].absent || vars[v].unselected) {
        print_message("%s/%s: %s, skipped\n", be->name, vars[v].name,
                      vars[v].absent ? "not on this CPU or in this build" : "not in FA_TEST_CPU_ISAS");
        continue;
      }
      check_backend(be, &vars[v]);
      ++ran;
    }
  }
  assert_true(ran > 0);
}

/* fa_context_set_device_checks(ctx, 0): on cuda the call reads no length or
 * page back to the host; with good values it gives the same bits as a
 * checked call (the kernels' clamps change nothing inside the bounds); with
 * bad values (a length past the capacity, a negative one, page indices
 * outside the cache, rotary positions past the tables) it runs, writes only
 * inside the tensors (memcheck holds the GPU run to that) and leaves the
 * other sequences' results alone. On host memory the switch changes nothing:
 * bad values are refused as ever. */
static void test_device_checks_off(void **state) {
  (void)state;
  const kvcase *c = &cases[7]; /* rotary_neox_gqa: paged 16, append 2, B = 2 */
  for (int i = 0; i < tb_nbackends; ++i) {
    const tb_backend *be = &tb_backends[i];
    if (fa_backend_available(be->id, NULL, 0) != FA_OK || be->id == FA_BACKEND_AUTO) continue;
    const int dev = be->memory == FA_MEMORY_CUDA;
    if (dev && !tdev_available()) continue;
    kvprob P;
    prob_make(&P, c, FA_F32);
    const int64_t nrow = (int64_t)c->B * c->Hq * c->Lq, per_b = (int64_t)c->Hq * c->Lq;
    double *o1 = malloc((size_t)(nrow * c->Dv) * sizeof(double)), *o2 = malloc((size_t)(nrow * c->Dv) * sizeof(double));
    double *l1 = malloc((size_t)nrow * sizeof(double)), *l2 = malloc((size_t)nrow * sizeof(double));
    unsigned char *kc1 = malloc(P.kc_bytes), *vc1 = malloc(P.vc_bytes), *kc2 = malloc(P.kc_bytes),
                  *vc2 = malloc(P.vc_bytes);
    fa_context *checked, *trusting;
    assert_int_equal(fa_context_create(&checked), FA_OK);
    assert_int_equal(fa_context_create(&trusting), FA_OK);
    assert_int_equal(fa_context_set_device_checks(trusting, 0), FA_OK);
    assert_int_equal(run_call(checked, be->id, dev, &P, 3, o1, l1, kc1, vc1), FA_OK);
    if (run_call(trusting, be->id, dev, &P, 3, o2, l2, kc2, vc2) != FA_OK)
      fail_msg("%s, device checks off: %s", be->name, fa_context_last_error(trusting));
    if (memcmp(o1, o2, (size_t)(nrow * c->Dv) * sizeof(double)) || memcmp(l1, l2, (size_t)nrow * sizeof(double)) ||
        memcmp(kc1, kc2, P.kc_bytes) || memcmp(vc1, vc2, P.vc_bytes))
      fail_msg("%s: good values, device checks off: not the bits of the checked call", be->name);
    /* sequence 1 gets bad values; sequence 0 keeps its own */
    static const int32_t bad_len[] = {64, 1000, -5};
    for (size_t k = 0; k < sizeof bad_len / sizeof bad_len[0]; ++k) {
      const int32_t keep_len = P.seqlens[1], keep_page = P.bt[P.max_blocks];
      P.seqlens[1] = bad_len[k];
      P.bt[P.max_blocks] = k == 2 ? -3 : P.pages + 7;
      const fa_status st = run_call(trusting, be->id, dev, &P, 3, o2, l2, kc2, vc2);
      P.seqlens[1] = keep_len;
      P.bt[P.max_blocks] = keep_page;
      if (!dev) {
        if (st != FA_ERR_SEQLENS)
          fail_msg("%s (host memory): bad values gave %s, expected FA_ERR_SEQLENS", be->name, fa_status_name(st));
        continue;
      }
      if (st != FA_OK)
        fail_msg("cuda, device checks off, cache_seqlens[1] = %d: %s", bad_len[k], fa_context_last_error(trusting));
      if (memcmp(o1, o2, (size_t)(per_b * c->Dv) * sizeof(double)) || memcmp(l1, l2, (size_t)per_b * sizeof(double)))
        fail_msg("cuda, device checks off: sequence 0 changed when sequence 1's values went bad (%d)", bad_len[k]);
    }
    fa_context_destroy(checked);
    fa_context_destroy(trusting);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    free(kc1);
    free(vc1);
    free(kc2);
    free(vc2);
    prob_free(&P);
  }
}

/* ---- bad input ---------------------------------------------------------- */

static void expect_bad(fa_backend be, const kvprob *P, fa_kvcache *kv, const fa_options *opt, fa_tensor *o,
                       fa_status want, const char *needle) {
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  const int64_t qs[4] = {P->c->B, P->c->Hq, P->c->Lq, P->c->D};
  int64_t qst[4];
  strides_for(qs, 0, qst);
  fa_tensor tq = tens(P->q, P->dt, qs, qst, 0);
  const fa_status st = fa_forward_kvcache(ctx, be, &tq, kv, opt, o, NULL);
  if (st != want || !strstr(fa_context_last_error(ctx), needle))
    fail_msg("%s: got %s \"%s\", expected %s naming %s", fa_backend_name(be), fa_status_name(st),
             fa_context_last_error(ctx), fa_status_name(want), needle);
  if (memcmp(kv->k_cache.data, P->kc, P->kc_bytes) || memcmp(kv->v_cache.data, P->vc, P->vc_bytes))
    fail_msg("%s: the cache was written by a call that failed (%s)", fa_backend_name(be), needle);
  fa_context_destroy(ctx);
}

static void test_bad_input(void **state) {
  (void)state;
  const kvcase *c = &cases[3]; /* paged 16, append 3 */
  kvprob P;
  prob_make(&P, c, FA_F32);
  unsigned char *kc = malloc(P.kc_bytes), *vc = malloc(P.vc_bytes);
  const int64_t os[4] = {c->B, c->Hq, c->Lq, c->Dv}, kn[4] = {c->B, c->Hkv, c->Lnew, c->D},
                vn[4] = {c->B, c->Hkv, c->Lnew, c->Dv};
  int64_t ost[4], knst[4], vnst[4];
  strides_for(os, 0, ost);
  strides_for(kn, 0, knst);
  strides_for(vn, 0, vnst);
  float *ob = malloc((size_t)(os[0] * os[1] * os[2] * os[3]) * sizeof(float));
  fa_tensor to = tens(ob, FA_F32, os, ost, 0);
  static const fa_backend bes[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (size_t bi = 0; bi < 2; ++bi) {
    const fa_backend be = bes[bi];
    if (fa_backend_available(be, NULL, 0) != FA_OK) continue;
    memcpy(kc, P.kc, P.kc_bytes);
    memcpy(vc, P.vc, P.vc_bytes);
    int32_t bt[6], sl[2];
    memcpy(bt, P.bt, sizeof bt);
    memcpy(sl, P.seqlens, sizeof sl);
    fa_kvcache kv;
    memset(&kv, 0, sizeof kv);
    kv.k_cache = tens(kc, FA_F32, P.kc_shape, P.kc_stride, 0);
    kv.v_cache = tens(vc, FA_F32, P.vc_shape, P.vc_stride, 0);
    kv.cache_seqlens = sl;
    kv.block_table = bt;
    kv.max_blocks = P.max_blocks;
    kv.k_new = tens(P.knew, FA_F32, kn, knst, 0);
    kv.v_new = tens(P.vnew, FA_F32, vn, vnst, 0);
    fa_options opt;
    fa_options_init(&opt);
    /* block table entry out of range (a page the sequence uses) */
    bt[5] = (int32_t)P.pages;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SEQLENS, "block_table[1][2]");
    bt[5] = -1;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SEQLENS, "block_table[1][2]");
    bt[5] = P.bt[5];
    bt[1] = 9999; /* sequence 0 uses one page: its other entries are not read */
    /* past capacity with the append */
    sl[1] = 46;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SEQLENS, "cache_seqlens[1]");
    sl[1] = -1;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SEQLENS, "cache_seqlens[1]");
    sl[1] = P.seqlens[1];
    /* page size 0 */
    kv.k_cache.shape[2] = 0;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_BAD_SIZE, "k_cache->shape[2]");
    kv.k_cache.shape[2] = P.kc_shape[2];
    /* v_cache pages of another size */
    kv.v_cache.shape[2] = 8;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SHAPE, "v_cache->shape[2]");
    kv.v_cache.shape[2] = P.vc_shape[2];
    /* options the call does not take */
    uint8_t m = 1;
    opt.mask = fa_tensor_contiguous(&m, FA_BOOL, 1, 1, 1, 1);
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_OPTION, "opt->mask");
    fa_options_init(&opt);
    opt.dropout_p = 0.1;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_OPTION, "opt->dropout_p");
    fa_options_init(&opt);
    opt.k_offset = 4; /* positions come from cache_seqlens */
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_OPTION, "opt->k_offset");
    fa_options_init(&opt);
    /* k_new without v_new */
    kv.v_new.data = NULL;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_NULL_POINTER, "cache->v_new");
    kv.v_new.data = P.vnew;
    /* rotary tables too short, odd rotary_dim */
    float cs[4 * 8] = {0};
    kv.rotary_cos = cs;
    kv.rotary_sin = cs;
    kv.rotary_dim = 16;
    kv.rotary_len = 4;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_SEQLENS, "rotary_len");
    kv.rotary_dim = 3;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_OPTION, "rotary_dim");
    kv.rotary_cos = kv.rotary_sin = NULL;
    /* o overlapping the cache it appends to */
    fa_tensor alias = to;
    alias.data = kc;
    expect_bad(be, &P, &kv, &opt, &alias, FA_ERR_OVERLAP, "k_cache");
    /* heads */
    kv.k_cache.shape[1] = 3;
    kv.v_cache.shape[1] = 3;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_HEADS, "heads");
    kv.k_cache.shape[1] = kv.v_cache.shape[1] = c->Hkv;
    kv.num_splits = -1;
    expect_bad(be, &P, &kv, &opt, &to, FA_ERR_OPTION, "num_splits");
  }
  {
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    const int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D};
    int64_t qst[4];
    strides_for(qs, 0, qst);
    fa_tensor tq = tens(P.q, FA_F32, qs, qst, 0);
    assert_int_equal(fa_forward_kvcache(ctx, FA_BACKEND_REF, &tq, NULL, NULL, &to, NULL), FA_ERR_NULL_POINTER);
    assert_non_null(strstr(fa_context_last_error(ctx), "cache"));
    fa_context_destroy(ctx);
  }
  free(ob);
  free(kc);
  free(vc);
  prob_free(&P);
}

/* ---- found by the fuzzer (tests/fuzz/fuzz_api.c) ------------------------- */

/* A block table that holds only the entries of the pages the sequences use
 * (the header: only those are read): validation used to copy whole rows,
 * reading past it (ASan: heap-buffer-overflow in read_ints). */
static void test_block_table_used_entries_only(void **state) {
  (void)state;
  const kvcase *c = &cases[3]; /* paged 16, max_blocks 3, append 3 */
  kvprob P;
  prob_make(&P, c, FA_F32);
  static const fa_backend bes[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (size_t bi = 0; bi < 2; ++bi) {
    if (fa_backend_available(bes[bi], NULL, 0) != FA_OK) continue;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    const int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D}, os[4] = {c->B, c->Hq, c->Lq, c->Dv},
                  kn[4] = {c->B, c->Hkv, c->Lnew, c->D}, vn[4] = {c->B, c->Hkv, c->Lnew, c->Dv};
    int64_t qst[4], ost[4], knst[4], vnst[4];
    strides_for(qs, 0, qst);
    strides_for(os, 0, ost);
    strides_for(kn, 0, knst);
    strides_for(vn, 0, vnst);
    float *ob = malloc((size_t)(os[0] * os[1] * os[2] * os[3]) * sizeof(float));
    fa_tensor tq = tens(P.q, FA_F32, qs, qst, 0), to = tens(ob, FA_F32, os, ost, 0);
    /* sequence 0 uses 1 page of its row of 3, sequence 1 (10 + 3 keys) 1: 3 + 1 entries */
    int32_t sl[2] = {13, 10};
    int32_t *bt = malloc(4 * sizeof(int32_t));
    memcpy(bt, P.bt, 4 * sizeof(int32_t));
    fa_kvcache kv;
    memset(&kv, 0, sizeof kv);
    kv.k_cache = tens(P.kc, FA_F32, P.kc_shape, P.kc_stride, 0);
    kv.v_cache = tens(P.vc, FA_F32, P.vc_shape, P.vc_stride, 0);
    kv.cache_seqlens = sl;
    kv.block_table = bt;
    kv.max_blocks = P.max_blocks;
    kv.k_new = tens(P.knew, FA_F32, kn, knst, 0);
    kv.v_new = tens(P.vnew, FA_F32, vn, vnst, 0);
    const fa_status st = fa_forward_kvcache(ctx, bes[bi], &tq, &kv, NULL, &to, NULL);
    if (st != FA_OK) fail_msg("%s: %s", fa_backend_name(bes[bi]), fa_context_last_error(ctx));
    free(bt);
    free(ob);
    fa_context_destroy(ctx);
  }
  prob_free(&P);
}

/* The int and float arrays the backends read while they write: not under
 * an output (FA_ERR_OVERLAP, nothing written). cache_seqlens inside the
 * k_cache the call appends to was accepted: the append overwrote the
 * lengths the rest of the call then used. */
static void test_arrays_under_outputs(void **state) {
  (void)state;
  const kvcase *c = &cases[1]; /* contiguous, capacity 40, append 1, seqlens {0, 39} */
  kvprob P;
  prob_make(&P, c, FA_F32);
  static const fa_backend bes[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (size_t bi = 0; bi < 2; ++bi) {
    const fa_backend be = bes[bi];
    if (fa_backend_available(be, NULL, 0) != FA_OK) continue;
    const int64_t os[4] = {c->B, c->Hq, c->Lq, c->Dv}, kn[4] = {c->B, c->Hkv, c->Lnew, c->D},
                  vn[4] = {c->B, c->Hkv, c->Lnew, c->Dv};
    int64_t ost[4], knst[4], vnst[4];
    strides_for(os, 0, ost);
    strides_for(kn, 0, knst);
    strides_for(vn, 0, vnst);
    const size_t o_bytes = (size_t)(os[0] * os[1] * os[2] * os[3]) * sizeof(float);
    float *ob = malloc(o_bytes);
    memset(ob, 0, o_bytes);
    fa_tensor to = tens(ob, FA_F32, os, ost, 0);
    unsigned char *kc = malloc(P.kc_bytes), *kc0 = malloc(P.kc_bytes);
    memcpy(kc, P.kc, P.kc_bytes);
    /* the lengths in the first row of sequence 1's cache: the row the append does not touch ... */
    int32_t *sl_in_cache = (int32_t *)(void *)(kc + (size_t)P.kc_stride[0] * sizeof(float));
    sl_in_cache[0] = 0;
    sl_in_cache[1] = 39;
    memcpy(kc0, kc, P.kc_bytes);
    fa_kvcache kv;
    memset(&kv, 0, sizeof kv);
    kv.k_cache = tens(kc, FA_F32, P.kc_shape, P.kc_stride, 0);
    kv.v_cache = tens(P.vc, FA_F32, P.vc_shape, P.vc_stride, 0);
    kv.k_new = tens(P.knew, FA_F32, kn, knst, 0);
    kv.v_new = tens(P.vnew, FA_F32, vn, vnst, 0);
    kv.cache_seqlens = sl_in_cache;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    const int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D};
    int64_t qst[4];
    strides_for(qs, 0, qst);
    fa_tensor tq = tens(P.q, FA_F32, qs, qst, 0);
    fa_status st = fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to, NULL);
    if (st != FA_ERR_OVERLAP || !strstr(fa_context_last_error(ctx), "cache->cache_seqlens"))
      fail_msg("%s: cache_seqlens inside k_cache: %s \"%s\"", fa_backend_name(be), fa_status_name(st),
               fa_context_last_error(ctx));
    assert_memory_equal(kc, kc0, P.kc_bytes);
    /* ... and in o; rotary tables and ALiBi slopes in o */
    int32_t sl[2] = {0, 39};
    memcpy(ob, sl, sizeof sl);
    kv.cache_seqlens = (const int32_t *)ob;
    st = fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to, NULL);
    if (st != FA_ERR_OVERLAP || !strstr(fa_context_last_error(ctx), "cache->cache_seqlens"))
      fail_msg("%s: cache_seqlens inside o: %s", fa_backend_name(be), fa_status_name(st));
    kv.cache_seqlens = sl;
    memset(ob, 0, o_bytes); /* cos = sin = 0: fine values */
    kv.rotary_cos = ob;
    kv.rotary_sin = ob;
    kv.rotary_dim = 4;
    kv.rotary_len = 41;
    st = fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to, NULL);
    if (st != FA_ERR_OVERLAP || !strstr(fa_context_last_error(ctx), "cache->rotary_cos"))
      fail_msg("%s: rotary_cos inside o: %s", fa_backend_name(be), fa_status_name(st));
    kv.rotary_cos = kv.rotary_sin = NULL;
    fa_options opt;
    fa_options_init(&opt);
    opt.alibi_slopes = ob;
    st = fa_forward_kvcache(ctx, be, &tq, &kv, &opt, &to, NULL);
    if (st != FA_ERR_OVERLAP || !strstr(fa_context_last_error(ctx), "opt->alibi_slopes"))
      fail_msg("%s: alibi_slopes inside o: %s", fa_backend_name(be), fa_status_name(st));
    assert_memory_equal(kc, kc0, P.kc_bytes);
    /* the same arrays elsewhere: fine */
    st = fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to, NULL);
    if (st != FA_OK) fail_msg("%s: %s", fa_backend_name(be), fa_context_last_error(ctx));
    fa_context_destroy(ctx);
    free(ob);
    free(kc);
    free(kc0);
  }
  prob_free(&P);
}

/* Sizes from the keys there are, not the capacity: a cache whose rows
 * broadcast (stride 0) can describe 2^40 keys per sequence in a few bytes
 * (2^31 - 1 on cpu, its length limit);
 * ref allocated a score row of the capacity (FA_ERR_OUT_OF_MEMORY, or an
 * ASan abort) and cpu a tile of block_k = INT_MAX rows. num_splits = INT_MAX
 * took 4096 splits of a 40-key cache (seconds); it now gets the splits the
 * tiles allow, with the bits of num_splits = 1 there. */
static void test_sizes_from_the_keys(void **state) {
  (void)state;
  const kvcase *c = &cases[0]; /* contiguous, no append, seqlens {5, 0, 37} of 40 */
  kvprob P;
  prob_make(&P, c, FA_F32);
  static const fa_backend bes[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (size_t bi = 0; bi < 2; ++bi) {
    const fa_backend be = bes[bi];
    if (fa_backend_available(be, NULL, 0) != FA_OK) continue;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    const int64_t qs[4] = {c->B, c->Hq, c->Lq, c->D}, os[4] = {c->B, c->Hq, c->Lq, c->Dv};
    int64_t qst[4], ost[4];
    strides_for(qs, 0, qst);
    strides_for(os, 0, ost);
    const size_t no = (size_t)(os[0] * os[1] * os[2] * os[3]);
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float));
    fa_tensor tq = tens(P.q, FA_F32, qs, qst, 0), to1 = tens(o1, FA_F32, os, ost, 0),
              to2 = tens(o2, FA_F32, os, ost, 0);
    fa_kvcache kv;
    memset(&kv, 0, sizeof kv);
    kv.k_cache = tens(P.kc, FA_F32, P.kc_shape, P.kc_stride, 0);
    kv.v_cache = tens(P.vc, FA_F32, P.vc_shape, P.vc_stride, 0);
    kv.cache_seqlens = P.seqlens;
    kv.num_splits = 1;
    assert_int_equal(fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to1, NULL), FA_OK);
    kv.num_splits = INT32_MAX;
    assert_int_equal(fa_forward_kvcache(ctx, be, &tq, &kv, NULL, &to2, NULL), FA_OK);
    assert_memory_equal(o1, o2, no * sizeof(float));
    /* 2^40 (cpu: 2^31 - 1) rows of stride 0, tiles of block_k = INT_MAX */
    kv.num_splits = 0;
    kv.k_cache.shape[2] = kv.v_cache.shape[2] =
        be == FA_BACKEND_REF ? (int64_t)1 << 40 : INT32_MAX; /* cpu: <= 2^31 - 1 */
    kv.k_cache.stride[2] = kv.v_cache.stride[2] = 0;
    fa_options opt;
    fa_options_init(&opt);
    opt.block_k = INT32_MAX;
    const fa_status st = fa_forward_kvcache(ctx, be, &tq, &kv, &opt, &to2, NULL);
    if (st != FA_OK) fail_msg("%s: capacity 2^40: %s", fa_backend_name(be), fa_context_last_error(ctx));
    free(o1);
    free(o2);
    fa_context_destroy(ctx);
  }
  prob_free(&P);
}

/* ---- fa_merge_states on cuda -------------------------------------------- */

/* n parts of random (o, lse) with some rows -inf in every part (o = 0, lse =
 * -inf) or in some: the device merge equals the host merge (ref) within the
 * output's rounding, every dtype of o, f32 and f64 lse; with few parts (their
 * descriptors in the kernel's parameters) and with more than the kernel
 * takes that way (a device copy of them). */
static void test_merge_cuda(void **state) {
  (void)state;
  if (fa_backend_available(FA_BACKEND_CUDA, NULL, 0) != FA_OK || !tdev_available()) return;
  enum { NPMAX = 40, B = 2, H = 3, L = 4, DV = 24 };
  static const int nps[] = {5, NPMAX};
  const int64_t rows = B * H * L;
  trng r = {0x3e49e};
  static const fa_dtype odts[] = {FA_F32, FA_F16, FA_BF16, FA_F64};
  for (size_t di = 0; di < 8; ++di)
    for (int lse64 = 0; lse64 < 2; ++lse64) {
      const int NP = nps[di / 4];
      const fa_dtype odt = odts[di % 4], ldt = lse64 ? FA_F64 : FA_F32;
      const size_t oes = fa_dtype_size(odt), les = fa_dtype_size(ldt);
      unsigned char *ho[NPMAX], *hl[NPMAX];
      void *dop[NPMAX], *dlp[NPMAX];
      fa_tensor hto[NPMAX], htl[NPMAX], dto[NPMAX], dtl[NPMAX];
      for (int k = 0; k < NP; ++k) {
        ho[k] = malloc((size_t)(rows * DV) * oes);
        hl[k] = malloc((size_t)rows * les);
        for (int64_t i = 0; i < rows; ++i) {
          const int none = i % 7 == 3 || (i % 5 == 1 && k != 2);
          fa__elem_set(hl[k], ldt, i, none ? -INFINITY : 3.0 * trng_normal(&r));
          for (int e = 0; e < DV; ++e) fa__elem_set(ho[k], odt, i * DV + e, none ? 0.0 : trng_normal(&r));
        }
        hto[k] = fa_tensor_contiguous(ho[k], odt, B, H, L, DV);
        htl[k] = fa_tensor_contiguous(hl[k], ldt, B, H, L, 1);
        dop[k] = put(1, ho[k], (size_t)(rows * DV) * oes);
        dlp[k] = put(1, hl[k], (size_t)rows * les);
        dto[k] = hto[k];
        dto[k].data = dop[k];
        dto[k].memory = FA_MEMORY_CUDA;
        dtl[k] = htl[k];
        dtl[k].data = dlp[k];
        dtl[k].memory = FA_MEMORY_CUDA;
      }
      double *ro = malloc((size_t)(rows * DV) * sizeof(double)), *rl = malloc((size_t)rows * sizeof(double));
      fa_tensor tro = fa_tensor_contiguous(ro, FA_F64, B, H, L, DV), trl = fa_tensor_contiguous(rl, FA_F64, B, H, L, 1);
      fa_context *ctx;
      assert_int_equal(fa_context_create(&ctx), FA_OK);
      assert_int_equal(fa_merge_states(ctx, FA_BACKEND_REF, NP, hto, htl, &tro, &trl), FA_OK);
      void *dout = put(1, ho[0], (size_t)(rows * DV) * oes), *dlse = put(1, hl[0], (size_t)rows * les);
      fa_tensor tdo = fa_tensor_contiguous(dout, odt, B, H, L, DV), tdl = fa_tensor_contiguous(dlse, ldt, B, H, L, 1);
      tdo.memory = tdl.memory = FA_MEMORY_CUDA;
      const fa_status st = fa_merge_states(ctx, FA_BACKEND_CUDA, NP, dto, dtl, &tdo, &tdl);
      if (st != FA_OK) fail_msg("cuda merge of %d: %s: %s", NP, fa_status_name(st), fa_context_last_error(ctx));
      unsigned char *go = malloc((size_t)(rows * DV) * oes), *gl = malloc((size_t)rows * les);
      get(1, go, dout, (size_t)(rows * DV) * oes);
      get(1, gl, dlse, (size_t)rows * les);
      const double tol = odt == FA_F64 ? 1e-12 : odt == FA_F32 ? 1e-6 : odt == FA_F16 ? 2e-3 : 1e-2;
      for (int64_t i = 0; i < rows; ++i) {
        const double lg = fa__elem_get(gl, ldt, i), lr = rl[i];
        if (!(lg == lr || fabs(lg - lr) <= 1e-6 * (1 + fabs(lr))))
          fail_msg("cuda merge of %d %s/%s row %lld: lse %.9g, host %.9g", NP, fa_dtype_name(odt), fa_dtype_name(ldt),
                   (long long)i, lg, lr);
        for (int e = 0; e < DV; ++e) {
          const double og = fa__elem_get(go, odt, i * DV + e), orf = ro[i * DV + e];
          if (!(fabs(og - orf) <= tol * (1 + fabs(orf))))
            fail_msg("cuda merge of %d %s/%s row %lld col %d: o %.9g, host %.9g", NP, fa_dtype_name(odt),
                     fa_dtype_name(ldt), (long long)i, e, og, orf);
        }
      }
      /* host tensors on cuda: refused, naming the memory */
      assert_int_equal(fa_merge_states(ctx, FA_BACKEND_CUDA, NP, hto, htl, &tro, &trl), FA_ERR_MEMORY_SPACE);
      fa_context_destroy(ctx);
      for (int k = 0; k < NP; ++k) {
        free(ho[k]);
        free(hl[k]);
        tdev_free(dop[k]);
        tdev_free(dlp[k]);
      }
      tdev_free(dout);
      tdev_free(dlse);
      free(go);
      free(gl);
      free(ro);
      free(rl);
    }
}

/* docs/semantics.md's rounding table for the cpu decode pass: f32 on every
 * ISA but avx512bf16 with a bf16 cache and more than 8 query rows a kv head
 * (group x Lq_new), whose pair kernels (vdpbf16ps) round q and P to bf16.
 * So f16 calls on avx512bf16 and amx, bf16 calls on amx (which keeps
 * avx512's decode kernels) and bf16 calls of up to 8 rows on avx512bf16
 * give the bits of avx512 for every case, with a split merge; the other
 * bf16 calls on avx512bf16 differ (the pair kernels ran) by what the
 * roundings allow: P rounded moves O by at most
 * 2^-9 max|v|, O's own rounding to bf16 by 2^-8 |o|, and the products of a
 * bf16 q are exact, so LSE moves by f32 summation alone; a rotated q is
 * rounded too, which moves each score by up to 2^-9 of its terms' sum. */
static void test_cpu_decode_pass_rounding_by_isa(void **state) {
  (void)state;
  if (fa_backend_available(FA_BACKEND_CPU, NULL, 0) != FA_OK || !fa_cpu_isa_supported(FA_ISA_AVX512BF16)) skip();
  static const fa_cpu_isa others[] = {FA_ISA_AVX512BF16, FA_ISA_AMX};
  static const fa_dtype dts[] = {FA_BF16, FA_F16};
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  int compared = 0, differed = 0;
  for (int ci = 0; ci < NCASES; ++ci)
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; ++di) {
      const kvcase *c = &cases[ci];
      kvprob P;
      prob_make(&P, c, dts[di]);
      const int64_t nrow = (int64_t)c->B * c->Hq * c->Lq;
      const size_t ob = (size_t)(nrow * c->Dv) * sizeof(double), lb = (size_t)nrow * sizeof(double);
      double *o0 = malloc(ob), *l0 = malloc(lb), *o = malloc(ob), *l = malloc(lb);
      unsigned char *kc = malloc(P.kc_bytes), *vc = malloc(P.vc_bytes);
      assert_int_equal(fa_context_set_cpu_isa(ctx, FA_ISA_AVX512), FA_OK);
      assert_int_equal(run_call(ctx, FA_BACKEND_CPU, 0, &P, 3, o0, l0, kc, vc), FA_OK);
      double vmax = 0; /* over the cache after the call: appended rows included */
      for (int64_t e = 0; e < (int64_t)(P.vc_bytes / es(dts[di])); ++e)
        vmax = fmax(vmax, fabs(fa__elem_get(vc, dts[di], e)));
      for (size_t ii = 0; ii < sizeof others / sizeof others[0]; ++ii) {
        if (!fa_cpu_isa_supported(others[ii])) continue;
        assert_int_equal(fa_context_set_cpu_isa(ctx, others[ii]), FA_OK);
        assert_int_equal(run_call(ctx, FA_BACKEND_CPU, 0, &P, 3, o, l, kc, vc), FA_OK);
        const int same = memcmp(o, o0, ob) == 0 && memcmp(l, l0, lb) == 0;
        const double eo = err_of(o, o0, nrow * c->Dv), el = err_of(l, l0, nrow);
        ++compared;
        const int rows = c->Hq / c->Hkv * c->Lq;
        if (others[ii] != FA_ISA_AVX512BF16 || dts[di] != FA_BF16 || rows <= 8) {
          if (!same)
            fail_msg(
                "%s %s (%d rows a kv head): the decode pass on %s differs from avx512's (O err %.3g, LSE err "
                "%.3g)",
                c->name, fa_dtype_name(dts[di]), rows, fa_cpu_isa_name(others[ii]), eo, el);
          continue;
        }
        differed += !same;
        /* err_of is relative to max(1, max |reference|), so the absolute bounds serve */
        const double tol_o = c->rot_dim ? 0x1p-5 : (0x1p-9 + 0x1p-8) * vmax + 1e-6, tol_l = c->rot_dim ? 0x1p-7 : 1e-5;
        if (!(eo <= tol_o) || !(el <= tol_l))
          fail_msg("%s bf16: the decode pass on avx512bf16 is %.3g (O) / %.3g (LSE) from avx512's, over %.3g / %.3g",
                   c->name, eo, el, tol_o, tol_l);
      }
      free(o0);
      free(l0);
      free(o);
      free(l);
      free(kc);
      free(vc);
      prob_free(&P);
    }
  fa_context_destroy(ctx);
  assert_true(compared >= NCASES * 2);
  if (!differed) fail_msg("avx512bf16 gave avx512's bits on every bf16 case of > 8 rows: did its pair kernels run?");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_backends),
                                     cmocka_unit_test(test_cpu_decode_pass_rounding_by_isa),
                                     cmocka_unit_test(test_bad_input),
                                     cmocka_unit_test(test_merge_cuda),
                                     cmocka_unit_test(test_block_table_used_entries_only),
                                     cmocka_unit_test(test_arrays_under_outputs),
                                     cmocka_unit_test(test_sizes_from_the_keys),
                                     cmocka_unit_test(test_device_checks_off)};
  return cmocka_run_group_tests_name("kvcache", tests, NULL, NULL);
}
