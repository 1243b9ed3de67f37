/* The backward pass, parallel over K/V tiles: a work item is one K/V tile
 * (b, kv head, t) with all the query heads of its group, so dK and dV are
 * summed in the item's own accumulators and written once. The item walks
 * the query tiles its keys can be seen by (fa__band_rows: whole tiles
 * outside the band are skipped) and recomputes P from LSE:
 *   dV^T += dO^T P        dK^T += Q^T dS        dQ_part = dS (scale K)
 * The products run along keys (the K/V panels are the packed operands), Q
 * and dO rows are read in place. dQ_part belongs to a query tile that
 * several items share: it is added to one f32 accumulator under a per-tile
 * ticket. With p->deterministic the ticket also orders the adds by K/V
 * tile, so dQ gets the same bits on every run and thread count; otherwise
 * it is a plain lock and whoever comes first adds first. Items are started
 * in increasing order (cpu_parallel.h), so the item a ticket waits for is
 * always running or done: no deadlock.
 *
 * Before the items: Di = rowsum(dO * O) and a copy of LSE per row (and,
 * when they are too coarse, the row-statistics pass of cpu_passes.h);
 * after them: dq converted from the accumulator, and the dBias pass.
 *
 * bf16 inputs on a table with bf16 kernels (cpu_bf16.h) run all five
 * products on vdpbf16ps: S and dP as cpu_bwd_tile.h says; dV^T and dK^T
 * take P and dS rounded to bf16 as pairs along query rows (with dO, Q
 * packed the same way per query tile); dQ_part takes dS rounded to bf16
 * rows against K packed as pairs along keys once per item. Accumulation
 * stays f32 (docs/semantics.md).
 *
 * Extra memory: 2-3 x B*Hq*Lq floats (Di, LSE, its correction), the
 * tickets, the dQ accumulator when dq is not f32, and per-thread tiles:
 * linear in L. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_bwd_tile.h"
#include "cpu_gemm.h"
#include "cpu_io.h"
#include "cpu_parallel.h"
#include "cpu_passes.h"
#include "cpu_plan.h"
#include "cpu_scratch.h"
#include "rules/layout.h"

typedef struct bwd_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  int bq, bk, bkp, D, Dv, Dp;
  int bf16;                    /* products on kt->gemm_bf16 (fa__cpu_bf16_products) */
  const int64_t *kprefix, *nk; /* items before sequence b; K/V tiles of b */
  const int64_t *qprefix, *nq; /* tickets before sequence b; Q tiles of b */
  atomic_int *tickets;
  const float *di, *lse, *lse_lo; /* [B][Hq][Lq] by sequence and position (lse_lo may be NULL) */
  /* the f32 dQ accumulator: dq itself when f32, else a [Bt, Hq, Lq_t, D] buffer */
  float *dq;
  ptrdiff_t dq_s0, dq_s1, dq_s2, dq_s3;
} bwd_ctx;

typedef struct bwd_scratch {
  fa__cpu_kv_panels kv; /* the K/V tile for S and dP */
  float *ks;            /* bk x Dp scale*K (f32 products) */
  uint32_t *kp;         /* bf16 products: K as pairs along keys (ceil(bk/2) x Dp) */
  uint32_t *pp, *sp;    /* bf16 products: P and dS as pairs along query rows (ceil(bq/2) x bkp) */
  uint32_t *qp;         /* bf16 products: Q as pairs along query rows (ceil(bq/2) x D) */
  uint32_t *op;         /* bf16 products: dO as pairs along query rows (ceil(bq/2) x Dv) */
  uint16_t *ds16;       /* bf16 products: dS rounded to bf16 (bq x bkp) */
  float *dkt, *dvt;     /* D x bkp, Dv x bkp accumulators */
  float *dqp;           /* bq x Dp */
  float *row;
  fa__cpu_bwd_bufs w;
} bwd_scratch;

