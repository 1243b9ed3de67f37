/* Bad input (DESIGN.md "Bad input", src/core/validate.c): every argument
 * error returns its own status and a message that names the argument, and
 * leaves every output byte untouched (poisoned outputs with guard bytes).
 * Each entry of the table below perturbs one thing of a call that is
 * otherwise valid (the first tests check that the unperturbed calls pass). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "support/cm.h"
#include "support/device.h"
#include "support/tensor.h"

enum { B = 2, HQ = 4, HKV = 2, LQ = 5, LK = 7, D = 8, DV = 6 };

/* The buffers, shared by every call (only their fa_tensor copies change). */
static tbuf g_q, g_k, g_v, g_o, g_lse, g_oin, g_lsein, g_dout, g_dq, g_dk, g_dv, g_bias, g_dbias, g_mask;
static const int32_t g_cu_q[] = {0, 2, 5}, g_cu_k[] = {0, 3, 7};

typedef struct call {
  fa_context *ctx;
  fa_backend backend;
  fa_tensor q, k, v, o, lse, dout, dq, dk, dv, dbias;
  fa_tensor *pq, *pk, *pv, *po, *plse, *pdout, *pdq, *pdk, *pdv, *pdbias;
  fa_options opt;
  int32_t cu_q[3], cu_k[3], sq[2], sk[2];
} call;

static void call_init(call *c, int backward, fa_context *ctx) {
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->backend = FA_BACKEND_REF;
  c->q = g_q.t, c->k = g_k.t, c->v = g_v.t, c->dout = g_dout.t;
  c->o = backward ? g_oin.t : g_o.t;
  c->lse = backward ? g_lsein.t : g_lse.t;
  c->dq = g_dq.t, c->dk = g_dk.t, c->dv = g_dv.t, c->dbias = g_dbias.t;
  c->pq = &c->q, c->pk = &c->k, c->pv = &c->v, c->po = &c->o, c->plse = &c->lse, c->pdout = &c->dout;
  c->pdq = &c->dq, c->pdk = &c->dk, c->pdv = &c->dv, c->pdbias = &c->dbias;
  fa_options_init(&c->opt);
  c->opt.causal = 1;
  c->opt.mask = g_mask.t;
  c->opt.bias = g_bias.t;
  memcpy(c->cu_q, g_cu_q, sizeof c->cu_q);
  memcpy(c->cu_k, g_cu_k, sizeof c->cu_k);
  c->sq[0] = 5, c->sq[1] = 3, c->sk[0] = 7, c->sk[1] = 2;
}

/* The packed layout: a batch of one holding two sequences (views of batch 0). */
static void to_varlen(call *c) {
  fa_tensor *ts[] = {&c->q, &c->k, &c->v, &c->o, &c->lse, &c->dout, &c->dq, &c->dk, &c->dv};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) ts[i]->shape[0] = 1;
  c->opt.mask.data = NULL, c->opt.bias.data = NULL, c->pdbias = NULL;
  c->opt.cu_seqlens_q = c->cu_q, c->opt.cu_seqlens_k = c->cu_k, c->opt.num_seqs = 2;
}

static fa_status run(call *c, int backward) {
  if (backward)
    return fa_backward(c->ctx, c->backend, c->pq, c->pk, c->pv, c->po, c->pdout, c->plse, &c->opt, c->pdq, c->pdk,
                       c->pdv, c->pdbias);
  return fa_forward(c->ctx, c->backend, c->pq, c->pk, c->pv, &c->opt, c->po, c->plse);
}

static void poison_outputs(void) {
  tbuf *outs[] = {&g_o, &g_lse, &g_dq, &g_dk, &g_dv, &g_dbias};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; ++i) tb_poison(outs[i]);
}

/* No output byte written, no guard touched (inputs included). */
static void expect_untouched(const char *what) {
  tbuf *outs[] = {&g_o, &g_lse, &g_dq, &g_dk, &g_dv, &g_dbias};
  const char *names[] = {"o", "lse", "dq", "dk", "dv", "dbias"};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; ++i)
    if (!tb_all_poison(outs[i]) || !tb_guards_ok(outs[i]))
      fail_msg("%s: output %s was written on error", what, names[i]);
  tbuf *ins[] = {&g_q, &g_k, &g_v, &g_oin, &g_lsein, &g_dout, &g_bias, &g_mask};
  for (size_t i = 0; i < sizeof ins / sizeof ins[0]; ++i)
    if (!tb_guards_ok(ins[i])) fail_msg("%s: a guard next to an input was written", what);
}

/* Does msg name arg as a word (so "q" is not found in "dq" or "seqlens_q")? */
static int names_arg(const char *msg, const char *arg) {
  const size_t n = strlen(arg);
  for (const char *p = strstr(msg, arg); p; p = strstr(p + 1, arg)) {
    const int before_ok = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    const int after_ok = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (before_ok && after_ok) return 1;
  }
  return 0;
}

/* ---- the table ---------------------------------------------------------------- */

typedef struct bad {
  const char *name;
  int backward;
  void (*perturb)(call *c);
  fa_status want;
  const char *arg; /* a word the message must contain; NULL when ctx is NULL */
} bad;

#define P(fn, body)         \
  static void fn(call *c) { \
    body;                   \
  }

