/* The forward pass: for each query tile, K/V tiles stream past while the
 * score tile lives in L1 and is thrown away after the online-softmax
 * update; O and LSE are written once per query tile.
 *
 * The products run "transposed" so that the tile that stays (Q) is the
 * packed panel and the tiles that stream (K, V) are read in place:
 *   S^T[j][i] = sum_d K[j][d] * (scale Q)^T[d][i]   (K broadcast, Q^T packed)
 *   O^T[e][i] += sum_j V[j][e] * P^T[j][i]          (V broadcast, P^T the score tile)
 * The softmax then runs down the columns of S^T, i.e. across query rows,
 * one vector of rows at a time: no horizontal reductions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_io.h"
#include "cpu_parallel.h"
#include "cpu_passes.h"
#include "cpu_plan.h"
#include "cpu_score.h"
#include "cpu_scratch.h"
#include "rules/layout.h"

typedef struct fwd_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  int bq, bk, np; /* np: bq padded to the panel width */
  int D, Dv;
  int elementwise;       /* softcap, ALiBi, bias or mask on every tile */
  int heavy_last;        /* later query tiles see more keys (causal-like) */
  const int64_t *prefix; /* items before sequence b */
  const int64_t *nq;     /* query tiles of sequence b */
} fwd_ctx;

typedef struct fwd_scratch {
  float *qt, *st, *ot; /* Q^T panel (D x np), S^T/P^T (bk x np), O^T (Dv x np) */
  float *m, *l, *f;    /* row statistics and rescale factors (np) */
  float *ref;          /* per-row reference score (with a bias; np) */
  float *kbuf, *vbuf;  /* K, V tiles converted to f32 (f16/bf16 inputs) */
  float *row;          /* one row of max(D, Dv) */
  uint8_t *keep;       /* dropout keep-mask of a tile (np x bk) */
} fwd_scratch;

static void fwd_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const fwd_ctx *c = ctx;
  fwd_scratch *s = scratch;
  const size_t np = (size_t)c->np, bk = (size_t)c->bk;
  const int conv = c->p->dtype != FA_F32;
  s->qt = fa__cpu_take_f(a, (size_t)c->D * np);
  s->st = fa__cpu_take_f(a, bk * np);
  s->ot = fa__cpu_take_f(a, (size_t)c->Dv * np);
  s->m = fa__cpu_take_f(a, np);
  s->l = fa__cpu_take_f(a, np);
  s->f = fa__cpu_take_f(a, np);
  s->ref = fa__cpu_take_f(a, np);
  s->kbuf = conv ? fa__cpu_take_f(a, bk * (size_t)c->D) : NULL;
  s->vbuf = conv ? fa__cpu_take_f(a, bk * (size_t)c->Dv) : NULL;
  s->row = fa__cpu_take_f(a, (size_t)(c->D > c->Dv ? c->D : c->Dv));
  s->keep = c->p->dropout_p > 0 ? (uint8_t *)fa__cpu_take(a, np * bk) : NULL;
}

static void write_lse(const fa__problem *p, int64_t bidx, int64_t h, int64_t row, float v) {
  if (!p->lse.data) return;
  float *x = (float *)p->lse.data + bidx * p->lse.stride[0] + h * p->lse.stride[1] + row * p->lse.stride[2];
  *x = v;
}

