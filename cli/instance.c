#include "instance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "tensor_io.h"

enum { STREAM_Q = 1, STREAM_K, STREAM_V, STREAM_DOUT, STREAM_MASK, STREAM_BIAS };

static void *alloc_bytes(size_t bytes, const char *what) {
  /* 64-byte aligned so SIMD loads of a row start never straddle a line */
  const size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) {
    char b[32];
    cli_fail("out of memory: cannot allocate %s for %s", cli_fmt_bytes((double)bytes, b, sizeof b), what);
  }
  memset(p, 0, rounded);
  return p;
}

/* A dense tensor [d0, d1, d2, d3]; blhd puts dim 2 before dim 1 in memory. */
static fa_tensor make(fa_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int blhd, const char *what) {
  fa_tensor t = fa_tensor_contiguous(NULL, dt, d0, d1, d2, d3);
  if (blhd) {
    t.stride[3] = 1;
    t.stride[1] = d3;
    t.stride[2] = d1 * d3;
    t.stride[0] = d1 * d2 * d3;
  }
  t.data = alloc_bytes(cli_tensor_bytes(&t, 4), what);
  t.memory = FA_MEMORY_HOST;
  return t;
}

void cli_instance_alloc(cli_instance *in, const cli_spec *s, fa_dtype dt, fa_dtype lse_dtype, int backward) {
  memset(in, 0, sizeof *in);
  in->dtype = dt;
  in->memory = FA_MEMORY_HOST;
  in->backward = backward;
  int64_t Bt = s->B, Lq = s->Lq, Lk = s->Lk;
  if (s->varlen) { /* one batch row holding every sequence back to back */
    Bt = 1, Lq = 0, Lk = 0;
    for (int b = 0; b < s->n_seqlens_q; ++b) Lq += s->seqlens_q[b], Lk += s->seqlens_k[b];
    if (Lq == 0) Lq = 1; /* a tensor needs a row even if every sequence is empty */
    if (Lk == 0) Lk = 1;
  }
  const int bl = s->layout_blhd;
  in->q = make(dt, Bt, s->Hq, Lq, s->D, bl, "q");
  in->k = make(dt, Bt, s->Hkv, Lk, s->D, bl, "k");
  in->v = make(dt, Bt, s->Hkv, Lk, s->Dv, bl, "v");
  in->o = make(dt, Bt, s->Hq, Lq, s->Dv, bl, "o");
  in->lse = make(lse_dtype, Bt, s->Hq, Lq, 1, 0, "lse");
  if (backward) {
    in->dout = make(dt, Bt, s->Hq, Lq, s->Dv, bl, "dout");
    in->dq = make(dt, Bt, s->Hq, Lq, s->D, bl, "dq");
    in->dk = make(dt, Bt, s->Hkv, Lk, s->D, bl, "dk");
    in->dv = make(dt, Bt, s->Hkv, Lk, s->Dv, bl, "dv");
  }
  fa_options_init(&in->opt);
  fa_options *o = &in->opt;
  o->scale = s->scale;
  o->softcap = s->softcap;
  o->causal = s->causal;
  o->align = s->align;
  o->use_window = s->use_window;
  o->window_left = s->window_left;
  o->window_right = s->window_right;
  o->dropout_p = s->dropout_p;
  o->dropout_seed = s->dropout_seed;
  o->dropout_offset = s->dropout_offset;
  o->deterministic = s->deterministic;
  o->block_q = s->block_q;
  o->block_k = s->block_k;
  if (s->mask_keep > 0) o->mask = make(FA_BOOL, s->B, s->Hq, s->Lq, s->Lk, 0, "mask");
  if (s->bias) {
    const int64_t bb = (s->bias == CLI_BIAS_FULL || s->bias == CLI_BIAS_BATCH) ? s->B : 1;
    const int64_t bh = (s->bias == CLI_BIAS_FULL || s->bias == CLI_BIAS_HEAD) ? s->Hq : 1;
    o->bias = make(dt, bb, bh, s->Lq, s->Lk, 0, "bias");
    if (backward && s->bias_grad) in->dbias = make(dt, bb, bh, s->Lq, s->Lk, 0, "dbias");
  }
  if (s->alibi) in->alibi = alloc_bytes((size_t)s->Hq * sizeof(float), "alibi slopes");
  o->alibi_slopes = in->alibi;
  if (s->n_seqlens_q) {
    const size_t n = (size_t)s->n_seqlens_q;
    if (s->varlen) {
      in->cu_seqlens_q = alloc_bytes((n + 1) * sizeof(int32_t), "cu_seqlens_q");
      in->cu_seqlens_k = alloc_bytes((n + 1) * sizeof(int32_t), "cu_seqlens_k");
      in->num_seqs = (int64_t)n;
      o->cu_seqlens_q = in->cu_seqlens_q;
      o->cu_seqlens_k = in->cu_seqlens_k;
      o->num_seqs = in->num_seqs;
    } else {
      in->seqlens_q = alloc_bytes(n * sizeof(int32_t), "seqlens_q");
      in->seqlens_k = alloc_bytes(n * sizeof(int32_t), "seqlens_k");
      o->seqlens_q = in->seqlens_q;
      o->seqlens_k = in->seqlens_k;
    }
  }
}