/* NULL pointers */
P(q_null, c->pq = NULL)
P(k_null, c->pk = NULL)
P(v_null, c->pv = NULL)
P(o_null, c->po = NULL)
P(q_data_null, c->q.data = NULL)
P(v_data_null, c->v.data = NULL)
P(o_data_null, c->o.data = NULL)
P(dout_null, c->pdout = NULL)
P(lse_null, c->plse = NULL)
P(lse_data_null, c->lse.data = NULL)
P(dq_null, c->pdq = NULL)
P(dk_null, c->pdk = NULL)
P(dv_null, c->pdv = NULL)
P(dq_data_null, c->dq.data = NULL)
P(ctx_null, c->ctx = NULL)
P(cu_k_missing, to_varlen(c); c->opt.cu_seqlens_k = NULL)
/* sizes */
P(q_len_zero, c->q.shape[2] = 0)
P(k_dim_negative, c->k.shape[3] = -1)
P(v_batch_zero, c->v.shape[0] = 0)
P(num_seqs_zero, to_varlen(c); c->opt.num_seqs = 0)
P(mask_size_zero, c->opt.mask.shape[3] = 0)
P(bias_size_negative, c->opt.bias.shape[2] = -5)
P(num_seqs_huge, to_varlen(c); c->opt.num_seqs = INT64_MAX)
/* zero-size problems, every tensor shaped consistently: refused, not a no-op */
static void set_dim(call *c, const char *which, int d, int64_t n) {
  fa_tensor *ts[] = {&c->q, &c->k, &c->v, &c->o, &c->lse, &c->dout, &c->dq, &c->dk, &c->dv};
  const char *roles = "qkvolOQKV"; /* O = dout, Q/K/V = gradients */
  for (int i = 0; i < 9; ++i)
    if (strchr(which, roles[i])) ts[i]->shape[d] = n;
}
P(zero_batch, set_dim(c, "qkvolOQKV", 0, 0); c->opt.mask.data = NULL; c->opt.bias.data = NULL; c->pdbias = NULL)
P(zero_heads, set_dim(c, "qolOQ", 1, 0); c->opt.mask.data = NULL; c->opt.bias.data = NULL; c->pdbias = NULL)
P(zero_lq, set_dim(c, "qolOQ", 2, 0); c->opt.mask.data = NULL; c->opt.bias.data = NULL; c->pdbias = NULL)
P(zero_lk, set_dim(c, "kvKV", 2, 0); c->opt.mask.data = NULL; c->opt.bias.data = NULL; c->pdbias = NULL)
P(zero_d, set_dim(c, "qkQK", 3, 0))
P(zero_dv, set_dim(c, "voOV", 3, 0))
/* hostile strides and sizes: byte extents that overflow int64 or wrap the
 * address space are refused before anything steps along them (issue 12) */
#define E(x) ((int64_t)1 << (x))
P(o_stride_2e61, c->o.stride[1] = E(61))
P(o_stride_2e62, c->o.stride[1] = E(62))
P(o_stride_neg_2e62, c->o.stride[2] = -E(62))
P(o_stride_int64_min, c->o.stride[3] = INT64_MIN)
P(o_below_zero, c->o.stride[0] = -E(58)) /* 2^60 bytes below a heap pointer: past address 0 */
P(o_sum_overflows, c->o.stride[0] = E(60); c->o.stride[1] = E(60) / 2)
P(q_stride_2e62, c->q.stride[2] = E(62))
P(k_stride_neg_2e61, c->k.stride[1] = -E(61))
P(v_stride_int64_max, c->v.stride[2] = INT64_MAX)
P(q_data_at_top, c->q.data = (void *)(UINTPTR_MAX - 64)) /* never dereferenced: refused first */
P(k_below_zero, c->k.stride[2] = -E(57))
P(mask_stride_2e62, c->opt.mask.stride[3] = E(62))
P(mask_below_zero, c->opt.mask.stride[0] = -E(60))
P(bias_stride_int64_max, c->opt.bias.stride[2] = INT64_MAX)
P(bias_stride_neg_2e61, c->opt.bias.stride[1] = -E(61))
P(lse_stride_2e62, c->lse.stride[2] = E(62))
P(lse_in_stride_neg_2e62, c->lse.stride[1] = -E(62))
P(dout_stride_2e61, c->dout.stride[3] = E(61))
P(dq_stride_int64_min, c->dq.stride[0] = INT64_MIN)
P(dk_stride_2e62, c->dk.stride[2] = E(62))
P(dv_stride_neg_2e61, c->dv.stride[1] = -E(61))
P(dbias_stride_2e61, c->dbias.stride[1] = E(61))
P(dbias_data_at_top, c->dbias.data = (void *)(UINTPTR_MAX - 16))
/* sizes whose product no backend could index: broadcast inputs (stride 0)
 * describe them with no memory at all */
static void huge_keys(call *c, int64_t n) {
  c->k.shape[2] = c->v.shape[2] = c->dk.shape[2] = c->dv.shape[2] = n;
  c->k.stride[0] = c->k.stride[1] = c->k.stride[2] = 0;
  c->v.stride[0] = c->v.stride[1] = c->v.stride[2] = 0;
  c->opt.mask.data = NULL, c->opt.bias.data = NULL, c->pdbias = NULL;
}
P(k_len_int64_max, huge_keys(c, INT64_MAX))
P(k_len_2e58, huge_keys(c, E(58)))
P(q_heads_huge, c->q.shape[1] = c->o.shape[1] = c->lse.shape[1] = E(62); c->q.stride[1] = 0; c->opt.mask.data = NULL;
  c->opt.bias.data = NULL)
P(q_len_huge, c->q.shape[2] = c->o.shape[2] = c->lse.shape[2] = E(58); c->q.stride[2] = 0; c->opt.mask.data = NULL;
  c->opt.bias.data = NULL)
/* misaligned data (found by the fuzzer: a float stored at an odd address
 * is undefined behaviour, UBSan stopped in the cpu forward) */