static void bwd_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const bwd_ctx *c = ctx;
  bwd_scratch *s = scratch;
  const size_t bkp = (size_t)c->bkp, D = (size_t)c->D, Dv = (size_t)c->Dv;
  const size_t half_q = (size_t)(c->bq + 1) / 2, u32 = sizeof(uint32_t);
  fa__cpu_kv_panels_carve(a, c->p, c->bf16, c->bkp, &s->kv);
  s->ks = c->bf16 ? NULL : fa__cpu_take_f(a, (size_t)c->bk * (size_t)c->Dp);
  s->kp = c->bf16 ? (uint32_t *)fa__cpu_take(a, (size_t)(c->bk + 1) / 2 * (size_t)c->Dp * u32) : NULL;
  s->pp = c->bf16 ? (uint32_t *)fa__cpu_take(a, half_q * bkp * u32) : NULL;
  s->sp = c->bf16 ? (uint32_t *)fa__cpu_take(a, half_q * bkp * u32) : NULL;
  /* room for either layout of fa__cpu_pack_pairs_a */
  const size_t ld_t = (size_t)fa__cpu_pairs_ld_t(c->bq);
  s->qp = c->bf16 ? (uint32_t *)fa__cpu_take(a, ld_t * D * u32) : NULL;
  s->op = c->bf16 ? (uint32_t *)fa__cpu_take(a, ld_t * Dv * u32) : NULL;
  s->ds16 = c->bf16 ? (uint16_t *)fa__cpu_take(a, (size_t)c->bq * bkp * sizeof(uint16_t)) : NULL;
  s->dkt = fa__cpu_take_f(a, D * bkp);
  s->dvt = fa__cpu_take_f(a, Dv * bkp);
  s->dqp = fa__cpu_take_f(a, (size_t)c->bq * (size_t)c->Dp);
  size_t rowlen = D > Dv ? D : Dv;
  if (bkp > rowlen) rowlen = bkp;
  s->row = fa__cpu_take_f(a, rowlen);
  fa__cpu_bwd_bufs_carve(a, c->p, c->bf16, c->bq, c->bk, &s->w);
}

/* The K/V tiles [*t0, *t1) that query tile r of a sequence sees; the one
 * rule that both the ticket set-up and the items use. */
static void ktiles_of(const fa__band *bd, int64_t r, int bq, int bk, int64_t *t0, int64_t *t1) {
  const int64_t i0 = r * bq, i1 = i0 + bq < bd->lq ? i0 + bq : bd->lq;
  int64_t j0, j1;
  fa__band_cols(bd, i0, i1, &j0, &j1);
  if (j0 >= j1) {
    *t0 = *t1 = 0;
    return;
  }
  *t0 = j0 / bk;
  *t1 = (j1 - 1) / bk + 1;
}

/* dQ += w * dqp (w = 1: the f32 products have the scale in K already; the
 * bf16 ones apply it here, the same bits as in the product's epilogue, so
 * that the product runs at alpha 1: on AMX its tiles are stored straight). */
static void dq_lock(const bwd_ctx *c, atomic_int *ticket, int64_t t) {
  const int det = c->p->deterministic;
  unsigned spins = 0;
  if (det) {
    while (atomic_load_explicit(ticket, memory_order_acquire) != (int)t) fa__cpu_relax(&spins);
  } else {
    int expect = 0;
    while (!atomic_compare_exchange_weak_explicit(ticket, &expect, 1, memory_order_acquire, memory_order_relaxed)) {
      expect = 0;
      fa__cpu_relax(&spins);
    }
  }
}

static void dq_unlock(const bwd_ctx *c, atomic_int *ticket, int64_t t) {
  const int det = c->p->deterministic;
  atomic_store_explicit(ticket, det ? (int)t + 1 : 0, memory_order_release);
}

static float *dq_at(const bwd_ctx *c, int64_t bidx, int64_t h, int64_t row0) {
  return c->dq + bidx * c->dq_s0 + h * c->dq_s1 + row0 * c->dq_s2;
}

static void dq_add(const bwd_ctx *c, atomic_int *ticket, int64_t t, int64_t bidx, int64_t h, int64_t row0,
                   const float *dqp, int br, float w) {
  dq_lock(c, ticket, t);
  float *base = dq_at(c, bidx, h, row0);
  for (int ii = 0; ii < br; ++ii) {
    float *dst = base + ii * c->dq_s2;
    const float *src = dqp + (ptrdiff_t)ii * c->Dp;
    if (w != 1.0f) {
      for (int d = 0; d < c->D; ++d) dst[d * c->dq_s3] += w * src[d];
    } else if (c->dq_s3 == 1) {
      for (int d = 0; d < c->D; ++d) dst[d] += src[d];
    } else {
      for (int d = 0; d < c->D; ++d) dst[d * c->dq_s3] += src[d];
    }
  }
  dq_unlock(c, ticket, t);
}

