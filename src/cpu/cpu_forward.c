/* The forward pass: for each query tile, K/V tiles stream past while the
 * score tile lives in L1 and is thrown away after the online-softmax
 * update; O and LSE are written once per query tile. When a head's K/V
 * outgrow L3, a few query tiles of the head take each K/V chunk in turn
 * (fwd_item, fa__cpu_forward_group) so that it is fetched once for all.
 *
 * The products run "transposed" so that the tile that stays (Q) is the
 * packed panel and the tiles that stream (K, V) are read in place:
 *   S^T[j][i] = sum_d K[j][d] * (scale Q)^T[d][i]   (K broadcast, Q^T packed)
 *   O^T[e][i] += sum_j V[j][e] * P^T[j][i]          (V broadcast, P^T the score tile)
 * The softmax then runs down the columns of S^T, i.e. across query rows,
 * one vector of rows at a time: no horizontal reductions.
 *
 * bf16 inputs on a table with bf16 kernels (cpu_bf16.h) run both products
 * on pairs: Q^T packed as pairs along d (unscaled; the scale is applied to
 * the f32 scores, or folded into the softmax's exponent when nothing else
 * acts on them), K read in place, P^T rounded to bf16 pairs along keys,
 * V packed as pairs along keys per tile. The softmax, masks, dropout and
 * the row sums l stay in f32 (l sums the unrounded P, as the GPU kernels
 * do: docs/semantics.md); without dropout it runs in log2 units
 * (kt->softmax_pairs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_gemm.h"
#include "cpu_io.h"
#include "cpu_parallel.h"
#include "cpu_passes.h"
#include "cpu_plan.h"
#include "cpu_score.h"
#include "cpu_scratch.h"
#include "rules/layout.h"

/* At most this many query tiles share one walk over K/V (fwd_item). */
#define FWD_GROUP_MAX 16

typedef struct fwd_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  int bq, bk, np; /* np: bq padded to the panel width */
  int group;      /* query tiles of one head per item (fa__cpu_forward_group) */
  int64_t chunk;  /* keys of one K/V chunk the group's tiles take in turn */
  int D, Dv;
  int bf16;              /* products on kt->gemm_bf16 (fa__cpu_bf16_products) */
  int pairs;             /* bf16 without dropout: kt->softmax_pairs, m in log2 units */
  float alpha;           /* the factor of the score product (scale, or 1 when c holds it) */
  float c;               /* pairs: the score product's output times c is in log2 units */
  int elementwise;       /* softcap, ALiBi, bias or mask on every tile */
  int heavy_last;        /* later query tiles see more keys (causal-like) */
  const int64_t *prefix; /* items before sequence b */
  const int64_t *nq;     /* query tiles of sequence b */
  const int64_t *ng;     /* items (groups of query tiles) per head of sequence b */
} fwd_ctx;

/* What one query tile carries from key tile to key tile. */
typedef struct fwd_qtile {
  float *qt, *ot;   /* Q^T panel (D x np), O^T (Dv x np) */
  uint32_t *qp;     /* bf16 products: Q^T pair panel (ceil(D/2) x np), instead of qt */
  float *m, *l, *f; /* row statistics and rescale factors (np) */
  float *ref;       /* per-row reference score (with a bias; np) */
  int64_t i0, jlo, jhi, jnext;
  int br, np, first;
  fa__cpu_tile tile;
} fwd_qtile;

typedef struct fwd_scratch {
  fwd_qtile q[FWD_GROUP_MAX];
  float *st;          /* S^T/P^T (bk x np), shared by the group's tiles */
  float *kbuf, *vbuf; /* K, V tiles converted to f32 (f16/bf16 inputs) */
  uint16_t *kb16;     /* bf16 products: K tile copied when not usable in place (bk x (D + 1)) */
  uint32_t *vp, *pp;  /* bf16 products: V tile and P^T as pairs along keys (ceil(bk/2) x Dv, x np) */
  fa__cpu_pairs_a va; /* vp as the A operand of P V */
  const char *vp_of;  /* the V tile vp holds (its first element; bc keys of it), NULL: none */
  int vp_bc;
  float *cmax;   /* column maxima of S^T from the product (np) */
  float *row;    /* one row of max(D, Dv) */
  uint8_t *keep; /* dropout keep-mask of a tile (np x bk) */
  fa__seq sq;    /* the item's sequence and band */
  fa__band bd;
} fwd_scratch;