P(o_misaligned, c->o.data = (char *)c->o.data + 1)
P(q_misaligned, c->q.data = (char *)c->q.data + 2)
P(dk_misaligned, c->dk.data = (char *)c->dk.data + 3)
P(bias_misaligned, c->opt.bias.data = (char *)c->opt.bias.data + 1)
P(seqlens_k_misaligned, c->opt.seqlens_k = (const int32_t *)(const void *)((const char *)c->sk + 1))
#undef E
/* shapes that disagree */
P(k_headdim, c->k.shape[3] = D + 1)
P(k_batch, c->k.shape[0] = B + 1)
P(v_len, c->v.shape[2] = LK - 1)
P(o_headdim, c->o.shape[3] = DV + 1)
P(o_heads, c->o.shape[1] = HQ * 2)
P(lse_len, c->lse.shape[2] = LQ + 1)
P(dout_len, c->dout.shape[2] = LQ - 1)
P(dq_headdim, c->dq.shape[3] = D - 1)
P(dk_len, c->dk.shape[2] = LK + 2)
P(dv_headdim, c->dv.shape[3] = DV + 2)
P(mask_shape, c->opt.mask.shape[3] = LK + 1)
P(bias_shape, c->opt.bias.shape[1] = 3)
P(dbias_shape, c->dbias.shape[2] = 1)
P(varlen_batch, to_varlen(c); c->q.shape[0] = 2)
/* heads */
P(heads_not_multiple, c->q.shape[1] = 3)
/* dtypes */
P(q_bool, c->q.dtype = FA_BOOL)
P(q_not_a_dtype, c->q.dtype = (fa_dtype)42)
P(k_f64, c->k.dtype = FA_F64)
P(v_f16, c->v.dtype = FA_F16)
P(o_bf16, c->o.dtype = FA_BF16)
P(dout_f64, c->dout.dtype = FA_F64)
P(dq_f16, c->dq.dtype = FA_F16)
P(dk_f64, c->dk.dtype = FA_F64)
P(dv_bf16, c->dv.dtype = FA_BF16)
P(lse_f16, c->lse.dtype = FA_F16)
P(mask_f32, c->opt.mask.dtype = FA_F32)
P(bias_bool, c->opt.bias.dtype = FA_BOOL)
P(dbias_bool, c->dbias.dtype = FA_BOOL)
/* dropout_p outside [0, 1) */
P(dropout_negative, c->opt.dropout_p = -0.1)
P(dropout_one, c->opt.dropout_p = 1.0)
P(dropout_nan, c->opt.dropout_p = NAN)
P(dropout_big, c->opt.dropout_p = 1.5)
P(dropout_inf, c->opt.dropout_p = INFINITY)
/* other options */
P(scale_nan, c->opt.scale = NAN)
P(scale_inf, c->opt.scale = -INFINITY)
P(softcap_negative, c->opt.softcap = -1.0)
P(softcap_nan, c->opt.softcap = NAN)
P(align_bad, c->opt.align = (fa_align)5)
P(q_offset_negative, c->opt.q_offset = -1)
P(k_offset_negative, c->opt.k_offset = INT64_MIN)
P(q_offset_huge, c->opt.q_offset = ((int64_t)1 << 60) + 1)
P(k_offset_int64_max, c->opt.k_offset = INT64_MAX)
P(block_q_negative, c->opt.block_q = -1)
P(block_k_negative, c->opt.block_k = -16)
P(memory_bad, c->k.memory = (fa_memory)9)
P(dbias_without_bias, c->opt.bias.data = NULL)
P(seqlens_and_cu, to_varlen(c); c->opt.seqlens_q = c->sq)
P(backend_bad, c->backend = (fa_backend)42)
P(backend_negative, c->backend = (fa_backend)-1)
P(backend_count, c->backend = FA_BACKEND_COUNT)
/* sequence lengths */
P(seqlens_q_too_long, c->sq[1] = LQ + 1; c->opt.seqlens_q = c->sq)
P(seqlens_k_negative, c->sk[0] = -1; c->opt.seqlens_k = c->sk)
P(cu_q_not_from_zero, to_varlen(c); c->cu_q[0] = 1)
P(cu_k_decreasing, to_varlen(c); c->cu_k[1] = 6; c->cu_k[2] = 4)
P(cu_q_past_end, to_varlen(c); c->cu_q[2] = LQ + 1)
/* overlap */
P(o_is_q, c->o.data = c->q.data)
P(o_tail_on_q, c->o.data = (char *)g_q.t.data + g_q.span - 4 - (g_o.span - 4))
P(lse_on_o, c->lse.data = c->o.data)
/* arrays the backends read while they write: not under an output */
P(alibi_in_o, c->opt.alibi_slopes = (const float *)c->o.data)
P(alibi_in_dk, c->opt.alibi_slopes = (const float *)c->dk.data)
P(o_stride0, c->o.stride[3] = 0)
P(o_rows_overlap, c->o.stride[2] = 1)
P(lse_stride0, c->lse.stride[2] = 0)
P(dv_on_dout, c->dv.data = c->dout.data) /* dv is the smaller: only dout is under it */
P(dk_is_k, c->dk.data = c->k.data)
P(dv_on_dk, c->dv.data = c->dk.data)
P(dbias_is_bias, c->dbias.data = c->opt.bias.data)
P(dq_stride0, c->dq.stride[1] = 0)
P(dk_on_lse, c->dk.data = c->lse.data)
/* memory */
P(mixed_memory, c->q.memory = FA_MEMORY_HOST; c->k.memory = FA_MEMORY_CUDA)

