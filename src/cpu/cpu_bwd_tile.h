/* The part of the backward that both the main pass and the dBias pass
 * need: for one tile of query rows x keys, recompute P from LSE and produce
 * dS. The K/V side arrives packed (the tile that stays), the Q/dO side is
 * read in place (the tiles that stream):
 *   S  = Q (scale K)^T          P = exp(S - LSE)       (per row)
 *   dP = dO V^T                 (times the dropout keep/(1-p))
 *   dS = P * (dP - Di)          Di = rowsum(dO * O)
 * All tiles are row-major br x bcp (bcp: keys padded to the panel width;
 * the padding columns come out 0 in P and dS).
 *
 * With bf16 products (fa__cpu_bf16_products: bf16 inputs, a table with
 * gemm_bf16) S and dP run on vdpbf16ps: Q and dO rows are read as pairs
 * along d, e (in place when contiguous), K^T and V^T are pair panels; P, dP
 * and dS stay f32. */
#ifndef FA_CPU_BWD_TILE_H
#define FA_CPU_BWD_TILE_H

#include <stdint.h>

#include "cpu_io.h"
#include "cpu_score.h"
#include "rules/layout.h"

typedef struct fa__cpu_bwd_bufs {
  float *s;                       /* br x bcp: scores, then P */
  float *dp;                      /* br x bcp: dP, then dS */
  float *pd;                      /* br x bcp: P with dropout applied (NULL without dropout: use s) */
  float *capped;                  /* br x bcp: softcap(scale q.k) (NULL without softcap) */
  uint8_t *keep;                  /* br x bcp (dropout) */
  float *lse, *di, *off, *off_lo; /* br */
  float *qbuf, *obuf;             /* br x D, br x Dv: Q and dO converted to f32 (f16/bf16 only) */
  uint16_t *q16, *o16;            /* bf16 products: Q, dO rows copied when not usable in place */
} fa__cpu_bwd_bufs;

/* The K/V side of a K/V tile as the S and dP products take it, packed once
 * per K/V tile: f32 panels, or pair panels with bf16 products. */
typedef struct fa__cpu_kv_panels {
  float *kts, *vt;     /* scale*K^T (D x bcp), V^T (Dv x bcp); NULL with bf16 products */
  uint32_t *ktp, *vtp; /* bf16 products: K^T, V^T as pairs along d, e (ceil(D/2), ceil(Dv/2) x bcp); K unscaled */
} fa__cpu_kv_panels;

/* Scratch floats (and keep bytes) that fa__cpu_bwd_bufs needs for tiles of
 * at most bq x bk. */
struct fa__cpu_arena;
void fa__cpu_bwd_bufs_carve(struct fa__cpu_arena *a, const fa__problem *p, int bf16, int bq, int bk,
                            fa__cpu_bwd_bufs *w);
/* Panels for K/V tiles of at most bkp (padded) keys. */
void fa__cpu_kv_panels_carve(struct fa__cpu_arena *a, const fa__problem *p, int bf16, int bkp, fa__cpu_kv_panels *kv);
/* Packs bc keys of km, vm into kv for tiles of bcp columns (row: max(D, Dv)
 * floats of scratch). */
void fa__cpu_kv_panels_pack(const fa__cpu_kernels *kt, const fa__problem *p, const fa__cpu_kv_panels *kv,
                            const fa__cpu_mat *km, const fa__cpu_mat *vm, int bc, int bcp, float *row);

/* P and dP for tile t (t->br rows from t->i0, t->bc keys from t->j0) of
 * query head t->h (t->row_off is set here). kv: the K/V tile's panels
 * (bf16 products when kv->ktp is set); lse_seq: LSE of rows 0.. of this
 * (sequence, head); lse_lo_seq (may be NULL) a small correction to it, as
 * fa__cpu_rowstats computes (cpu_passes.h). On return w->s holds P, w->pd (or w->s) the dropped P,
 * w->dp the dropped dP, and qa/oa the Q and dO operands used (f32
 * products; with bf16 products their a is NULL). */
void fa__cpu_bwd_p_dp(const fa__cpu_kernels *kt, fa__cpu_tile *t, const fa__seq *sq, int bcp,
                      const fa__cpu_kv_panels *kv, const float *lse_seq, const float *lse_lo_seq,
                      const fa__cpu_bwd_bufs *w, fa__cpu_aop *qa, fa__cpu_aop *oa);

/* fa__cpu_bwd_p_dp, then dS = P (dP - Di) in w->dp (the gradient of the
 * final score, before any softcap factor); di_seq like lse_seq. */
void fa__cpu_bwd_ds(const fa__cpu_kernels *kt, fa__cpu_tile *t, const fa__seq *sq, int bcp, const fa__cpu_kv_panels *kv,
                    const float *lse_seq, const float *lse_lo_seq, const float *di_seq, const fa__cpu_bwd_bufs *w,
                    fa__cpu_aop *qa, fa__cpu_aop *oa);

/* dS *= d softcap / ds, from the capped scores (softcap only). */
void fa__cpu_softcap_grad(const fa__problem *p, const fa__cpu_bwd_bufs *w, int br, int bc, int bcp);

#endif