static void fwd_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const fwd_ctx *c = ctx;
  fwd_scratch *s = scratch;
  const size_t np = (size_t)c->np, bk = (size_t)c->bk;
  const int conv = c->p->dtype != FA_F32 && !c->bf16;
  const size_t pairs_d = (size_t)(c->D + 1) / 2, pairs_k = (bk + 1) / 2;
  for (int g = 0; g < c->group; ++g) {
    s->q[g].qt = c->bf16 ? NULL : fa__cpu_take_f(a, (size_t)c->D * np);
    s->q[g].qp = c->bf16 ? (uint32_t *)fa__cpu_take(a, pairs_d * np * sizeof(uint32_t)) : NULL;
  }
  s->st = fa__cpu_take_f(a, bk * np);
  for (int g = 0; g < c->group; ++g) {
    fwd_qtile *t = &s->q[g];
    t->ot = fa__cpu_take_f(a, (size_t)c->Dv * np);
    t->m = fa__cpu_take_f(a, np);
    t->l = fa__cpu_take_f(a, np);
    t->f = fa__cpu_take_f(a, np);
    t->ref = fa__cpu_take_f(a, np);
  }
  s->kbuf = conv ? fa__cpu_take_f(a, bk * (size_t)c->D) : NULL;
  s->vbuf = conv ? fa__cpu_take_f(a, bk * (size_t)c->Dv) : NULL;
  s->kb16 = c->bf16 ? (uint16_t *)fa__cpu_take(a, bk * (size_t)(c->D + 1) * sizeof(uint16_t)) : NULL;
  /* room for either layout of fa__cpu_pack_pairs_a */
  const size_t ld_t = (size_t)fa__cpu_pairs_ld_t(c->bk);
  s->vp = c->bf16 ? (uint32_t *)fa__cpu_take(a, ld_t * (size_t)c->Dv * sizeof(uint32_t)) : NULL;
  s->pp = c->bf16 ? (uint32_t *)fa__cpu_take(a, pairs_k * np * sizeof(uint32_t)) : NULL;
  s->vp_of = NULL;
  s->vp_bc = 0;
  s->cmax = c->pairs ? fa__cpu_take_f(a, np) : NULL;
  s->row = fa__cpu_take_f(a, (size_t)(c->D > c->Dv ? c->D : c->Dv));
  s->keep = c->p->dropout_p > 0 ? (uint8_t *)fa__cpu_take(a, np * bk) : NULL;
}

static void write_lse(const fa__problem *p, int64_t bidx, int64_t h, int64_t row, float v) {
  if (!p->lse.data) return;
  float *x = (float *)p->lse.data + bidx * p->lse.stride[0] + h * p->lse.stride[1] + row * p->lse.stride[2];
  *x = v;
}

/* Query tile r (rows i0 .. i0+br-1) of sequence b, query head h: packs
 * scale Q^T, resets the statistics and finds the tile's key range. */
static void fwd_tile_begin(const fwd_ctx *c, fwd_scratch *s, fwd_qtile *t, int64_t b, int64_t h, int64_t r) {
  const fa__problem *p = c->p;
  const fa__seq *sq = &s->sq;
  const int D = c->D;
  const int64_t i0 = r * c->bq;
  const int br = (int)(sq->lq - i0 < c->bq ? sq->lq - i0 : c->bq);
  const int np = fa__cpu_pad(br);
  t->i0 = i0;
  t->br = br;
  t->np = np;
  t->first = 1;

  const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq->bidx, h, sq->q_row0 + i0);
  if (c->bf16)
    fa__cpu_pack_pairs_t(t->qp, np, np, &qm, br, D);
  else
    fa__cpu_pack_t(c->kt, t->qt, np, np, &qm, br, D, (float)p->scale, s->row);
  for (int i = 0; i < np; ++i) {
    t->m[i] = -INFINITY;
    t->l[i] = 0.0f;
  }

  fa__band_cols(&s->bd, i0, i0 + br, &t->jlo, &t->jhi);
  t->jnext = t->jlo;
  const fa__cpu_tile tile = {p, &s->bd, b, h, i0, 0, br, 0, NULL, NULL};
  t->tile = tile;
  if (p->bias.data && t->jlo < t->jhi) {
    /* Scores are kept relative to a per-row reference (the row's first bias
     * in the band): a large bias then cancels exactly (row_off) instead of
     * rounding every score, and LSE adds the reference back. */
    for (int ii = 0; ii < br; ++ii) {
      const fa_tensor *x = &p->bias;
      const float v = fa__cpu_get(
          (const char *)x->data +
              (ptrdiff_t)(b * x->stride[0] + h * x->stride[1] + (i0 + ii) * x->stride[2] + t->jlo * x->stride[3]) *
                  (ptrdiff_t)fa_dtype_size(x->dtype),
          x->dtype);
      t->ref[ii] = isfinite(v) ? v : 0.0f;
    }
    t->tile.row_off = t->ref;
  }
}