#define F 0
#define BW 1
static const bad g_bad[] = {
    {"q NULL", F, q_null, FA_ERR_NULL_POINTER, "q"},
    {"k NULL", F, k_null, FA_ERR_NULL_POINTER, "k"},
    {"v NULL", F, v_null, FA_ERR_NULL_POINTER, "v"},
    {"o NULL", F, o_null, FA_ERR_NULL_POINTER, "o"},
    {"q->data NULL", F, q_data_null, FA_ERR_NULL_POINTER, "q"},
    {"v->data NULL (backward)", BW, v_data_null, FA_ERR_NULL_POINTER, "v"},
    {"o->data NULL", F, o_data_null, FA_ERR_NULL_POINTER, "o"},
    {"o NULL (backward)", BW, o_null, FA_ERR_NULL_POINTER, "o"},
    {"dout NULL", BW, dout_null, FA_ERR_NULL_POINTER, "dout"},
    {"lse NULL (backward)", BW, lse_null, FA_ERR_NULL_POINTER, "lse"},
    {"lse->data NULL (backward)", BW, lse_data_null, FA_ERR_NULL_POINTER, "lse"},
    {"dq NULL", BW, dq_null, FA_ERR_NULL_POINTER, "dq"},
    {"dk NULL", BW, dk_null, FA_ERR_NULL_POINTER, "dk"},
    {"dv NULL", BW, dv_null, FA_ERR_NULL_POINTER, "dv"},
    {"dq->data NULL", BW, dq_data_null, FA_ERR_NULL_POINTER, "dq"},
    {"ctx NULL", F, ctx_null, FA_ERR_NULL_POINTER, NULL},
    {"ctx NULL (backward)", BW, ctx_null, FA_ERR_NULL_POINTER, NULL},
    {"cu_seqlens_k missing", F, cu_k_missing, FA_ERR_NULL_POINTER, "cu_seqlens_k"},
    {"q length 0", F, q_len_zero, FA_ERR_BAD_SIZE, "q"},
    {"k head dim -1", F, k_dim_negative, FA_ERR_BAD_SIZE, "k"},
    {"v batch 0", F, v_batch_zero, FA_ERR_BAD_SIZE, "v"},
    {"num_seqs 0", F, num_seqs_zero, FA_ERR_BAD_SIZE, "num_seqs"},
    {"mask size 0", F, mask_size_zero, FA_ERR_BAD_SIZE, "mask"},
    {"bias size -5", F, bias_size_negative, FA_ERR_BAD_SIZE, "bias"},
    {"num_seqs INT64_MAX", F, num_seqs_huge, FA_ERR_BAD_SIZE, "num_seqs"},
    {"B = 0 everywhere", F, zero_batch, FA_ERR_BAD_SIZE, "q"},
    {"B = 0 everywhere (backward)", BW, zero_batch, FA_ERR_BAD_SIZE, "q"},
    {"H = 0", F, zero_heads, FA_ERR_BAD_SIZE, "q"},
    {"H = 0 (backward)", BW, zero_heads, FA_ERR_BAD_SIZE, "q"},
    {"Lq = 0", F, zero_lq, FA_ERR_BAD_SIZE, "q"},
    {"Lq = 0 (backward)", BW, zero_lq, FA_ERR_BAD_SIZE, "q"},
    {"Lk = 0", F, zero_lk, FA_ERR_BAD_SIZE, "k"},
    {"Lk = 0 (backward)", BW, zero_lk, FA_ERR_BAD_SIZE, "k"},
    {"D = 0", F, zero_d, FA_ERR_BAD_SIZE, "q"},
    {"Dv = 0", F, zero_dv, FA_ERR_BAD_SIZE, "v"},
    {"Dv = 0 (backward)", BW, zero_dv, FA_ERR_BAD_SIZE, "v"},
    {"k head dim != q's", F, k_headdim, FA_ERR_SHAPE, "k"},
    {"k batch != q's", F, k_batch, FA_ERR_SHAPE, "k"},
    {"v length != k's", F, v_len, FA_ERR_SHAPE, "v"},
    {"o head dim != v's", F, o_headdim, FA_ERR_SHAPE, "o"},
    {"o heads != q's", F, o_heads, FA_ERR_SHAPE, "o"},
    {"lse length != q's", F, lse_len, FA_ERR_SHAPE, "lse"},
    {"dout length", BW, dout_len, FA_ERR_SHAPE, "dout"},
    {"dq head dim", BW, dq_headdim, FA_ERR_SHAPE, "dq"},
    {"dk length", BW, dk_len, FA_ERR_SHAPE, "dk"},
    {"dv head dim", BW, dv_headdim, FA_ERR_SHAPE, "dv"},
    {"mask shape", F, mask_shape, FA_ERR_SHAPE, "mask"},
    {"bias shape", F, bias_shape, FA_ERR_SHAPE, "bias"},
    {"dbias shape != bias's", BW, dbias_shape, FA_ERR_SHAPE, "dbias"},
    {"packed layout with batch 2", F, varlen_batch, FA_ERR_SHAPE, "q"},
    {"Hq not a multiple of Hkv", F, heads_not_multiple, FA_ERR_HEADS, "q"},
    {"o stride[1] = 2^61", F, o_stride_2e61, FA_ERR_SHAPE, "o"},
    {"o stride[1] = 2^62", F, o_stride_2e62, FA_ERR_SHAPE, "o"},
    {"o stride[2] = -2^62", F, o_stride_neg_2e62, FA_ERR_SHAPE, "o"},
    {"o stride[3] = INT64_MIN", F, o_stride_int64_min, FA_ERR_SHAPE, "o"},
    {"o stride[0] = -2^58 (below address 0)", F, o_below_zero, FA_ERR_SHAPE, "o"},
    {"o strides 2^60, 2^59 (the sum overflows)", F, o_sum_overflows, FA_ERR_SHAPE, "o"},
    {"o stride[1] = 2^61 (backward input)", BW, o_stride_2e61, FA_ERR_SHAPE, "o"},
    {"q stride[2] = 2^62", F, q_stride_2e62, FA_ERR_SHAPE, "q"},
    {"q stride[2] = 2^62 (backward)", BW, q_stride_2e62, FA_ERR_SHAPE, "q"},
    {"k stride[1] = -2^61", F, k_stride_neg_2e61, FA_ERR_SHAPE, "k"},
    {"k stride[2] = -2^57 (below address 0)", F, k_below_zero, FA_ERR_SHAPE, "k"},
    {"v stride[2] = INT64_MAX", F, v_stride_int64_max, FA_ERR_SHAPE, "v"},
    {"q data 64 bytes before the last address", F, q_data_at_top, FA_ERR_SHAPE, "q"},
    {"mask stride[3] = 2^62", F, mask_stride_2e62, FA_ERR_SHAPE, "mask"},
    {"mask stride[0] = -2^60 (below address 0)", F, mask_below_zero, FA_ERR_SHAPE, "mask"},
    {"bias stride[2] = INT64_MAX", F, bias_stride_int64_max, FA_ERR_SHAPE, "bias"},
    {"bias stride[1] = -2^61 (backward)", BW, bias_stride_neg_2e61, FA_ERR_SHAPE, "bias"},
    {"lse stride[2] = 2^62", F, lse_stride_2e62, FA_ERR_SHAPE, "lse"},
    {"lse stride[1] = -2^62 (backward input)", BW, lse_in_stride_neg_2e62, FA_ERR_SHAPE, "lse"},
    {"dout stride[3] = 2^61", BW, dout_stride_2e61, FA_ERR_SHAPE, "dout"},
    {"dq stride[0] = INT64_MIN", BW, dq_stride_int64_min, FA_ERR_SHAPE, "dq"},
    {"dk stride[2] = 2^62", BW, dk_stride_2e62, FA_ERR_SHAPE, "dk"},
    {"dv stride[1] = -2^61", BW, dv_stride_neg_2e61, FA_ERR_SHAPE, "dv"},
    {"dbias stride[1] = 2^61", BW, dbias_stride_2e61, FA_ERR_SHAPE, "dbias"},
    {"dbias data 16 bytes before the last address", BW, dbias_data_at_top, FA_ERR_SHAPE, "dbias"},
    {"Lk = INT64_MAX, k and v broadcast", F, k_len_int64_max, FA_ERR_SHAPE, "k"},
    {"Lk = 2^58, k and v broadcast (backward)", BW, k_len_2e58, FA_ERR_SHAPE, "k"},
    {"Hq = 2^62, q broadcast", F, q_heads_huge, FA_ERR_SHAPE, "q"},
    {"Lq = 2^58, q broadcast", F, q_len_huge, FA_ERR_SHAPE, "q"},
    {"o data misaligned by 1 byte", F, o_misaligned, FA_ERR_SHAPE, "o"},
    {"q data misaligned by 2 bytes", F, q_misaligned, FA_ERR_SHAPE, "q"},
    {"dk data misaligned by 3 bytes", BW, dk_misaligned, FA_ERR_SHAPE, "dk"},
    {"bias data misaligned", F, bias_misaligned, FA_ERR_SHAPE, "bias"},
    {"seqlens_k misaligned", F, seqlens_k_misaligned, FA_ERR_OPTION, "seqlens_k"},
    {"q bool", F, q_bool, FA_ERR_DTYPE, "q"},
    {"q dtype 42", F, q_not_a_dtype, FA_ERR_DTYPE, "q"},
    {"k f64 vs q f32", F, k_f64, FA_ERR_DTYPE, "k"},
    {"v f16 vs q f32", F, v_f16, FA_ERR_DTYPE, "v"},
    {"o bf16 vs q f32", F, o_bf16, FA_ERR_DTYPE, "o"},
    {"dout f64", BW, dout_f64, FA_ERR_DTYPE, "dout"},
    {"dq f16", BW, dq_f16, FA_ERR_DTYPE, "dq"},
    {"dk f64", BW, dk_f64, FA_ERR_DTYPE, "dk"},
    {"dv bf16", BW, dv_bf16, FA_ERR_DTYPE, "dv"},
    {"lse f16", F, lse_f16, FA_ERR_DTYPE, "lse"},
    {"mask f32", F, mask_f32, FA_ERR_DTYPE, "mask"},
    {"bias bool", F, bias_bool, FA_ERR_DTYPE, "bias"},
    {"dbias bool", BW, dbias_bool, FA_ERR_DTYPE, "dbias"},
    {"dropout_p -0.1", F, dropout_negative, FA_ERR_DROPOUT, "dropout_p"},
    {"dropout_p 1.0", F, dropout_one, FA_ERR_DROPOUT, "dropout_p"},
    {"dropout_p NaN", F, dropout_nan, FA_ERR_DROPOUT, "dropout_p"},
    {"dropout_p 1.5", F, dropout_big, FA_ERR_DROPOUT, "dropout_p"},
    {"dropout_p inf", F, dropout_inf, FA_ERR_DROPOUT, "dropout_p"},
    {"dropout_p 1.0 (backward)", BW, dropout_one, FA_ERR_DROPOUT, "dropout_p"},
    {"scale NaN", F, scale_nan, FA_ERR_OPTION, "scale"},
    {"scale -inf", F, scale_inf, FA_ERR_OPTION, "scale"},
    {"softcap -1", F, softcap_negative, FA_ERR_OPTION, "softcap"},
    {"softcap NaN", F, softcap_nan, FA_ERR_OPTION, "softcap"},
    {"align 5", F, align_bad, FA_ERR_OPTION, "align"},
    {"q_offset -1", F, q_offset_negative, FA_ERR_OPTION, "q_offset"},
    {"k_offset INT64_MIN (backward)", BW, k_offset_negative, FA_ERR_OPTION, "k_offset"},
    {"q_offset 2^60 + 1", F, q_offset_huge, FA_ERR_OPTION, "q_offset"},
    {"k_offset INT64_MAX", F, k_offset_int64_max, FA_ERR_OPTION, "k_offset"},
    {"block_q -1", F, block_q_negative, FA_ERR_OPTION, "block_q"},
    {"block_k -16", F, block_k_negative, FA_ERR_OPTION, "block_k"},
    {"k->memory 9", F, memory_bad, FA_ERR_OPTION, "k"},
    {"dbias without bias", BW, dbias_without_bias, FA_ERR_OPTION, "dbias"},
    {"seqlens and cu_seqlens", F, seqlens_and_cu, FA_ERR_OPTION, "cu_seqlens_q"},
    {"backend 42", F, backend_bad, FA_ERR_OPTION, "backend"},
    {"backend -1", F, backend_negative, FA_ERR_OPTION, "backend"},
    {"backend FA_BACKEND_COUNT (backward)", BW, backend_count, FA_ERR_OPTION, "backend"},
    {"seqlens_q > Lq", F, seqlens_q_too_long, FA_ERR_SEQLENS, "seqlens_q"},
    {"seqlens_k -1", F, seqlens_k_negative, FA_ERR_SEQLENS, "seqlens_k"},
    {"seqlens_k -1 (backward)", BW, seqlens_k_negative, FA_ERR_SEQLENS, "seqlens_k"},
    {"cu_seqlens_q[0] != 0", F, cu_q_not_from_zero, FA_ERR_SEQLENS, "cu_seqlens_q"},
    {"cu_seqlens_k decreasing", F, cu_k_decreasing, FA_ERR_SEQLENS, "cu_seqlens_k"},
    {"cu_seqlens_q past the end", F, cu_q_past_end, FA_ERR_SEQLENS, "cu_seqlens_q"},
    {"o is q", F, o_is_q, FA_ERR_OVERLAP, "o"},
    {"o's last element on q's", F, o_tail_on_q, FA_ERR_OVERLAP, "q"},
    {"lse on o", F, lse_on_o, FA_ERR_OVERLAP, "lse"},
    {"alibi_slopes inside o", F, alibi_in_o, FA_ERR_OVERLAP, "opt->alibi_slopes"},
    {"alibi_slopes inside dk (backward)", BW, alibi_in_dk, FA_ERR_OVERLAP, "opt->alibi_slopes"},
    {"o stride[3] = 0", F, o_stride0, FA_ERR_OVERLAP, "o"},
    {"o rows overlap (stride[2] = 1)", F, o_rows_overlap, FA_ERR_OVERLAP, "o"},
    {"lse stride[2] = 0", F, lse_stride0, FA_ERR_OVERLAP, "lse"},
    {"dv on dout", BW, dv_on_dout, FA_ERR_OVERLAP, "dout"},
    {"dk is k", BW, dk_is_k, FA_ERR_OVERLAP, "dk"},
    {"dv on dk", BW, dv_on_dk, FA_ERR_OVERLAP, "dv"},
    {"dbias is bias", BW, dbias_is_bias, FA_ERR_OVERLAP, "dbias"},
    {"dq stride[1] = 0", BW, dq_stride0, FA_ERR_OVERLAP, "dq"},
    {"dk on lse", BW, dk_on_lse, FA_ERR_OVERLAP, "dk"}, /* dk is larger than lse: names the output */
    {"k in CUDA memory, q in host memory", F, mixed_memory, FA_ERR_MEMORY_SPACE, "k"},
};
#undef F
#undef BW