/* The bf16 dQ product accumulates into dQ directly (see bwd_products_bf16). */
static int bwd_dq_direct(const bwd_ctx *c) {
  return c->bf16 && !c->kt->gemm_bf16_block && c->Dp == c->D && c->dq_s3 == 1;
}

/* dV^T, dK^T and dQ_part of one query tile (rows i0.. of head h, br of
 * them) on the bf16 kernels, from P (pd, dropped) and dS in s->w.dp; with
 * packed, kt->ds_pairs has put them in s->pp, s->sp and s->ds16 already
 * (no softcap: its factor comes between the dV and dK products). */
static void bwd_products_bf16(const bwd_ctx *c, bwd_scratch *s, const fa__seq *sq, int64_t h, int64_t i0, int br,
                              int bc, int bcp, const float *pd, int packed, int first, atomic_int *ticket, int64_t t) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const int D = c->D, Dv = c->Dv, Dp = c->Dp, ip = (br + 1) / 2;
  const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq->bidx, h, sq->q_row0 + i0);
  const fa__cpu_mat om = fa__cpu_mat_of(&p->dout, sq->bidx, h, sq->q_row0 + i0);
  /* dV^T[e][j] += sum over row pairs of (dO[i][e], dO[i+1][e]) . (P[i][j], P[i+1][j]) */
  if (!packed) kt->pair_pack_f32(s->pp, bcp, pd, bcp, br, bcp);
  const fa__cpu_pairs_a oa = fa__cpu_pack_pairs_a(kt, s->op, c->bq, &om, br, Dv);
  fa__cpu_gemm_bf16(kt, Dv, bcp, ip, oa.a, oa.rsa, oa.csa, s->pp, bcp, 1.0f, s->dvt, bcp, !first);
  if (!packed) {
    if (p->softcap > 0) fa__cpu_softcap_grad(p, &s->w, br, bc, bcp);
    kt->pair_pack_f32(s->sp, bcp, s->w.dp, bcp, br, bcp);
    kt->to_bf16(s->ds16, s->w.dp, br * bcp);
  }
  /* dK^T[d][j] += sum over row pairs of (Q[i][d], Q[i+1][d]) . (dS[i][j], dS[i+1][j]) */
  const fa__cpu_pairs_a qa = fa__cpu_pack_pairs_a(kt, s->qp, c->bq, &qm, br, D);
  fa__cpu_gemm_bf16(kt, D, bcp, ip, qa.a, qa.rsa, qa.csa, s->sp, bcp, 1.0f, s->dkt, bcp, !first);
  /* dQ_part[i][d] = sum over key pairs of (dS[i][j], dS[i][j+1]) . (K[j][d], K[j+1][d]), scaled by dq_add;
   * on the avx512bf16 micro-kernels, with dQ's rows contiguous and no
   * padding column, the product adds scale * dQ_part to dQ itself under
   * the query tile's lock (the kernel's epilogue: multiply, then add, the
   * same bits as dq_add), and dq_add has nothing left to do */
  if (bwd_dq_direct(c)) {
    dq_lock(c, ticket, t);
    fa__cpu_gemm_bf16(kt, br, Dp, (bc + 1) / 2, s->ds16, bcp, 2, s->kp, Dp, (float)p->scale,
                      dq_at(c, sq->bidx, h, sq->q_row0 + i0), c->dq_s2, 1);
    dq_unlock(c, ticket, t);
  } else {
    fa__cpu_gemm_bf16(kt, br, Dp, (bc + 1) / 2, s->ds16, bcp, 2, s->kp, Dp, 1.0f, s->dqp, Dp, 0);
  }
}