/* The tile's next key tile (keys jnext .. jnext+bc-1): scores, online
 * softmax, O^T update. */
static void fwd_tile_step(const fwd_ctx *c, fwd_scratch *s, fwd_qtile *t) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const fa__seq *sq = &s->sq;
  const int D = c->D, Dv = c->Dv, np = t->np, br = t->br;
  const int64_t j0 = t->jnext, hk = t->tile.h / p->group;
  const int bc = (int)(t->jhi - j0 < c->bk ? t->jhi - j0 : c->bk);
  const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq->bidx, hk, sq->k_row0 + j0);
  const int full = fa__band_tile_full(&s->bd, t->i0, t->i0 + br, j0, j0 + bc);
  /* nothing to change S after the product: it gives the softmax its row maxima */
  const int cmax = c->pairs && !c->elementwise && full;
  if (c->bf16) {
    const fa__cpu_bf16_aop ka = fa__cpu_bf16_operand(&km, bc, D, s->kb16);
    if (cmax)
      for (int i = 0; i < np; ++i) s->cmax[i] = -INFINITY;
    fa__cpu_gemm_bf16_max(kt, bc, np, (D + 1) / 2, ka.a, ka.rs, 2, t->qp, np, c->alpha, s->st, np, 0,
                          cmax ? s->cmax : NULL);
  } else {
    const fa__cpu_aop ka = fa__cpu_operand(kt, &km, bc, D, s->kbuf);
    fa__cpu_gemm(kt, bc, np, D, ka.a, ka.rs, ka.cs, t->qt, np, s->st, np, 0);
  }

  if (c->elementwise || !full) {
    t->tile.j0 = j0;
    t->tile.bc = bc;
    fa__cpu_score_tile(kt, &t->tile, s->st, 1, np, NULL, full);
  }
  /* bf16 without dropout: P goes straight to pair words; dropout needs
   * the f32 P first */
  const int pairs = c->pairs;
  const int moved = pairs
                        ? kt->softmax_pairs(s->st, np, bc, np, c->c, cmax ? s->cmax : NULL, t->m, t->l, t->f, s->pp, np)
                        : kt->softmax(s->st, np, bc, np, t->m, t->l, t->f);
  if (s->keep) { /* l counts P before dropout; only O sees the dropped P */
    t->tile.j0 = j0;
    t->tile.bc = bc;
    fa__cpu_dropout_mask(kt, &t->tile, s->keep, 1, np);
    for (int jj = 0; jj < bc; ++jj) { /* a select, not a branch: 1 - p of them are taken at random */
      float *st = s->st + jj * np;
      const uint8_t *k = s->keep + jj * np;
      for (int ii = 0; ii < br; ++ii) st[ii] = k[ii] ? st[ii] : 0.0f;
    }
  }
  if (!t->first && moved) kt->scale_cols(t->ot, np, Dv, np, t->f);

  const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq->bidx, hk, sq->k_row0 + j0);
  if (c->bf16) { /* O^T[e][i] += sum over key pairs of (V[j][e], V[j+1][e]) . (P[j][i], P[j+1][i]) */
    if (!pairs) kt->pair_pack_f32(s->pp, np, s->st, np, bc, np);
    if (vm.base != s->vp_of || bc != s->vp_bc) { /* the group's tiles take a key tile in turn: pack it once */
      s->va = fa__cpu_pack_pairs_a(kt, s->vp, c->bk, &vm, bc, Dv);
      s->vp_of = vm.base;
      s->vp_bc = bc;
    }
    fa__cpu_gemm_bf16(kt, Dv, np, (bc + 1) / 2, s->va.a, s->va.rsa, s->va.csa, s->pp, np, 1.0f, t->ot, np, !t->first);
  } else {
    const fa__cpu_aop va = fa__cpu_operand(kt, &vm, bc, Dv, s->vbuf);
    fa__cpu_gemm(kt, Dv, np, bc, va.a, va.cs, va.rs, s->st, np, t->ot, np, !t->first);
  }
  t->first = 0;
  t->jnext = j0 + bc;
}