/* Each entry on ref and on cpu (when built): validation runs before any
 * backend, so the named backend must not change the answer. */
static void test_bad(void **state) {
  const bad *b = (const bad *)*state;
  const fa_backend backends[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (int i = 0; i < 2; ++i) {
    if (fa_backend_available(backends[i], NULL, 0) != FA_OK) continue;
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    call c;
    call_init(&c, b->backward, ctx);
    c.backend = backends[i];
    b->perturb(&c);
    poison_outputs();
    const fa_status st = run(&c, b->backward);
    const char *msg = fa_context_last_error(ctx);
    const char *on = fa_backend_name(backends[i]);
    if (st != b->want)
      fail_msg("%s on %s: returned %s, expected %s (message: \"%s\")", b->name, on, fa_status_name(st),
               fa_status_name(b->want), c.ctx ? msg : "");
    if (b->arg) {
      if (!msg[0]) fail_msg("%s on %s: empty message", b->name, on);
      if (!names_arg(msg, b->arg)) fail_msg("%s on %s: message \"%s\" does not name %s", b->name, on, msg, b->arg);
      if (!strstr(msg, fa_status_name(b->want)))
        fail_msg("%s on %s: message \"%s\" does not say its status", b->name, on, msg);
      assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_AUTO);
    }
    expect_untouched(b->name);
    fa_context_destroy(ctx);
  }
}