/* K/V tile t of sequence b, kv head hk (one work item). */
static void bwd_tile(const bwd_ctx *c, bwd_scratch *s, int64_t b, int64_t hk, int64_t t) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const int D = c->D, Dv = c->Dv, Dp = c->Dp;
  const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  const fa__band bd = fa__seq_band_at(&sq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
  const int64_t j0 = t * c->bk;
  const int bc = (int)(sq.lk - j0 < c->bk ? sq.lk - j0 : c->bk);
  const int bcp = fa__cpu_pad(bc);
  const float scale = (float)p->scale;

  const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq.bidx, hk, sq.k_row0 + j0);
  const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq.bidx, hk, sq.k_row0 + j0);
  int first = 1;
  /* Candidate query tiles from the band (widened by one tile); ktiles_of
   * decides, the same rule the tickets were set up with. */
  int64_t ilo, ihi, rlo = 0, rhi = 0;
  fa__band_rows(&bd, j0, j0 + bc, &ilo, &ihi);
  if (ilo < ihi) {
    rlo = ilo / c->bq > 0 ? ilo / c->bq - 1 : 0;
    rhi = (ihi - 1) / c->bq + 2 < c->nq[b] ? (ihi - 1) / c->bq + 2 : c->nq[b];
  }
  for (int64_t h = hk * p->group; h < (hk + 1) * p->group; ++h) {
    const float *di_seq = c->di + (b * p->Hq + h) * p->Lq, *lse_seq = c->lse + (b * p->Hq + h) * p->Lq,
                *lse_lo_seq = c->lse_lo ? c->lse_lo + (b * p->Hq + h) * p->Lq : NULL;
    atomic_int *tickets = c->tickets + c->qprefix[b] + h * c->nq[b];
    for (int64_t rr = rlo; rr < rhi; ++rr) {
      /* Neighbouring items (K/V tiles) run at the same time and add to the
       * same query tiles' dQ: without the ordering of the deterministic
       * mode, odd tiles walk the query tiles backwards, so that two
       * threads rarely want the same lock. */
      const int64_t r = !p->deterministic && (t & 1) ? rhi - 1 - (rr - rlo) : rr;
      int64_t t0, t1;
      ktiles_of(&bd, r, c->bq, c->bk, &t0, &t1);
      if (t < t0 || t >= t1) continue;
      if (first) {
        fa__cpu_kv_panels_pack(kt, p, &s->kv, &km, &vm, bc, bcp, s->row);
        if (c->bf16) {
          fa__cpu_pack_pairs_rows(kt, s->kp, Dp, &km, bc, D);
          if (Dp > D)
            for (int k = 0; k < (bc + 1) / 2; ++k) memset(s->kp + k * Dp + D, 0, (size_t)(Dp - D) * sizeof(uint32_t));
        } else {
          fa__cpu_pack_rows(kt, s->ks, Dp, Dp, &km, bc, D, scale);
        }
      }
      const int64_t i0 = r * c->bq;
      const int br = (int)(sq.lq - i0 < c->bq ? sq.lq - i0 : c->bq);
      fa__cpu_tile tile = {p, &bd, b, h, i0, j0, br, bc, NULL, NULL};
      fa__cpu_aop qa, oa;
      const float *pd = s->w.pd ? s->w.pd : s->w.s;
      if (c->bf16 && !(p->softcap > 0)) { /* dS and the three bf16 operands in one pass */
        fa__cpu_bwd_p_dp(kt, &tile, &sq, bcp, &s->kv, lse_seq, lse_lo_seq, &s->w, &qa, &oa);
        for (int ii = 0; ii < br; ++ii) s->w.di[ii] = di_seq[i0 + ii];
        kt->ds_pairs(s->w.s, pd, s->w.dp, bcp, br, bcp, s->w.di, s->pp, s->sp, s->ds16);
        bwd_products_bf16(c, s, &sq, h, i0, br, bc, bcp, pd, 1, first, tickets + r, t);
      } else if (c->bf16) {
        fa__cpu_bwd_ds(kt, &tile, &sq, bcp, &s->kv, lse_seq, lse_lo_seq, di_seq, &s->w, &qa, &oa);
        bwd_products_bf16(c, s, &sq, h, i0, br, bc, bcp, pd, 0, first, tickets + r, t);
      } else {
        fa__cpu_bwd_ds(kt, &tile, &sq, bcp, &s->kv, lse_seq, lse_lo_seq, di_seq, &s->w, &qa, &oa);
        /* dV^T[e][j] += sum_i dO[i][e] P[i][j] */
        fa__cpu_gemm(kt, Dv, bcp, br, oa.a, oa.cs, oa.rs, pd, bcp, s->dvt, bcp, !first);
        if (p->softcap > 0) fa__cpu_softcap_grad(p, &s->w, br, bc, bcp);
        /* dK^T[d][j] += sum_i Q[i][d] dS[i][j]  (scale applied when written) */
        fa__cpu_gemm(kt, D, bcp, br, qa.a, qa.cs, qa.rs, s->w.dp, bcp, s->dkt, bcp, !first);
        /* dQ_part[i][d] = sum_j dS[i][j] scale K[j][d] */
        fa__cpu_gemm(kt, br, Dp, bc, s->w.dp, bcp, 1, s->ks, Dp, s->dqp, Dp, 0);
      }
      if (!bwd_dq_direct(c)) dq_add(c, tickets + r, t, sq.bidx, h, sq.q_row0 + i0, s->dqp, br, c->bf16 ? scale : 1.0f);
      first = 0;
    }
  }

  const fa__cpu_mat dkm = fa__cpu_mat_of(&p->dk, sq.bidx, hk, sq.k_row0 + j0);
  const fa__cpu_mat dvm = fa__cpu_mat_of(&p->dv, sq.bidx, hk, sq.k_row0 + j0);
  for (int jj = 0; jj < bc; ++jj) {
    for (int d = 0; d < D; ++d) s->row[d] = first ? 0.0f : scale * s->dkt[d * bcp + jj];
    fa__cpu_store_row(&dkm, jj, s->row, D);
    for (int e = 0; e < Dv; ++e) s->row[e] = first ? 0.0f : s->dvt[e * bcp + jj];
    fa__cpu_store_row(&dvm, jj, s->row, Dv);
  }
}