/* Writes the tile's O rows and LSE. */
static void fwd_tile_end(const fwd_ctx *c, fwd_scratch *s, const fwd_qtile *t) {
  const fa__problem *p = c->p;
  const fa__seq *sq = &s->sq;
  const int Dv = c->Dv, np = t->np;
  const int64_t h = t->tile.h, i0 = t->i0;
  const fa__cpu_mat om = fa__cpu_mat_of(&p->o, sq->bidx, h, sq->q_row0 + i0);
  const float dscale = (float)p->dropout_scale;
  for (int ii = 0; ii < t->br; ++ii) {
    const float l = t->first ? 0.0f : t->l[ii];
    if (l == 0.0f) { /* nothing visible: O = 0, LSE = -inf (DESIGN.md) */
      memset(s->row, 0, (size_t)Dv * sizeof(float));
      write_lse(p, sq->bidx, h, sq->q_row0 + i0 + ii, -INFINITY);
    } else {
      const float w = dscale / l;
      for (int e = 0; e < Dv; ++e) s->row[e] = t->ot[e * np + ii] * w;
      const double ref = t->tile.row_off ? (double)t->ref[ii] : 0.0;
      const double m = c->pairs ? (double)t->m[ii] * 0.69314718055994530942 : (double)t->m[ii]; /* log2 units */
      write_lse(p, sq->bidx, h, sq->q_row0 + i0 + ii, (float)(ref + m + log((double)l)));
    }
    fa__cpu_store_row(&om, ii, s->row, Dv);
  }
}

/* Item it: group gg of up to `group` query tiles of head h of the sequence
 * holding it, the heaviest tiles first when later ones see more keys. With
 * one tile this is the plain flash loop. With several, the tiles take the
 * keys chunk by chunk in turn, so a chunk of K/V (sized for L2) is read
 * from memory once per group instead of once per tile; every tile still
 * sees its key tiles in the same order and boundaries as alone, so the
 * results are bit for bit those of group = 1. */
static void fwd_item(const void *ctx, void *scratch, int64_t it) {
  const fwd_ctx *c = ctx;
  fwd_scratch *s = scratch;
  const fa__problem *p = c->p;
  const int64_t b = fa__cpu_seq_of(c->prefix, p->B, it), local = it - c->prefix[b];
  const int64_t h = local / c->ng[b], gg = local % c->ng[b], nq = c->nq[b];
  s->sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  s->bd = fa__seq_band_at(&s->sq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
  const int hold = c->bf16 && c->kt->tiles_hold; /* amx: one tile configuration for the item */
  if (hold) c->kt->tiles_hold(1);
  int n = 0;
  for (int64_t rr = gg * c->group; rr < nq && n < c->group; ++rr, ++n)
    fwd_tile_begin(c, s, &s->q[n], b, h, c->heavy_last ? nq - 1 - rr : rr);
  if (n == 1) {
    fwd_qtile *t = &s->q[0];
    while (t->jnext < t->jhi) fwd_tile_step(c, s, t);
  } else {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int g = 0; g < n; ++g) {
      if (s->q[g].jlo < lo) lo = s->q[g].jlo;
      if (s->q[g].jhi > hi) hi = s->q[g].jhi;
    }
    for (int64_t c0 = lo; c0 < hi; c0 += c->chunk)
      for (int g = 0; g < n; ++g) {
        fwd_qtile *t = &s->q[g];
        while (t->jnext < t->jhi && t->jnext < c0 + c->chunk) fwd_tile_step(c, s, t);
      }
  }
  for (int g = 0; g < n; ++g) fwd_tile_end(c, s, &s->q[g]);
  if (hold) c->kt->tiles_hold(0);
}

/* Padded layout: rows past a sequence's length get O = 0, LSE = -inf. */
static void fwd_padding(const fa__problem *p, float *zeros) {
  if (p->varlen) return;
  for (int64_t b = 0; b < p->B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, NULL, NULL);
    for (int64_t h = 0; h < p->Hq; ++h) {
      const fa__cpu_mat om = fa__cpu_mat_of(&p->o, b, h, 0);
      for (int64_t i = sq.lq; i < p->Lq; ++i) {
        fa__cpu_store_row(&om, i, zeros, (int)p->Dv);
        write_lse(p, b, h, i, -INFINITY);
      }
    }
  }
}