/* The unperturbed calls are valid, so each failure above has one cause. */
static void test_baseline_valid(void **state) {
  (void)state;
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  for (int varlen = 0; varlen < 2; ++varlen)
    for (int bw = 0; bw < 2; ++bw) {
      call c;
      call_init(&c, bw, ctx);
      if (varlen) to_varlen(&c);
      poison_outputs();
      const fa_status st = run(&c, bw);
      if (st != FA_OK)
        fail_msg("baseline %s%s: %s", bw ? "backward" : "forward", varlen ? " (packed)" : "",
                 fa_context_last_error(ctx));
      assert_string_equal(fa_context_last_error(ctx), "");
    }
  /* seqlens in range, and the extremes 0 and L, are fine */
  call c;
  call_init(&c, 0, ctx);
  c.sq[0] = 0, c.sq[1] = LQ, c.sk[0] = LK, c.sk[1] = 0;
  c.opt.seqlens_q = c.sq, c.opt.seqlens_k = c.sk;
  assert_int_equal(run(&c, 0), FA_OK);
  fa_context_destroy(ctx);
}

/* Issue 12's two calls as filed: an f32 o [1, 2, 8, 8] with stride[1] = 2^61
 * (accepted, then written through a wrapped pointer) and 2^62 (accepted,
 * head 1 written over head 0). Both are refused now, on ref and cpu, and no
 * byte of o changes. */