/* Item it: K/V tile t of kv head hk of the sequence holding it. */
static void bwd_item(const void *ctx, void *scratch, int64_t it) {
  const bwd_ctx *c = ctx;
  const int64_t b = fa__cpu_seq_of(c->kprefix, c->p->B, it), local = it - c->kprefix[b];
  const int hold = c->bf16 && c->kt->tiles_hold; /* amx: one tile configuration for the item */
  if (hold) c->kt->tiles_hold(1);
  bwd_tile(c, scratch, b, local / c->nk[b], local % c->nk[b]);
  if (hold) c->kt->tiles_hold(0);
}

/* Di = rowsum(dO * O) and LSE for every row of every sequence, in the
 * [B][Hq][Lq] layout of the passes; rows holds 2 * Dv floats per thread. */
static void compute_di(const fa__problem *p, const fa__cpu_kernels *kt, float *di, float *lse, float *rows, int nt) {
  const int64_t n = p->B * p->Hq;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
#endif
  for (int64_t bh = 0; bh < n; ++bh) {
    float *ro = rows + (size_t)fa__cpu_thread_id() * 2 * (size_t)p->Dv, *rd = ro + p->Dv;
    const int64_t b = bh / p->Hq, h = bh % p->Hq;
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    const fa__cpu_mat om = fa__cpu_mat_of(&p->o, sq.bidx, h, sq.q_row0);
    const fa__cpu_mat dm = fa__cpu_mat_of(&p->dout, sq.bidx, h, sq.q_row0);
    float *out = di + bh * p->Lq, *lout = lse + bh * p->Lq;
    const float *lin =
        (const float *)p->lse.data + sq.bidx * p->lse.stride[0] + h * p->lse.stride[1] + sq.q_row0 * p->lse.stride[2];
    for (int64_t i = 0; i < sq.lq; ++i) {
      lout[i] = lin[i * p->lse.stride[2]];
      fa__cpu_load_row(kt, ro, &om, i, (int)p->Dv, 1.0f);
      fa__cpu_load_row(kt, rd, &dm, i, (int)p->Dv, 1.0f);
      double acc = 0.0;
      for (int64_t e = 0; e < p->Dv; ++e) acc += (double)ro[e] * rd[e];
      out[i] = (float)acc;
    }
    for (int64_t i = sq.lq; i < p->Lq; ++i) { /* past the sequence: defined, never read by a tile */
      out[i] = 0.0f;
      lout[i] = -INFINITY;
    }
  }
  (void)nt;
}