fa_status fa__cpu_forward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err) {
  fa__cpu_blocks blk = fa__cpu_blocks_forward(kt, p->D, p->Dv, p->block_q, p->block_k);
  if (blk.bq > p->Lq) blk.bq = (int)p->Lq;
  if (blk.bk > p->Lk) blk.bk = (int)p->Lk;
  fwd_ctx c;
  c.p = p;
  c.kt = kt;
  c.bq = blk.bq;
  c.bk = blk.bk;
  c.np = fa__cpu_pad(blk.bq);
  c.D = (int)p->D;
  c.Dv = (int)p->Dv;
  c.bf16 = fa__cpu_bf16_products(p, kt);
  c.elementwise = fa__cpu_score_elementwise(p);
  c.pairs = c.bf16 && !(p->dropout_p > 0);
  c.alpha = (float)p->scale;
  c.c = 1.44269504088896341f; /* log2 e */
  const float folded = fa__cpu_bf16_log2_scale(p, kt);
  if (c.pairs && folded > 0.0f) {
    /* Nothing between the product and the softmax but masks (-inf at any
     * scale): the scale goes into the softmax's exponent, an FMA it does
     * anyway, instead of a multiply per score after the product (on AMX a
     * pass through a tile buffer, kernels_amx.c; the same f32 accuracy). */
    c.c = folded;
    c.alpha = 1.0f;
  }
  c.heavy_last = p->window_right >= 0;
  fa__cpu_forward_group(blk, p->D, p->Dv, p->Lk, fa_dtype_size(p->dtype), !c.bf16, &c.group, &c.chunk);
  if (c.bf16) {
    /* The bf16 P.V product needs V as pairs along keys, packed per key
     * tile: with a group of tiles taking each key tile in turn (chunk =
     * one tile) it is packed once for the group, and the K tile is
     * re-read from L1. Measured (D = 64, L = 4096, 2 threads): group 1
     * 52.2 ms, 2: 50.2, 4: 49.8-50.8, 8: 50.7. */
    if (c.group < 4) c.group = 4;
    c.chunk = c.bk;
  }
  if (c.group > FWD_GROUP_MAX) c.group = FWD_GROUP_MAX;
  { /* keep a few items per thread for the dynamic balance */
    const int64_t tiles = c.bq > 0 ? p->B * p->Hq * ((p->Lq + c.bq - 1) / c.bq) : 0;
    const int nt = fa__cpu_threads(p, tiles);
    while (c.group > 1 && tiles / c.group < 4 * (int64_t)nt) c.group /= 2;
  }
  fa__cpu_forward_group_override(c.bk, &c.group, &c.chunk);
  if (c.group > FWD_GROUP_MAX) c.group = FWD_GROUP_MAX;

  int64_t *prefix = (int64_t *)malloc((size_t)(3 * p->B + 1) * sizeof(int64_t));
  float *zeros = (float *)calloc((size_t)p->Dv, sizeof(float));
  if (!prefix || !zeros) {
    free(prefix);
    free(zeros);
    fa__err_set(err, "cpu forward: cannot allocate %lld bytes of bookkeeping", (long long)(3 * p->B + 1) * 8);
    return FA_ERR_OUT_OF_MEMORY;
  }
  int64_t *nq = prefix + p->B + 1, *ng = nq + p->B;
  prefix[0] = 0;
  for (int64_t b = 0; b < p->B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    nq[b] = (sq.lq + c.bq - 1) / c.bq;
    ng[b] = (nq[b] + c.group - 1) / c.group;
    prefix[b + 1] = prefix[b] + p->Hq * ng[b];
  }
  c.prefix = prefix;
  c.nq = nq;
  c.ng = ng;
  const int64_t items = prefix[p->B];

  fwd_padding(p, zeros);
  free(zeros);
  /* few rows, long keys: the memory-bound decode pass (which measures from
   * positions 0: a call with position offsets stays on the tiled pass) */
  if (p->q_offset == 0 && p->k_offset == 0 && fa__cpu_decode_fits(p)) {
    free(prefix);
    return fa__cpu_decode(p, kt, err);
  }

  const fa_status st = fa__cpu_for_items(p, items, &c, sizeof(fwd_scratch), fwd_carve, fwd_item, err, "cpu forward");
  free(prefix);
  return st;
}