static void test_issue12_hostile_o_stride(void **state) {
  (void)state;
  const int64_t shape[4] = {1, 2, 8, 8};
  tbuf q, k, v, o;
  tbuf *all[] = {&q, &k, &v, &o};
  for (int i = 0; i < 4; ++i) tb_alloc(all[i], FA_F32, shape, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  for (int i = 0; i < 3; ++i) memset(tb_view(all[i]), 0, all[i]->span);
  const fa_backend backends[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  const int64_t strides[] = {(int64_t)1 << 61, (int64_t)1 << 62};
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  for (int b = 0; b < 2; ++b) {
    if (fa_backend_available(backends[b], NULL, 0) != FA_OK) continue;
    for (int s = 0; s < 2; ++s) {
      fa_tensor ot = o.t;
      ot.stride[1] = strides[s];
      tb_poison(&o);
      const fa_status st = fa_forward(ctx, backends[b], &q.t, &k.t, &v.t, NULL, &ot, NULL);
      if (st != FA_ERR_SHAPE)
        fail_msg("o stride[1] = %lld on %s: %s, expected FA_ERR_SHAPE", (long long)strides[s],
                 fa_backend_name(backends[b]), fa_status_name(st));
      const char *msg = fa_context_last_error(ctx);
      assert_true(names_arg(msg, "o") && strstr(msg, "stride[1]") && strstr(msg, "overflows"));
      assert_true(tb_all_poison(&o) && tb_guards_ok(&o));
    }
    /* and the same tensors with o's own strides are fine */
    assert_int_equal(fa_forward(ctx, backends[b], &q.t, &k.t, &v.t, NULL, &o.t, NULL), FA_OK);
  }
  fa_context_destroy(ctx);
  for (int i = 0; i < 4; ++i) tb_free(all[i]);
}

/* Strides that are never stepped along are free, however hostile: those of
 * size-1 (broadcast) dims and lse's ignored stride[3]. */
static void test_free_strides_accepted(void **state) {
  (void)state;
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  for (int bw = 0; bw < 2; ++bw) {
    call c;
    call_init(&c, bw, ctx);
    c.lse.stride[3] = INT64_MIN;
    c.opt.bias.shape[0] = 1, c.opt.bias.stride[0] = INT64_MAX;
    c.opt.mask.shape[1] = 1, c.opt.mask.stride[1] = INT64_MIN;
    c.dbias.shape[0] = 1, c.dbias.stride[0] = -((int64_t)1 << 62);
    for (int b = FA_BACKEND_REF; b <= FA_BACKEND_CPU; ++b) {
      if (fa_backend_available((fa_backend)b, NULL, 0) != FA_OK) continue;
      c.backend = (fa_backend)b;
      poison_outputs();
      const fa_status st = run(&c, bw);
      if (st != FA_OK)
        fail_msg("%s on %s: %s", bw ? "backward" : "forward", fa_backend_name(c.backend), fa_context_last_error(ctx));
    }
  }
  fa_context_destroy(ctx);
}

/* Valid calls the fuzzer broke (each was a sanitizer report before its
 * fix), on ref and cpu: window edges near INT64_MAX (diag(i) + right
 * overflowed; now the same as an unbounded window), tile sizes of INT_MAX
 * (the cpu plan padded them past INT_MAX), and a head dimension of 1 whose
 * never-used stride is 2^62 (the cpu micro-kernel formed row pointers
 * from it). */
static void test_fuzzer_findings_valid(void **state) {
  (void)state;
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  for (int bw = 0; bw < 2; ++bw)
    for (int b = FA_BACKEND_REF; b <= FA_BACKEND_CPU; ++b) {
      if (fa_backend_available((fa_backend)b, NULL, 0) != FA_OK) continue;
      for (int v = 0; v < 3; ++v) {
        call c;
        call_init(&c, bw, ctx);
        c.backend = (fa_backend)b;
        if (v == 0) {
          c.opt.use_window = 1, c.opt.window_left = INT64_MAX, c.opt.window_right = INT64_MAX - 1;
          c.opt.align = FA_ALIGN_BOTTOM_RIGHT;
        } else if (v == 1) {
          c.opt.block_q = 0x7fffffff, c.opt.block_k = 0x7fffffff;
        } else {
          fa_tensor *ts[] = {&c.q, &c.k, &c.dq, &c.dk};
          for (int i = 0; i < 4; ++i) ts[i]->shape[3] = 1, ts[i]->stride[3] = (int64_t)1 << 62;
        }
        poison_outputs();
        const fa_status st = run(&c, bw);
        if (st != FA_OK)
          fail_msg("case %d %s on %s: %s", v, bw ? "backward" : "forward", fa_backend_name(c.backend),
                   fa_context_last_error(ctx));
      }
    }
  fa_cpu_plan plan;
  if (fa_backend_available(FA_BACKEND_CPU, NULL, 0) == FA_OK) {
    assert_int_equal(fa_cpu_plan_get(FA_ISA_AUTO, 64, 64, 0x7fffffff, 0x7fffffff, &plan), FA_OK);
    assert_true(plan.block_q > 0 && plan.block_q <= 65536 && plan.block_k > 0 && plan.block_k <= 65536);
  }
  fa_context_destroy(ctx);
}

/* An error then a success: the message is cleared. */
static void test_error_cleared(void **state) {
  (void)state;
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  call c;
  call_init(&c, 0, ctx);
  c.opt.dropout_p = 2;
  assert_int_equal(run(&c, 0), FA_ERR_DROPOUT);
  assert_true(fa_context_last_error(ctx)[0] != '\0');
  c.opt.dropout_p = 0;
  assert_int_equal(run(&c, 0), FA_OK);
  assert_string_equal(fa_context_last_error(ctx), "");
  fa_context_destroy(ctx);
}

/* Host memory marked as CUDA memory: without a cuda backend (or without a
 * device) there is nothing that could run it: FA_ERR_NO_BACKEND, and no
 * silent run on the CPU. Skipped where a GPU would actually try it. */
static void test_host_marked_cuda(void **state) {
  (void)state;
  if (fa_backend_available(FA_BACKEND_CUDA, NULL, 0) == FA_OK) skip();
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  call c;
  call_init(&c, 0, ctx);
  c.backend = FA_BACKEND_AUTO;
  fa_tensor *ts[] = {&c.q, &c.k, &c.v, &c.o, &c.lse, &c.opt.mask, &c.opt.bias};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) ts[i]->memory = FA_MEMORY_CUDA;
  poison_outputs();
  const fa_status st = run(&c, 0);
  if (st != FA_ERR_NO_BACKEND)
    fail_msg("returned %s (%s), expected FA_ERR_NO_BACKEND", fa_status_name(st), fa_context_last_error(ctx));
  assert_true(strstr(fa_context_last_error(ctx), "CUDA") || strstr(fa_context_last_error(ctx), "cuda"));
  expect_untouched("host memory marked as CUDA");
  fa_context_destroy(ctx);
}

/* The small functions around the calls. */
static void test_api_helpers(void **state) {
  (void)state;
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(NULL), FA_ERR_NULL_POINTER);
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  assert_int_equal(fa_context_set_threads(NULL, 1), FA_ERR_NULL_POINTER);
  assert_int_equal(fa_context_set_threads(ctx, -1), FA_ERR_OPTION);
  assert_true(names_arg(fa_context_last_error(ctx), "threads"));
  assert_int_equal(fa_context_set_threads(ctx, 2), FA_OK);
  assert_string_equal(fa_context_last_error(ctx), "");
  assert_int_equal(fa_context_set_cpu_isa(NULL, FA_ISA_AUTO), FA_ERR_NULL_POINTER);
  assert_int_equal(fa_context_set_cpu_isa(ctx, (fa_cpu_isa)99), FA_ERR_OPTION);
  assert_true(names_arg(fa_context_last_error(ctx), "isa"));
  assert_int_equal(fa_context_set_stream(NULL, NULL), FA_ERR_NULL_POINTER);
  assert_non_null(fa_context_last_error(NULL));
  assert_int_equal(fa_context_last_backend(NULL), FA_BACKEND_AUTO);
  assert_non_null(fa_context_dispatch_report(NULL));
  fa_backend be = FA_BACKEND_CPU;
  assert_int_equal(fa_backend_from_name("bogus", &be), FA_ERR_OPTION);
  assert_int_equal(fa_backend_from_name(NULL, &be), FA_ERR_NULL_POINTER);
  assert_int_equal(fa_backend_from_name("ref", NULL), FA_ERR_NULL_POINTER);
  for (int b = FA_BACKEND_AUTO; b < FA_BACKEND_COUNT; ++b) {
    assert_int_equal(fa_backend_from_name(fa_backend_name((fa_backend)b), &be), FA_OK);
    assert_int_equal(be, b);
  }
  char why[128];
  const fa_backend not_backends[] = {FA_BACKEND_AUTO, FA_BACKEND_COUNT, (fa_backend)-3};
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(fa_backend_available(not_backends[i], why, sizeof why), FA_ERR_OPTION);
    assert_true(names_arg(why, "backend"));
  }
  assert_int_equal(fa_backend_available(FA_BACKEND_REF, why, sizeof why), FA_OK);
  /* every status has its own name */
  for (int a = FA_OK; a <= FA_ERR_INTERNAL; ++a) {
    assert_true(strncmp(fa_status_name((fa_status)a), "FA_", 3) == 0);
    for (int b = a + 1; b <= FA_ERR_INTERNAL; ++b)
      assert_string_not_equal(fa_status_name((fa_status)a), fa_status_name((fa_status)b));
  }
  assert_int_equal(fa_dtype_size(FA_F32), 4);
  assert_int_equal(fa_dtype_size(FA_F64), 8);
  assert_int_equal(fa_dtype_size(FA_F16), 2);
  assert_int_equal(fa_dtype_size(FA_BF16), 2);
  assert_int_equal(fa_dtype_size(FA_BOOL), 1);
  fa_context_destroy(ctx);
  fa_context_destroy(NULL); /* like free(NULL) */
}

