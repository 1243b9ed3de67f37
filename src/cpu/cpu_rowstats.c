/* The row-statistics pass of the backward (see cpu_passes.h for when and
 * why): work items are query tiles, each owns its rows of LSE and Di.
 *
 * With bf16 products the pass runs transposed, as the forward does: the
 * item packs its Q and dO rows once as pair panels (the operands that
 * stay), K and V rows are read in place as the broadcast operands, and
 * S^T, dP^T come out key by query row, so that nothing is packed per key
 * tile and the row sums run down the columns, a vector of rows at a time.
 * Each S and dP element is the same vdpbf16ps sum as the main pass's (the
 * same pairs in the same order), so P~ is the main pass's P~. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_bwd_tile.h"
#include "cpu_gemm.h"
#include "cpu_parallel.h"
#include "cpu_passes.h"
#include "cpu_scratch.h"
#include "rules/layout.h"

int fa__cpu_rowstats_needed(const fa__problem *p, const float *lse, size_t n) {
  if (p->dtype != FA_F32) return 1;
  for (size_t i = 0; i < n; ++i)
    if (isfinite(lse[i]) && fabsf(lse[i]) > 512.0f) return 1;
  return 0;
}

typedef struct rs_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  int bq, bk, bkp, bf16;
  float c2; /* fa__cpu_bf16_log2_scale: P~ and lse_lo in log2 units when > 0 */
  const float *lse;
  float *lse_lo, *di;
  const int64_t *prefix, *nq;
} rs_ctx;

typedef struct rs_scratch {
  fa__cpu_kv_panels kv;
  float *row;
  double *sum_p, *sum_pdp;
  fa__cpu_bwd_bufs w;
  /* transposed (bf16 products): Q, dO pair panels (ceil(D/2), ceil(Dv/2) x np); S^T and dP^T (bk x np);
   * LSE per lane and its folded part (np); K, V rows copied when not usable in place; keep (np x bk) */
  uint32_t *qp, *op;
  float *st, *dpt, *lsev, *off;
  uint16_t *kb16, *vb16;
  uint8_t *keep;
} rs_scratch;

static void rs_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const rs_ctx *c = ctx;
  const fa__problem *p = c->p;
  rs_scratch *s = scratch;
  memset(s, 0, sizeof *s);
  const size_t np = (size_t)fa__cpu_pad(c->bq), bk = (size_t)c->bk;
  s->sum_p = (double *)fa__cpu_take(a, np * sizeof(double));
  s->sum_pdp = (double *)fa__cpu_take(a, np * sizeof(double));
  if (c->bf16) {
    s->qp = (uint32_t *)fa__cpu_take(a, (size_t)(p->D + 1) / 2 * np * sizeof(uint32_t));
    s->op = (uint32_t *)fa__cpu_take(a, (size_t)(p->Dv + 1) / 2 * np * sizeof(uint32_t));
    s->st = fa__cpu_take_f(a, bk * np);
    s->dpt = fa__cpu_take_f(a, bk * np);
    s->lsev = fa__cpu_take_f(a, np);
    s->off = fa__cpu_take_f(a, np);
    s->kb16 = (uint16_t *)fa__cpu_take(a, bk * (size_t)(p->D + 1) * sizeof(uint16_t));
    s->vb16 = (uint16_t *)fa__cpu_take(a, bk * (size_t)(p->Dv + 1) * sizeof(uint16_t));
    s->keep = p->dropout_p > 0 ? (uint8_t *)fa__cpu_take(a, np * bk) : NULL;
    return;
  }
  fa__cpu_kv_panels_carve(a, p, c->bf16, c->bkp, &s->kv);
  s->row = fa__cpu_take_f(a, (size_t)(p->D > p->Dv ? p->D : p->Dv));
  fa__cpu_bwd_bufs_carve(a, p, c->bf16, c->bq, c->bk, &s->w);
}

/* Row sums of P~ and P~ dP over the tile's keys, transposed on the bf16
 * kernels (see the top); the same S, masks, LSE fold and dropout as
 * fa__cpu_bwd_p_dp. */
