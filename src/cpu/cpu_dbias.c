/* dBias = dS, summed over the dimensions where the bias broadcasts (the
 * dims of size 1 in dbias: stride 0 in the problem). A pass of its own, so
 * that each element of dbias has one owner: a work item is one element of
 * the product of the dims that are not summed (sequence, head, Q tile,
 * K tile), and it walks the summed dims in a fixed order, recomputing the
 * dS tiles it needs. No two threads write the same element, and the sums
 * have the same order on every run and thread count. */
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

typedef struct db_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  const float *di, *lse, *lse_lo;
  int bq, bk, bkp, bf16;
  int sum[4];       /* summed: b, h, i, j */
  int64_t n[4];     /* items along b, h, Q tiles, K tiles (1 where summed) */
  int acc_r, acc_c; /* accumulator rows (bq or 1) and columns (bk or 1) */
} db_ctx;

typedef struct db_scratch {
  fa__cpu_kv_panels kv;
  float *row;
  double *acc;
  fa__cpu_bwd_bufs w;
} db_scratch;

static void db_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const db_ctx *c = ctx;
  db_scratch *s = scratch;
  const size_t bkp = (size_t)c->bkp;
  fa__cpu_kv_panels_carve(a, c->p, c->bf16, (int)bkp, &s->kv);
  s->row = fa__cpu_take_f(a, (size_t)(c->p->D > c->p->Dv ? c->p->D : c->p->Dv));
  s->acc = (double *)fa__cpu_take(a, (size_t)c->acc_r * (size_t)c->acc_c * sizeof(double));
  fa__cpu_bwd_bufs_carve(a, c->p, c->bf16, c->bq, c->bk, &s->w);
}

static void *dbias_at(const fa_tensor *x, int64_t b, int64_t h, int64_t i, int64_t j) {
  const ptrdiff_t es = (ptrdiff_t)fa_dtype_size(x->dtype);
  return (char *)x->data + (ptrdiff_t)(b * x->stride[0] + h * x->stride[1] + i * x->stride[2] + j * x->stride[3]) * es;
}

/* Adds dS of tile (b, h, r, t) to the accumulator. */
static void db_tile(const db_ctx *c, db_scratch *s, int64_t b, int64_t h, int64_t r, int64_t t) {
  const fa__problem *p = c->p;
  const fa__seq sq = fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  const int64_t i0 = r * c->bq, j0 = t * c->bk;
  if (i0 >= sq.lq || j0 >= sq.lk) return;
  const fa__band bd = fa__seq_band_at(&sq, p->window_left, p->window_right, p->bottom_right, p->q_offset - p->k_offset);
  const int br = (int)(sq.lq - i0 < c->bq ? sq.lq - i0 : c->bq);
  const int bc = (int)(sq.lk - j0 < c->bk ? sq.lk - j0 : c->bk);
  int64_t jlo, jhi;
  fa__band_cols(&bd, i0, i0 + br, &jlo, &jhi);
  if (jhi <= j0 || jlo >= j0 + bc) return; /* outside the band: dS = 0 */
  const int bcp = fa__cpu_pad(bc);
  const int64_t hk = h / p->group;
  const fa__cpu_mat km = fa__cpu_mat_of(&p->k, sq.bidx, hk, sq.k_row0 + j0);
  const fa__cpu_mat vm = fa__cpu_mat_of(&p->v, sq.bidx, hk, sq.k_row0 + j0);
  fa__cpu_kv_panels_pack(c->kt, p, &s->kv, &km, &vm, bc, bcp, s->row);
  fa__cpu_tile tile = {p, &bd, b, h, i0, j0, br, bc, NULL, NULL};
  fa__cpu_aop qa, oa;
  const int64_t rows = (b * p->Hq + h) * p->Lq;
  fa__cpu_bwd_ds(c->kt, &tile, &sq, bcp, &s->kv, c->lse + rows, c->lse_lo ? c->lse_lo + rows : NULL, c->di + rows,
                 &s->w, &qa, &oa);
  for (int ii = 0; ii < br; ++ii) {
    double *arow = s->acc + (c->sum[2] ? 0 : ii) * c->acc_c;
    const float *ds = s->w.dp + ii * bcp;
    if (c->sum[3]) {
      double sum = 0.0;
      for (int jj = 0; jj < bc; ++jj) sum += ds[jj];
      arow[0] += sum;
    } else {
      for (int jj = 0; jj < bc; ++jj) arow[jj] += ds[jj];
    }
  }
}