static int setup(void **state) {
  (void)state;
  const int64_t sq[4] = {B, HQ, LQ, D}, sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV}, so[4] = {B, HQ, LQ, DV};
  const int64_t sb[4] = {B, HQ, LQ, LK};
  tbuf *ins[] = {&g_q, &g_k, &g_v, &g_oin, &g_dout, &g_bias};
  const int64_t *shapes[] = {sq, sk, sv, so, so, sb};
  for (int i = 0; i < 6; ++i) tb_alloc(ins[i], FA_F32, shapes[i], 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_lsein, FA_F32, so, 3, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_mask, FA_BOOL, sb, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_o, FA_F32, so, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_lse, FA_F32, so, 3, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_dq, FA_F32, sq, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_dk, FA_F32, sk, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_dv, FA_F32, sv, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  tb_alloc(&g_dbias, FA_F32, sb, 4, TL_BHLD, 0, FA_MEMORY_AUTO);
  /* deterministic, finite inputs; every row sees its diagonal key */
  for (int i = 0; i < 6; ++i) {
    const tbuf *t = ins[i];
    int64_t n = 0;
    for (int64_t a = 0; a < t->t.shape[0]; ++a)
      for (int64_t b = 0; b < t->t.shape[1]; ++b)
        for (int64_t c = 0; c < t->t.shape[2]; ++c)
          for (int64_t d = 0; d < t->t.shape[3]; ++d, ++n) tb_set(t, a, b, c, d, sin(0.37 * (double)n + i));
  }
  for (int64_t a = 0; a < B; ++a)
    for (int64_t h = 0; h < HQ; ++h)
      for (int64_t i = 0; i < LQ; ++i) {
        tb_set(&g_lsein, a, h, i, 0, 1.0);
        for (int64_t j = 0; j < LK; ++j) tb_set(&g_mask, a, h, i, j, j == i || (i + j) % 3 != 0);
      }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tbuf *all[] = {&g_q,    &g_k,  &g_v,  &g_o,  &g_lse,  &g_oin,   &g_lsein,
                 &g_dout, &g_dq, &g_dk, &g_dv, &g_bias, &g_dbias, &g_mask};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tb_free(all[i]);
  return 0;
}

int main(void) {
  enum { NBAD = sizeof g_bad / sizeof g_bad[0] };
  struct CMUnitTest tests[NBAD + 7];
  int n = 0;
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_baseline_valid);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_error_cleared);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_host_marked_cuda);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_api_helpers);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_issue12_hostile_o_stride);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_free_strides_accepted);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fuzzer_findings_valid);
  for (int i = 0; i < NBAD; ++i)
    tests[n++] = (struct CMUnitTest){g_bad[i].name, test_bad, NULL, NULL, (void *)&g_bad[i]};
  return _cmocka_run_group_tests("bad_input", tests, (size_t)n, setup, teardown);
}