/* acc[0, n) = 0, written in parallel (each page's first touch a write). */
static void zero_acc(float *acc, size_t n, int nt) {
  const int64_t chunk = 1 << 14, nc = (int64_t)((n + chunk - 1) / chunk);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
  for (int64_t k = 0; k < nc; ++k) {
    const size_t at = (size_t)k * (size_t)chunk, len = n - at < (size_t)chunk ? n - at : (size_t)chunk;
    memset(acc + at, 0, len * sizeof(float));
  }
  (void)nt;
}

/* Rows of a [B, H, L, C] output: zero those of sequence b (all of
 * [0, L) in the padded layout, the sequence's own rows when packed). */
static void zero_rows(const fa_tensor *x, const fa__problem *p, int kv, const float *zeros) {
  const int64_t H = x->shape[1], C = x->shape[3];
  for (int64_t b = 0; b < p->B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    const int64_t row0 = p->varlen ? (kv ? sq.k_row0 : sq.q_row0) : 0;
    const int64_t n = p->varlen ? (kv ? sq.lk : sq.lq) : x->shape[2];
    for (int64_t h = 0; h < H; ++h) {
      const fa__cpu_mat m = fa__cpu_mat_of(x, sq.bidx, h, row0);
      for (int64_t i = kv && !p->varlen ? sq.lk : 0; i < n; ++i) fa__cpu_store_row(&m, i, zeros, (int)C);
    }
  }
}

