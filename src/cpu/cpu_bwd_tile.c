#include "cpu_bwd_tile.h"

#include <math.h>

#include "cpu_bf16.h"
#include "cpu_gemm.h"
#include "cpu_scratch.h"
#include "rules/score.h"

void fa__cpu_bwd_bufs_carve(fa__cpu_arena *a, const fa__problem *p, int bf16, int bq, int bk, fa__cpu_bwd_bufs *w) {
  const size_t tile = (size_t)bq * (size_t)fa__cpu_pad(bk);
  const int conv = p->dtype != FA_F32 && !bf16;
  w->s = fa__cpu_take_f(a, tile);
  w->dp = fa__cpu_take_f(a, tile);
  w->pd = p->dropout_p > 0 ? fa__cpu_take_f(a, tile) : NULL;
  w->keep = p->dropout_p > 0 ? (uint8_t *)fa__cpu_take(a, tile) : NULL;
  w->capped = p->softcap > 0 ? fa__cpu_take_f(a, tile) : NULL;
  w->lse = fa__cpu_take_f(a, (size_t)bq);
  w->di = fa__cpu_take_f(a, (size_t)bq);
  w->off = fa__cpu_take_f(a, (size_t)bq);
  w->off_lo = fa__cpu_take_f(a, (size_t)bq);
  w->qbuf = conv ? fa__cpu_take_f(a, (size_t)bq * (size_t)p->D) : NULL;
  w->obuf = conv ? fa__cpu_take_f(a, (size_t)bq * (size_t)p->Dv) : NULL;
  w->q16 = bf16 ? (uint16_t *)fa__cpu_take(a, (size_t)bq * (size_t)(p->D + 1) * sizeof(uint16_t)) : NULL;
  w->o16 = bf16 ? (uint16_t *)fa__cpu_take(a, (size_t)bq * (size_t)(p->Dv + 1) * sizeof(uint16_t)) : NULL;
}

void fa__cpu_kv_panels_carve(fa__cpu_arena *a, const fa__problem *p, int bf16, int bkp, fa__cpu_kv_panels *kv) {
  const size_t n = (size_t)bkp;
  kv->kts = bf16 ? NULL : fa__cpu_take_f(a, (size_t)p->D * n);
  kv->vt = bf16 ? NULL : fa__cpu_take_f(a, (size_t)p->Dv * n);
  kv->ktp = bf16 ? (uint32_t *)fa__cpu_take(a, (size_t)(p->D + 1) / 2 * n * sizeof(uint32_t)) : NULL;
  kv->vtp = bf16 ? (uint32_t *)fa__cpu_take(a, (size_t)(p->Dv + 1) / 2 * n * sizeof(uint32_t)) : NULL;
}

void fa__cpu_kv_panels_pack(const fa__cpu_kernels *kt, const fa__problem *p, const fa__cpu_kv_panels *kv,
                            const fa__cpu_mat *km, const fa__cpu_mat *vm, int bc, int bcp, float *row) {
  if (kv->ktp) {
    fa__cpu_pack_pairs_t(kv->ktp, bcp, bcp, km, bc, (int)p->D);
    fa__cpu_pack_pairs_t(kv->vtp, bcp, bcp, vm, bc, (int)p->Dv);
  } else {
    fa__cpu_pack_t(kt, kv->kts, bcp, bcp, km, bc, (int)p->D, (float)p->scale, row);
    fa__cpu_pack_t(kt, kv->vt, bcp, bcp, vm, bc, (int)p->Dv, 1.0f, row);
  }
}