/* One query tile: rows i0 .. i0+br-1 of sequence b, query head h. */
static void fwd_tile(const fwd_ctx *c, fwd_scratch *s, int64_t b, int64_t h, int64_t r) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const int D = c->D, Dv = c->Dv;
  const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  const fa__band bd = fa__seq_band(&sq, p->window_left, p->window_right, p->bottom_right);
  const int64_t i0 = r * c->bq, hk = h / p->group;
  const int br = (int)(sq.lq - i0 < c->bq ? sq.lq - i0 : c->bq);
  const int np = fa__cpu_pad(br);

  const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq.bidx, h, sq.q_row0 + i0);
  fa__cpu_pack_t(kt, s->qt, np, np, &qm, br, D, (float)p->scale, s->row);
  for (int i = 0; i < np; ++i) {
    s->m[i] = -INFINITY;
    s->l[i] = 0.0f;
  }

  int64_t jlo, jhi;
  fa__band_cols(&bd, i0, i0 + br, &jlo, &jhi);
  fa__cpu_tile tile = {p, &bd, b, h, i0, 0, br, 0, NULL, NULL};
  if (p->bias.data && jlo < jhi) {
    /* Scores are kept relative to a per-row reference (the row's first bias
     * in the band): a large bias then cancels exactly (row_off) instead of
     * rounding every score, and LSE adds the reference back. */
    for (int ii = 0; ii < br; ++ii) {
      const fa_tensor *x = &p->bias;
      const float v = fa__cpu_get((const char *)x->data + (ptrdiff_t)(b * x->stride[0] + h * x->stride[1] +
                                                                      (i0 + ii) * x->stride[2] + jlo * x->stride[3]) *
                                                              (ptrdiff_t)fa_dtype_size(x->dtype),
                                  x->dtype);
      s->ref[ii] = isfinite(v) ? v : 0.0f;
    }
    tile.row_off = s->ref;
  }
  int first = 1;
  for (int64_t j0 = jlo; j0 < jhi; j0 += c->bk) {
    const int bc = (int)(jhi - j0 < c->bk ? jhi - j0 : c->bk);
    const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq.bidx, hk, sq.k_row0 + j0);
    const fa__cpu_aop ka = fa__cpu_operand(kt, &km, bc, D, s->kbuf);
    fa__cpu_gemm(kt, bc, np, D, ka.a, ka.rs, ka.cs, s->qt, np, s->st, np, 0);

    const int full = fa__band_tile_full(&bd, i0, i0 + br, j0, j0 + bc);
    if (c->elementwise || !full) {
      tile.j0 = j0;
      tile.bc = bc;
      fa__cpu_score_tile(kt, &tile, s->st, 1, np, NULL, full);
    }
    const int moved = kt->softmax(s->st, np, bc, np, s->m, s->l, s->f);
    if (s->keep) { /* l counts P before dropout; only O sees the dropped P */
      tile.j0 = j0;
      tile.bc = bc;
      fa__cpu_dropout_mask(&tile, s->keep, 1, np);
      for (int jj = 0; jj < bc; ++jj)
        for (int ii = 0; ii < br; ++ii)
          if (!s->keep[jj * np + ii]) s->st[jj * np + ii] = 0.0f;
    }
    if (!first && moved) kt->scale_cols(s->ot, np, Dv, np, s->f);

    const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq.bidx, hk, sq.k_row0 + j0);
    const fa__cpu_aop va = fa__cpu_operand(kt, &vm, bc, Dv, s->vbuf);
    fa__cpu_gemm(kt, Dv, np, bc, va.a, va.cs, va.rs, s->st, np, s->ot, np, !first);
    first = 0;
  }

  const fa__cpu_mat om = fa__cpu_mat_of(&p->o, sq.bidx, h, sq.q_row0 + i0);
  const float dscale = (float)p->dropout_scale;
  for (int ii = 0; ii < br; ++ii) {
    const float l = first ? 0.0f : s->l[ii];
    if (l == 0.0f) { /* nothing visible: O = 0, LSE = -inf (DESIGN.md) */
      memset(s->row, 0, (size_t)Dv * sizeof(float));
      write_lse(p, sq.bidx, h, sq.q_row0 + i0 + ii, -INFINITY);
    } else {
      const float w = dscale / l;
      for (int e = 0; e < Dv; ++e) s->row[e] = s->ot[e * np + ii] * w;
      const double ref = tile.row_off ? (double)s->ref[ii] : 0.0;
      write_lse(p, sq.bidx, h, sq.q_row0 + i0 + ii, (float)(ref + (double)s->m[ii] + log((double)l)));
    }
    fa__cpu_store_row(&om, ii, s->row, Dv);
  }
}

/* Item it: query tile rr of head h of the sequence holding it, the
 * heaviest tiles first when later ones see more keys. */
static void fwd_item(const void *ctx, void *scratch, int64_t it) {
  const fwd_ctx *c = ctx;
  const int64_t b = fa__cpu_seq_of(c->prefix, c->p->B, it), local = it - c->prefix[b];
  const int64_t h = local / c->nq[b], rr = local % c->nq[b];
  fwd_tile(c, scratch, b, h, c->heavy_last ? c->nq[b] - 1 - rr : rr);
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
  c.elementwise = fa__cpu_score_elementwise(p);
  c.heavy_last = p->window_right >= 0;

  int64_t *prefix = (int64_t *)malloc((size_t)(2 * p->B + 1) * sizeof(int64_t));
  float *zeros = (float *)calloc((size_t)p->Dv, sizeof(float));
  if (!prefix || !zeros) {
    free(prefix);
    free(zeros);
    fa__err_set(err, "cpu forward: cannot allocate %lld bytes of bookkeeping", (long long)(2 * p->B + 1) * 8);
    return FA_ERR_OUT_OF_MEMORY;
  }
  int64_t *nq = prefix + p->B + 1;
  prefix[0] = 0;
  for (int64_t b = 0; b < p->B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    nq[b] = (sq.lq + c.bq - 1) / c.bq;
    prefix[b + 1] = prefix[b] + p->Hq * nq[b];
  }
  c.prefix = prefix;
  c.nq = nq;
  const int64_t items = prefix[p->B];

  fwd_padding(p, zeros);
  free(zeros);

  const fa_status st = fa__cpu_for_items(p, items, &c, sizeof(fwd_scratch), fwd_carve, fwd_item, err, "cpu forward");
  free(prefix);
  return st;
}