static void db_item(const void *ctx, void *scratch, int64_t item) {
  const db_ctx *c = ctx;
  db_scratch *s = scratch;
  const fa__problem *p = c->p;
  int64_t idx[4];
  for (int d = 3; d >= 0; --d) {
    idx[d] = item % c->n[d];
    item /= c->n[d];
  }
  memset(s->acc, 0, (size_t)c->acc_r * (size_t)c->acc_c * sizeof(double));
  const int64_t nqmax = (p->Lq + c->bq - 1) / c->bq, nkmax = (p->Lk + c->bk - 1) / c->bk;
  const int64_t b0 = c->sum[0] ? 0 : idx[0], b1 = c->sum[0] ? p->B : idx[0] + 1;
  const int64_t h0 = c->sum[1] ? 0 : idx[1], h1 = c->sum[1] ? p->Hq : idx[1] + 1;
  const int64_t r0 = c->sum[2] ? 0 : idx[2], r1 = c->sum[2] ? nqmax : idx[2] + 1;
  const int64_t t0 = c->sum[3] ? 0 : idx[3], t1 = c->sum[3] ? nkmax : idx[3] + 1;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t t = t0; t < t1; ++t) db_tile(c, s, b, h, r, t);

  /* write the owned block of dbias (index 0 along summed dims) */
  const int64_t ib = c->sum[0] ? 0 : idx[0], ih = c->sum[1] ? 0 : idx[1];
  for (int ii = 0; ii < c->acc_r; ++ii) {
    const int64_t i = c->sum[2] ? 0 : idx[2] * c->bq + ii;
    if (i >= p->Lq) break;
    for (int jj = 0; jj < c->acc_c; ++jj) {
      const int64_t j = c->sum[3] ? 0 : idx[3] * c->bk + jj;
      if (j >= p->Lk) break;
      fa__cpu_put(dbias_at(&p->dbias, ib, ih, i, j), p->dbias.dtype, (float)s->acc[ii * c->acc_c + jj]);
    }
  }
}

fa_status fa__cpu_dbias(const fa__problem *p, const fa__cpu_kernels *kt, const float *lse, const float *lse_lo,
                        const float *di, fa__err *err) {
  const fa__cpu_blocks blk = fa__cpu_blocks_backward(kt, p->D, p->Dv, p->block_q, p->block_k);
  db_ctx c;
  c.p = p;
  c.kt = kt;
  c.di = di;
  c.lse = lse;
  c.lse_lo = lse_lo;
  c.bq = blk.bq > p->Lq ? (int)p->Lq : blk.bq;
  c.bk = blk.bk > p->Lk ? (int)p->Lk : blk.bk;
  c.bkp = fa__cpu_pad(c.bk);
  c.bf16 = fa__cpu_bf16_products(p, kt);
  const int64_t logical[4] = {p->B, p->Hq, p->Lq, p->Lk};
  for (int d = 0; d < 4; ++d) c.sum[d] = p->dbias.shape[d] == 1 && logical[d] > 1;
  c.n[0] = c.sum[0] ? 1 : p->B;
  c.n[1] = c.sum[1] ? 1 : p->Hq;
  c.n[2] = c.sum[2] ? 1 : (p->Lq + c.bq - 1) / c.bq;
  c.n[3] = c.sum[3] ? 1 : (p->Lk + c.bk - 1) / c.bk;
  c.acc_r = c.sum[2] ? 1 : c.bq;
  c.acc_c = c.sum[3] ? 1 : c.bk;
  const int64_t items = c.n[0] * c.n[1] * c.n[2] * c.n[3];

  return fa__cpu_for_items(p, items, &c, sizeof(db_scratch), db_carve, db_item, err, "cpu backward (dbias)");
}
