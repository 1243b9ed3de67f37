/* Turns the public arguments of an attention call into an fa__problem, or
 * a status and a message that names the argument. Every check of
 * DESIGN.md's "Bad input" lives here or in checks.c, once, before any
 * backend runs; the KV-cache call's own checks are in validate_kvcache.c. */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../rules/dropout.h"
#include "checks.h"
#include "validate_fp8.h"

fa_status fa__problem_build(fa__problem *p, const fa__call *c, fa__err *err) {
  if (c->kvcache) return fa__kv_problem_build(p, c, err);
  static const fa_options defaults;
  const fa_options *o = c->opt ? c->opt : &defaults;
  const int bwd = c->pass == FA__BACKWARD;
  memset(p, 0, sizeof *p);
  p->pass = c->pass;

  /* presence */
  CHECK(fa__need_tensor(c->q, "q", err));
  CHECK(fa__need_tensor(c->k, "k", err));
  CHECK(fa__need_tensor(c->v, "v", err));
  if (bwd) {
    CHECK(fa__need_tensor(c->o, "o", err));
    CHECK(fa__need_tensor(c->dout, "dout", err));
    CHECK(fa__need_tensor(c->lse, "lse", err));
    CHECK(fa__need_tensor(c->dq, "dq", err));
    CHECK(fa__need_tensor(c->dk, "dk", err));
    CHECK(fa__need_tensor(c->dv, "dv", err));
  } else {
    CHECK(fa__need_tensor(c->o, "o", err));
    if (c->lse && c->lse->data) CHECK(fa__need_tensor(c->lse, "lse", err));
  }
  CHECK(fa__check_options(o, err));
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
  const int fp8 = dt == FA_F8_E4M3;
  CHECK(fa__fp8_check_call(c, o, err));
  if (!fp8 && !fa__is_float_dtype(dt))
    FAIL(FA_ERR_DTYPE, "q->dtype = %s, expected f32, f64, f16, bf16 or e4m3", fa_dtype_name(dt));
  if (!fp8) {
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
  CHECK(fa__need_sizes(c->q, "q", 4, err));
  CHECK(fa__need_sizes(c->k, "k", 4, err));
  CHECK(fa__need_sizes(c->v, "v", 4, err));
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
    CHECK(fa__need_shape(c->k, "k", 4, want_k, err));
    CHECK(fa__need_shape(c->v, "v", 4, want_v, err));
  }
  if (Hq % Hkv != 0)
    FAIL(FA_ERR_HEADS, "q has %lld heads, not a multiple of the %lld heads of k and v", (long long)Hq, (long long)Hkv);
  {
    const int64_t want_o[4] = {Bt, Hq, Lq, Dv};
    CHECK(fa__need_shape(c->o, "o", 4, want_o, err));
    if (has_lse) CHECK(fa__need_shape(c->lse, "lse", 3, want_o, err));
    if (bwd) {
      CHECK(fa__need_shape(c->dout, "dout", 4, want_o, err));
      CHECK(fa__need_shape(c->dq, "dq", 4, c->q->shape, err));
      CHECK(fa__need_shape(c->dk, "dk", 4, c->k->shape, err));
      CHECK(fa__need_shape(c->dv, "dv", 4, c->v->shape, err));
    }
  }
  CHECK(fa__sizes_fit(varlen ? o->num_seqs : Bt, Hq, Lq, Lk, D, Dv, err));

  /* memory space */
  fa_tensor q = *c->q, k = *c->k, v = *c->v, out = *c->o, lse, dout, dq, dk, dv, mask = o->mask, bias = o->bias, dbias;
  fa_tensor qd = o->q_descale, kd = o->k_descale, vd = o->v_descale; /* FP8 only (checked above) */
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
    CHECK(fa__need_tensor(c->dbias, "dbias", err));
    if (!has_bias) FAIL(FA_ERR_OPTION, "dbias is given but opt->bias is not");
    dbias = *c->dbias;
  }
  if (has_mask) CHECK(fa__need_tensor(&mask, "opt->mask", err));
  if (has_bias) CHECK(fa__need_tensor(&bias, "opt->bias", err));
  {
    fa_tensor *ts[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask, &bias, &dbias, &qd, &kd, &vd};
    const char *names[] = {"q",
                           "k",
                           "v",
                           "o",
                           "lse",
                           "dout",
                           "dq",
                           "dk",
                           "dv",
                           "opt->mask",
                           "opt->bias",
                           "dbias",
                           "opt->q_descale",
                           "opt->k_descale",
                           "opt->v_descale"};
    CHECK(fa__resolve_memory(ts, names, 15, &p->memory, err));
  }

  /* byte extents, before anything below (or a backend) steps along a stride */
  fa__extent outs[5], ins[16];
  int no = 0, ni = 0;
  CHECK(fa__extent_of(&q, "q", 4, &ins[ni++], err));
  CHECK(fa__extent_of(&k, "k", 4, &ins[ni++], err));
  CHECK(fa__extent_of(&v, "v", 4, &ins[ni++], err));
  if (bwd) {
    CHECK(fa__extent_of(&out, "o", 4, &ins[ni++], err));
    CHECK(fa__extent_of(&dout, "dout", 4, &ins[ni++], err));
    CHECK(fa__extent_of(&lse, "lse", 3, &ins[ni++], err));
    CHECK(fa__extent_of(&dq, "dq", 4, &outs[no++], err));
    CHECK(fa__extent_of(&dk, "dk", 4, &outs[no++], err));
    CHECK(fa__extent_of(&dv, "dv", 4, &outs[no++], err));
  } else {
    CHECK(fa__extent_of(&out, "o", 4, &outs[no++], err));
    if (has_lse) CHECK(fa__extent_of(&lse, "lse", 3, &outs[no++], err));
  }

  /* lengths */
  const fa__readback from = {p->memory, c->stream};
  int64_t B = Bt, maxq = Lq, maxk = Lk;
  if (varlen) {
    B = o->num_seqs;
    CHECK(fa__check_cu_seqlens(o->cu_seqlens_q, B, Lq, "opt->cu_seqlens_q", from, &maxq, err));
    CHECK(fa__check_cu_seqlens(o->cu_seqlens_k, B, Lk, "opt->cu_seqlens_k", from, &maxk, err));
  } else {
    if (o->seqlens_q) CHECK(fa__check_seqlens(o->seqlens_q, B, Lq, "opt->seqlens_q", from, err));
    if (o->seqlens_k) CHECK(fa__check_seqlens(o->seqlens_k, B, Lk, "opt->seqlens_k", from, err));
  }

  /* FP8 descales: [B, Hkv] with broadcasting */
  p->B = B;
  p->Hkv = Hkv;
  if (fp8) CHECK(fa__fp8_descales(p, &qd, &kd, &vd, ins, &ni, err));

  /* mask, bias, dbias: [B, Hq, Lq, Lk] with broadcasting */
  const int64_t logical[4] = {B, Hq, maxq, maxk};
  if (has_mask) {
    if (mask.dtype != FA_BOOL) FAIL(FA_ERR_DTYPE, "opt->mask->dtype = %s, expected bool", fa_dtype_name(mask.dtype));
    CHECK(fa__need_sizes(&mask, "opt->mask", 4, err));
    CHECK(fa__broadcastable(&mask, "opt->mask", logical, err));
    CHECK(fa__extent_of(&mask, "opt->mask", 4, &ins[ni++], err));
  }
  if (has_bias) {
    if (!fa__is_float_dtype(bias.dtype))
      FAIL(FA_ERR_DTYPE, "opt->bias->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(bias.dtype));
    CHECK(fa__need_sizes(&bias, "opt->bias", 4, err));
    CHECK(fa__broadcastable(&bias, "opt->bias", logical, err));
    CHECK(fa__extent_of(&bias, "opt->bias", 4, &ins[ni++], err));
  }
  if (want_dbias) {
    if (!fa__is_float_dtype(dbias.dtype))
      FAIL(FA_ERR_DTYPE, "dbias->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(dbias.dtype));
    CHECK(fa__need_shape(&dbias, "dbias", 4, o->bias.shape, err));
    CHECK(fa__extent_of(&dbias, "dbias", 4, &outs[no++], err));
    CHECK(fa__output_injective(&dbias, "dbias", 4, err));
    for (int d = 0; d < 4; ++d) /* summed dims: the backend accumulates into index 0 */
      if (dbias.shape[d] == 1) dbias.stride[d] = 0;
  }

  /* overlap: outputs must not alias inputs or each other */
  if (bwd) {
    CHECK(fa__output_injective(&dq, "dq", 4, err));
    CHECK(fa__output_injective(&dk, "dk", 4, err));
    CHECK(fa__output_injective(&dv, "dv", 4, err));
  } else {
    CHECK(fa__output_injective(&out, "o", 4, err));
    if (has_lse) CHECK(fa__output_injective(&lse, "lse", 3, err));
  }
  /* The backends read these arrays while they write the outputs: under an
   * output, the values checked above could change mid-call. */
  if (varlen) {
    ins[ni++] = fa__array_extent(o->cu_seqlens_q, (uint64_t)B + 1, 4, "opt->cu_seqlens_q");
    ins[ni++] = fa__array_extent(o->cu_seqlens_k, (uint64_t)B + 1, 4, "opt->cu_seqlens_k");
  } else {
    if (o->seqlens_q) ins[ni++] = fa__array_extent(o->seqlens_q, (uint64_t)B, 4, "opt->seqlens_q");
    if (o->seqlens_k) ins[ni++] = fa__array_extent(o->seqlens_k, (uint64_t)B, 4, "opt->seqlens_k");
  }
  if (o->alibi_slopes) ins[ni++] = fa__array_extent(o->alibi_slopes, (uint64_t)Hq, 4, "opt->alibi_slopes");
  CHECK(fa__no_overlap(outs, no, ins, ni, err));

  /* A size-1 dimension is never stepped along, so its stride is not
   * checked above, however hostile; the backends get 0 there, so that no
   * address is ever formed from it (a kernel that computes row pointers it
   * does not load from would otherwise overflow a pointer). lse's shape[3]
   * and stride[3] mean nothing. */
  {
    fa_tensor *const ts[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask, &bias, &dbias};
    fa__zero_unit_strides(ts, 12);
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
   * both to Lq + Lk + |q_offset - k_offset|, which every |diag(i) - j| stays
   * below (same result; the offsets are at most 2^60, fa__check_options). */
  const int64_t pos_shift = o->q_offset - o->k_offset;
  const int64_t far = maxq + maxk + (pos_shift < 0 ? -pos_shift : pos_shift);
  if (p->window_left > far) p->window_left = far;
  if (p->window_right > far) p->window_right = far;
  p->bottom_right = o->align == FA_ALIGN_BOTTOM_RIGHT;
  p->q_offset = o->q_offset;
  p->k_offset = o->k_offset;
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