static void rs_sums_t(const rs_ctx *c, rs_scratch *s, const fa__seq *sq, const fa__band *bd, int64_t b, int64_t h,
                      int64_t i0, int br) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const int D = (int)p->D, Dv = (int)p->Dv, np = fa__cpu_pad(br);
  const int64_t hk = h / p->group, rows = (b * p->Hq + h) * p->Lq;
  const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq->bidx, h, sq->q_row0 + i0);
  const fa__cpu_mat om = fa__cpu_mat_of(&p->dout, sq->bidx, h, sq->q_row0 + i0);
  fa__cpu_pack_pairs_t(s->qp, np, np, &qm, br, D);
  fa__cpu_pack_pairs_t(s->op, np, np, &om, br, Dv);
  const int fold = p->bias.data != NULL; /* as fa__cpu_bwd_p_dp with no LSE correction */
  for (int i = 0; i < np; ++i) {
    const float lse = i < br ? c->lse[rows + i0 + i] : -INFINITY;
    const int fin = isfinite(lse);
    s->off[i] = fold && fin ? lse : 0.0f;
    s->lsev[i] = c->c2 > 0.0f ? fa__cpu_lse_log2(lse) : fold && fin ? 0.0f : lse;
    s->sum_p[i] = s->sum_pdp[i] = 0.0;
  }
  const float alpha = c->c2 > 0.0f ? 1.0f : (float)p->scale; /* log2 units: the scale in exp2_cols' FMA */
  const int elementwise = fa__cpu_score_elementwise(p);
  const float dscale = (float)p->dropout_scale;
  int64_t jlo, jhi;
  fa__band_cols(bd, i0, i0 + br, &jlo, &jhi);
  for (int64_t j0 = jlo; j0 < jhi; j0 += c->bk) {
    const int bc = (int)(jhi - j0 < c->bk ? jhi - j0 : c->bk);
    const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq->bidx, hk, sq->k_row0 + j0);
    const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq->bidx, hk, sq->k_row0 + j0);
    const fa__cpu_bf16_aop ka = fa__cpu_bf16_operand(&km, bc, D, s->kb16);
    fa__cpu_gemm_bf16(kt, bc, np, (D + 1) / 2, ka.a, ka.rs, 2, s->qp, np, alpha, s->st, np, 0);
    fa__cpu_tile tile = {p, bd, b, h, i0, j0, br, bc, fold ? s->off : NULL, NULL};
    const int full = fa__band_tile_full(bd, i0, i0 + br, j0, j0 + bc);
    if (fold || elementwise || !full) fa__cpu_score_tile(kt, &tile, s->st, 1, np, NULL, full);
    if (c->c2 > 0.0f)
      kt->exp2_cols(s->st, np, bc, np, c->c2, s->lsev);
    else
      kt->exp_cols(s->st, np, bc, np, s->lsev);
    const fa__cpu_bf16_aop va = fa__cpu_bf16_operand(&vm, bc, Dv, s->vb16);
    fa__cpu_gemm_bf16(kt, bc, np, (Dv + 1) / 2, va.a, va.rs, 2, s->op, np, 1.0f, s->dpt, np, 0);
    if (s->keep) { /* dP as O saw it: times keep / (1-p) */
      fa__cpu_dropout_mask(kt, &tile, s->keep, 1, np);
      for (int jj = 0; jj < bc; ++jj) {
        float *dp = s->dpt + (ptrdiff_t)jj * np;
        const uint8_t *k = s->keep + (ptrdiff_t)jj * np;
        for (int ii = 0; ii < br; ++ii) dp[ii] *= k[ii] ? dscale : 0.0f;
      }
    }
    kt->colsum2(s->st, s->dpt, np, bc, np, s->sum_p, s->sum_pdp);
  }
}

/* Row sums of P~ and P~ dP over the tile's keys with the f32 kernels, the
 * tiles as the main pass computes them (fa__cpu_bwd_p_dp). */