void fa__cpu_bwd_p_dp(const fa__cpu_kernels *kt, fa__cpu_tile *t, const fa__seq *sq, int bcp,
                      const fa__cpu_kv_panels *kv, const float *lse_seq, const float *lse_lo_seq,
                      const fa__cpu_bwd_bufs *w, fa__cpu_aop *qa, fa__cpu_aop *oa) {
  const fa__problem *p = t->p;
  const int br = t->br, bc = t->bc, D = (int)p->D, Dv = (int)p->Dv;

  /* bf16 products with nothing but masks on the scores: P in log2 units
   * with the scale in the exponent's FMA (fa__cpu_bf16_log2_scale; the
   * row-statistics pass then gave lse_lo in log2 units too) */
  const float c2 = kv->ktp ? fa__cpu_bf16_log2_scale(p, kt) : 0.0f;
  const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq->bidx, t->h, sq->q_row0 + t->i0);
  if (kv->ktp) {
    const fa__cpu_bf16_aop a16 = fa__cpu_bf16_operand(&qm, br, D, w->q16);
    const float alpha = c2 > 0.0f ? 1.0f : (float)p->scale;
    fa__cpu_gemm_bf16(kt, br, bcp, (D + 1) / 2, a16.a, a16.rs, 2, kv->ktp, bcp, alpha, w->s, bcp, 0);
    qa->a = NULL, qa->rs = qa->cs = 0;
  } else {
    *qa = fa__cpu_operand(kt, &qm, br, D, w->qbuf);
    fa__cpu_gemm(kt, br, bcp, D, qa->a, qa->rs, qa->cs, kv->kts, bcp, w->s, bcp, 0);
  }

  /* With a bias (or an LSE correction), LSE is subtracted inside the score
   * transform (see row_off) and exp() then sees offsets of 0; rows with
   * LSE = -inf (nothing visible) keep it, so that exp_rows zeroes them. */
  const int fold = p->bias.data != NULL || lse_lo_seq != NULL;
  const int full = fa__band_tile_full(t->bd, t->i0, t->i0 + br, t->j0, t->j0 + bc);
  if (c2 > 0.0f) {
    for (int ii = 0; ii < br; ++ii) {
      const float lse = lse_seq[t->i0 + ii];
      w->off[ii] = fa__cpu_lse_log2(lse);
      w->off_lo[ii] = lse_lo_seq && isfinite(lse) ? lse_lo_seq[t->i0 + ii] : 0.0f;
    }
    t->row_off = t->row_off_lo = NULL;
    if (!full) fa__cpu_score_tile(kt, t, w->s, bcp, 1, w->capped, full); /* masks only */
    for (int ii = 0; ii < br; ++ii)
      for (int jj = bc; jj < bcp; ++jj) w->s[ii * bcp + jj] = -INFINITY;
    kt->exp2_rows_off(w->s, bcp, br, bcp, c2, w->off, w->off_lo);
  }
  for (int ii = 0; c2 == 0.0f && ii < br; ++ii) {
    const float lse = lse_seq[t->i0 + ii];
    const int fin = isfinite(lse);
    w->off[ii] = fold && fin ? lse : 0.0f;
    w->off_lo[ii] = fold && fin && lse_lo_seq ? lse_lo_seq[t->i0 + ii] : 0.0f;
    w->lse[ii] = fold && fin ? 0.0f : lse;
  }
  if (c2 == 0.0f) {
    t->row_off = fold ? w->off : NULL;
    t->row_off_lo = fold ? w->off_lo : NULL;
    const int elementwise = fa__cpu_score_elementwise(p);
    /* The LSE fold alone (no transform, no mask, inside the band) is a
     * subtraction per row: fused into the exp where the table has it. */
    const int fused = fold && !elementwise && full && kt->exp_rows_off;
    if (!fused && (fold || elementwise || !full)) fa__cpu_score_tile(kt, t, w->s, bcp, 1, w->capped, full);
    if (bc < bcp)
      for (int ii = 0; ii < br; ++ii)
        for (int jj = bc; jj < bcp; ++jj) w->s[ii * bcp + jj] = -INFINITY;
    if (fused)
      kt->exp_rows_off(w->s, bcp, br, bcp, w->lse, w->off, w->off_lo);
    else
      kt->exp_rows(w->s, bcp, br, bcp, w->lse);
  }

  const fa__cpu_mat om = fa__cpu_mat_of(&p->dout, sq->bidx, t->h, sq->q_row0 + t->i0);
  if (kv->vtp) {
    const fa__cpu_bf16_aop a16 = fa__cpu_bf16_operand(&om, br, Dv, w->o16);
    fa__cpu_gemm_bf16(kt, br, bcp, (Dv + 1) / 2, a16.a, a16.rs, 2, kv->vtp, bcp, 1.0f, w->dp, bcp, 0);
    oa->a = NULL, oa->rs = oa->cs = 0;
  } else {
    *oa = fa__cpu_operand(kt, &om, br, Dv, w->obuf);
    fa__cpu_gemm(kt, br, bcp, Dv, oa->a, oa->rs, oa->cs, kv->vt, bcp, w->dp, bcp, 0);
  }

  if (w->pd) { /* O saw P * keep / (1-p): so do dV (through pd) and dP */
    const float ds = (float)p->dropout_scale;
    fa__cpu_dropout_mask(kt, t, w->keep, bcp, 1);
    for (int ii = 0; ii < br; ++ii) {
      float *s = w->s + ii * bcp, *pd = w->pd + ii * bcp, *dp = w->dp + ii * bcp;
      const uint8_t *k = w->keep + ii * bcp;
      for (int jj = 0; jj < bc; ++jj) {
        const float z = k[jj] ? ds : 0.0f;
        pd[jj] = s[jj] * z;
        dp[jj] *= z;
      }
      for (int jj = bc; jj < bcp; ++jj) pd[jj] = 0.0f;
    }
  }
}

void fa__cpu_bwd_ds(const fa__cpu_kernels *kt, fa__cpu_tile *t, const fa__seq *sq, int bcp, const fa__cpu_kv_panels *kv,
                    const float *lse_seq, const float *lse_lo_seq, const float *di_seq, const fa__cpu_bwd_bufs *w,
                    fa__cpu_aop *qa, fa__cpu_aop *oa) {
  fa__cpu_bwd_p_dp(kt, t, sq, bcp, kv, lse_seq, lse_lo_seq, w, qa, oa);
  for (int ii = 0; ii < t->br; ++ii) w->di[ii] = di_seq[t->i0 + ii];
  kt->ds_rows(w->s, w->dp, bcp, t->br, bcp, w->di);
}

void fa__cpu_softcap_grad(const fa__problem *p, const fa__cpu_bwd_bufs *w, int br, int bc, int bcp) {
  const float cap = (float)p->softcap;
  for (int ii = 0; ii < br; ++ii)
    for (int jj = 0; jj < bc; ++jj) w->dp[ii * bcp + jj] *= fa__softcap_grad_f(w->capped[ii * bcp + jj], cap);
}