/* Fills t with values from (seed, stream) by logical index. */
static void fill_normal(const fa_tensor *t, uint64_t seed, uint64_t stream, fa_dtype values) {
  if (!t->data) return;
  uint64_t i = 0;
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = 0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < t->shape[3]; ++d, ++i)
          cli_tensor_set(t, a, b, c, d, cli_quantize(cli_rand_normal(seed, stream, i), values));
}

void cli_instance_fill(cli_instance *in, const cli_spec *s, fa_dtype values) {
  fill_normal(&in->q, s->seed, STREAM_Q, values);
  fill_normal(&in->k, s->seed, STREAM_K, values);
  fill_normal(&in->v, s->seed, STREAM_V, values);
  fill_normal(&in->dout, s->seed, STREAM_DOUT, values);
  fill_normal(&in->opt.bias, s->seed, STREAM_BIAS, values);
  const fa_tensor *m = &in->opt.mask;
  if (m->data) {
    uint64_t i = 0;
    for (int64_t a = 0; a < m->shape[0]; ++a)
      for (int64_t b = 0; b < m->shape[1]; ++b)
        for (int64_t c = 0; c < m->shape[2]; ++c)
          for (int64_t d = 0; d < m->shape[3]; ++d, ++i)
            cli_tensor_set(m, a, b, c, d, cli_rand_uniform(s->seed, STREAM_MASK, i) < s->mask_keep);
  }
  if (in->alibi) /* the slopes of the ALiBi paper for Hq heads */
    for (int64_t h = 0; h < s->Hq; ++h) in->alibi[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)s->Hq);
  if (in->seqlens_q)
    for (int b = 0; b < s->n_seqlens_q; ++b)
      in->seqlens_q[b] = (int32_t)s->seqlens_q[b], in->seqlens_k[b] = (int32_t)s->seqlens_k[b];
  if (in->cu_seqlens_q) {
    in->cu_seqlens_q[0] = in->cu_seqlens_k[0] = 0;
    for (int b = 0; b < s->n_seqlens_q; ++b) {
      in->cu_seqlens_q[b + 1] = in->cu_seqlens_q[b] + (int32_t)s->seqlens_q[b];
      in->cu_seqlens_k[b + 1] = in->cu_seqlens_k[b] + (int32_t)s->seqlens_k[b];
    }
  }
}

int cli_instance_slots(cli_instance *in, cli_slot *out, int max) {
  const cli_slot all[] = {{"q", &in->q, 4},         {"k", &in->k, 4},           {"v", &in->v, 4},
                          {"o", &in->o, 4},         {"lse", &in->lse, 3},       {"dout", &in->dout, 4},
                          {"dq", &in->dq, 4},       {"dk", &in->dk, 4},         {"dv", &in->dv, 4},
                          {"dbias", &in->dbias, 4}, {"mask", &in->opt.mask, 4}, {"bias", &in->opt.bias, 4}};
  int n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0] && n < max; ++i)
    if (all[i].t->data) out[n++] = all[i];
  return n;
}

size_t cli_instance_io_bytes(const cli_instance *in) {
  const fa_tensor *ts[] = {&in->q, &in->k, &in->v, &in->o, &in->dout, &in->dq, &in->dk, &in->dv};
  size_t n = in->lse.data ? cli_tensor_bytes(&in->lse, 3) : 0;
  for (int i = 0; i < 8; ++i)
    if (ts[i]->data) n += cli_tensor_bytes(ts[i], 4);
  return n;
}

void cli_instance_free(cli_instance *in) {
  cli_slot slots[16];
  const int n = cli_instance_slots(in, slots, 16);
  for (int i = 0; i < n; ++i) free(slots[i].t->data);
  free(in->alibi);
  free(in->seqlens_q);
  free(in->seqlens_k);
  free(in->cu_seqlens_q);
  free(in->cu_seqlens_k);
  memset(in, 0, sizeof *in);
}

void cli_tensor_copy(const fa_tensor *dst, const fa_tensor *src, int ndim) {
  const int64_t n3 = ndim == 4 ? src->shape[3] : 1;
  for (int64_t a = 0; a < src->shape[0]; ++a)
    for (int64_t b = 0; b < src->shape[1]; ++b)
      for (int64_t c = 0; c < src->shape[2]; ++c)
        for (int64_t d = 0; d < n3; ++d) cli_tensor_set(dst, a, b, c, d, cli_tensor_get(src, a, b, c, d));
}