static void rs_sums(const rs_ctx *c, rs_scratch *s, const fa__seq *sq, const fa__band *bd, int64_t b, int64_t h,
                    int64_t i0, int br) {
  const fa__problem *p = c->p;
  const int64_t hk = h / p->group, rows = (b * p->Hq + h) * p->Lq;
  for (int ii = 0; ii < br; ++ii) s->sum_p[ii] = s->sum_pdp[ii] = 0.0;
  int64_t jlo, jhi;
  fa__band_cols(bd, i0, i0 + br, &jlo, &jhi);
  for (int64_t j0 = jlo; j0 < jhi; j0 += c->bk) {
    const int bc = (int)(jhi - j0 < c->bk ? jhi - j0 : c->bk), bcp = fa__cpu_pad(bc);
    const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq->bidx, hk, sq->k_row0 + j0);
    const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq->bidx, hk, sq->k_row0 + j0);
    fa__cpu_kv_panels_pack(c->kt, p, &s->kv, &km, &vm, bc, bcp, s->row);
    fa__cpu_tile tile = {p, bd, b, h, i0, j0, br, bc, NULL, NULL};
    fa__cpu_aop qa, oa;
    fa__cpu_bwd_p_dp(c->kt, &tile, sq, bcp, &s->kv, c->lse + rows, NULL, &s->w, &qa, &oa);
    for (int ii = 0; ii < br; ++ii) { /* in double, 8 partial sums (a vector's worth) at a time */
      const float *pr = s->w.s + ii * bcp, *dpr = s->w.dp + ii * bcp;
      double sp[8] = {0}, spd[8] = {0};
      int jj = 0;
      for (; jj + 8 <= bc; jj += 8)
        for (int u = 0; u < 8; ++u) {
          sp[u] += pr[jj + u];
          spd[u] += (double)pr[jj + u] * dpr[jj + u];
        }
      for (int u = 0; jj < bc; ++jj, ++u) {
        sp[u] += pr[jj];
        spd[u] += (double)pr[jj] * dpr[jj];
      }
      for (int u = 1; u < 8; ++u) sp[0] += sp[u], spd[0] += spd[u];
      s->sum_p[ii] += sp[0];
      s->sum_pdp[ii] += spd[0];
    }
  }
}

static void rs_tile(const rs_ctx *c, rs_scratch *s, int64_t b, int64_t h, int64_t r) {
  const fa__problem *p = c->p;
  const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  const fa__band bd = fa__seq_band_at(&sq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
  const int64_t i0 = r * c->bq, rows = (b * p->Hq + h) * p->Lq;
  const int br = (int)(sq.lq - i0 < c->bq ? sq.lq - i0 : c->bq);
  if (c->bf16)
    rs_sums_t(c, s, &sq, &bd, b, h, i0, br);
  else
    rs_sums(c, s, &sq, &bd, b, h, i0, br);
  for (int ii = 0; ii < br; ++ii) {
    const double l = s->sum_p[ii];
    c->lse_lo[rows + i0 + ii] = 0.0f;
    if (!(l > 0)) continue; /* nothing visible (or NaN): keep LSE and Di */
    c->lse_lo[rows + i0 + ii] = (float)(c->c2 > 0.0f ? log2(l) : log(l));
    c->di[rows + i0 + ii] = (float)(s->sum_pdp[ii] / l);
  }
}

/* Item it: query tile r of head h of the sequence holding it. */
static void rs_item(const void *ctx, void *scratch, int64_t it) {
  const rs_ctx *c = ctx;
  const int64_t b = fa__cpu_seq_of(c->prefix, c->p->B, it), local = it - c->prefix[b];
  rs_tile(c, scratch, b, local / c->nq[b], local % c->nq[b]);
}

fa_status fa__cpu_rowstats(const fa__problem *p, const fa__cpu_kernels *kt, int bq, int bk, const float *lse,
                           float *lse_lo, float *di, fa__err *err) {
  rs_ctx c;
  c.p = p;
  c.kt = kt;
  c.bq = bq;
  c.bk = bk;
  c.bkp = fa__cpu_pad(bk);
  c.bf16 = fa__cpu_bf16_products(p, kt);
  c.c2 = fa__cpu_bf16_log2_scale(p, kt);
  if (c.bf16) c.bq = bq = 96; /* query rows are the vector lanes here: two strips of 3 vectors */
  c.lse = lse;
  c.lse_lo = lse_lo;
  c.di = di;
  int64_t *book = (int64_t *)malloc((size_t)(2 * p->B + 1) * sizeof(int64_t));
  if (!book) {
    fa__err_set(err, "cpu backward: out of memory for the row-statistics pass");
    return FA_ERR_OUT_OF_MEMORY;
  }
  int64_t *prefix = book, *nq = book + p->B + 1;
  prefix[0] = 0;
  for (int64_t b = 0; b < p->B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    nq[b] = (sq.lq + bq - 1) / bq;
    prefix[b + 1] = prefix[b] + p->Hq * nq[b];
  }
  c.prefix = prefix;
  c.nq = nq;
  const fa_status st = fa__cpu_for_items(p, prefix[p->B], &c, sizeof(rs_scratch), rs_carve, rs_item, err,
                                         "cpu backward (row statistics)");
  free(book);
  return st;
}