fa_status fa__cpu_backward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err) {
  fa__cpu_blocks blk = fa__cpu_blocks_backward(kt, p->D, p->Dv, p->block_q, p->block_k);
  if (p->block_k <= 0) {
    /* Small problems: a few large K/V tiles would leave threads idle, so the
     * tile shrinks (in 16-row steps) until there are 16 items. This looks at
     * the problem only, never at the thread count: the deterministic
     * backward keeps its bits on any number of threads. */
    while (blk.bk > 48 && p->B * p->Hkv * ((p->Lk + blk.bk - 1) / blk.bk) < 16) blk.bk -= 16;
  }
  /* avx512bf16 products: 128 query rows, twice as many pair steps for the
   * dV^T and dK^T products per load and store of their accumulators
   * (measured, 2 threads, L = 4096: 3% faster at D = 64 and 128 than 64;
   * 96 between). The row-statistics pass keeps its own tile. */
  if (p->block_q <= 0 && fa__cpu_bf16_products(p, kt) && kt->isa == FA_ISA_AVX512BF16) blk.bq = 128;
  if (blk.bq > p->Lq) blk.bq = (int)p->Lq;
  if (blk.bk > p->Lk) blk.bk = (int)p->Lk;
  bwd_ctx c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.kt = kt;
  c.bq = blk.bq;
  c.bk = blk.bk;
  c.bkp = fa__cpu_pad(blk.bk);
  c.D = (int)p->D;
  c.Dv = (int)p->Dv;
  c.Dp = fa__cpu_pad((int)p->D);
  c.bf16 = fa__cpu_bf16_products(p, kt);

  const int64_t B = p->B;
  const size_t n_di = (size_t)(B * p->Hq * p->Lq);
  const int dq_f32 = p->dq.dtype == FA_F32;
  const size_t n_dq = dq_f32 ? 0 : (size_t)(p->dq.shape[0] * p->dq.shape[1] * p->dq.shape[2] * p->dq.shape[3]);
  int64_t *book = (int64_t *)malloc((size_t)(4 * B + 2) * sizeof(int64_t));
  float *di = (float *)malloc((n_di ? 3 * n_di : 1) * sizeof(float)), *lse = di + n_di, *lse_lo = NULL;
  float *zeros = (float *)calloc((size_t)(p->D > p->Dv ? p->D : p->Dv), sizeof(float));
  /* malloc, then zero_acc: calloc's fresh pages would map the shared zero
   * page, dq_add's first read of each page maps it and its first write
   * then faults again to copy it, with a TLB shootdown on the other threads
   * (an IPI each, costly in a VM: 5% of the bf16 backward, measured). */
  float *dqacc = dq_f32 ? NULL : (float *)malloc((n_dq ? n_dq : 1) * sizeof(float));
  atomic_int *tickets = NULL;
  fa_status st = FA_OK;
  if (!book || !di || !zeros || (!dq_f32 && !dqacc)) goto oom;

  int64_t *kprefix = book, *nk = book + B + 1, *qprefix = book + 2 * B + 1, *nq = book + 3 * B + 2;
  kprefix[0] = qprefix[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    nk[b] = (sq.lk + c.bk - 1) / c.bk;
    nq[b] = (sq.lq + c.bq - 1) / c.bq;
    kprefix[b + 1] = kprefix[b] + p->Hkv * nk[b];
    qprefix[b + 1] = qprefix[b] + p->Hq * nq[b];
  }
  c.kprefix = kprefix;
  c.nk = nk;
  c.qprefix = qprefix;
  c.nq = nq;
  const int64_t items = kprefix[B];

  tickets = (atomic_int *)malloc((size_t)(qprefix[B] > 0 ? qprefix[B] : 1) * sizeof(atomic_int));
  if (!tickets) goto oom;
  for (int64_t b = 0; b < B; ++b) {
    const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
    const fa__band bd =
        fa__seq_band_at(&sq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
    for (int64_t r = 0; r < nq[b]; ++r) {
      int64_t t0, t1;
      ktiles_of(&bd, r, c.bq, c.bk, &t0, &t1);
      for (int64_t h = 0; h < p->Hq; ++h)
        atomic_init(&tickets[qprefix[b] + h * nq[b] + r], p->deterministic ? (int)t0 : 0);
    }
  }
  c.tickets = tickets;

  if (dq_f32) {
    c.dq = (float *)p->dq.data;
    c.dq_s0 = (ptrdiff_t)p->dq.stride[0];
    c.dq_s1 = (ptrdiff_t)p->dq.stride[1];
    c.dq_s2 = (ptrdiff_t)p->dq.stride[2];
    c.dq_s3 = (ptrdiff_t)p->dq.stride[3];
    zero_rows(&p->dq, p, 0, zeros);
  } else {
    c.dq = dqacc;
    c.dq_s3 = 1;
    c.dq_s2 = (ptrdiff_t)p->D;
    c.dq_s1 = c.dq_s2 * (ptrdiff_t)p->dq.shape[2];
    c.dq_s0 = c.dq_s1 * (ptrdiff_t)p->Hq;
  }
  if (!p->varlen) { /* keys past a sequence's length: dK = dV = 0 */
    zero_rows(&p->dk, p, 1, zeros);
    zero_rows(&p->dv, p, 1, zeros);
  }

  {
    const int nt = fa__cpu_threads(p, B * p->Hq);
    float *rows = (float *)malloc((size_t)nt * 2 * (size_t)p->Dv * sizeof(float));
    if (!rows) goto oom;
    compute_di(p, kt, di, lse, rows, nt);
    if (dqacc) zero_acc(dqacc, n_dq, nt);
    free(rows);
  }
  c.di = di;
  c.lse = lse;
  if (fa__cpu_rowstats_needed(p, lse, n_di)) {
    lse_lo = lse + n_di;
    st = fa__cpu_rowstats(p, kt, c.bq, c.bk, lse, lse_lo, di, err);
    if (st != FA_OK) goto done;
    c.lse_lo = lse_lo;
  }

  st = fa__cpu_for_items(p, items, &c, sizeof(bwd_scratch), bwd_carve, bwd_item, err, "cpu backward");
  if (st != FA_OK) goto done;

  if (!dq_f32) { /* convert the accumulator: every row of every sequence (and padding) */
    for (int64_t b = 0; b < B; ++b) {
      const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
      const int64_t row0 = p->varlen ? sq.q_row0 : 0, n = p->varlen ? sq.lq : p->dq.shape[2];
      for (int64_t h = 0; h < p->Hq; ++h) {
        const fa__cpu_mat m = fa__cpu_mat_of(&p->dq, sq.bidx, h, row0);
        const float *src = dqacc + sq.bidx * c.dq_s0 + h * c.dq_s1 + row0 * c.dq_s2;
        for (int64_t i = 0; i < n; ++i) fa__cpu_store_row(&m, i, src + i * c.dq_s2, c.D);
      }
    }
  }

  if (p->dbias.data) st = fa__cpu_dbias(p, kt, lse, lse_lo, di, err);
  goto done;

oom:
  fa__err_set(err, "cpu backward: out of memory for its buffers (Di, dQ accumulator or tickets)");
  st = FA_ERR_OUT_OF_MEMORY;
done:
  free(tickets);
  free(dqacc);
  free(zeros);
  free(di);
  free(book);
  return st;
}
