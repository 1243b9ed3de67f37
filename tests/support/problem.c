#include "problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "rng.h"

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) abort();
  return p;
}

void tc_geom_of(const tcase *c, tc_geom *g) {
  memset(g, 0, sizeof *g);
  g->varlen = c->cu_q != NULL;
  g->nseq = c->B;
  g->Bt = g->varlen ? 1 : c->B;
  g->Hq = c->Hq;
  g->Hkv = c->Hkv;
  g->group = c->Hq / c->Hkv;
  g->D = c->D;
  g->Dv = c->Dv;
  if (g->varlen) {
    g->rows_q = c->cu_q[c->B];
    g->rows_k = c->cu_k[c->B];
    g->mq = g->mk = 1; /* the library takes the longest sequence, at least 1 */
    for (int64_t b = 0; b < c->B; ++b) {
      if (c->cu_q[b + 1] - c->cu_q[b] > g->mq) g->mq = c->cu_q[b + 1] - c->cu_q[b];
      if (c->cu_k[b + 1] - c->cu_k[b] > g->mk) g->mk = c->cu_k[b + 1] - c->cu_k[b];
    }
  } else {
    g->rows_q = g->mq = c->Lq;
    g->rows_k = g->mk = c->Lk;
  }
}

int64_t tc_lq(const tcase *c, int64_t b) {
  if (c->cu_q) return c->cu_q[b + 1] - c->cu_q[b];
  return c->seqlens_q ? c->seqlens_q[b] : c->Lq;
}

int64_t tc_lk(const tcase *c, int64_t b) {
  if (c->cu_k) return c->cu_k[b + 1] - c->cu_k[b];
  return c->seqlens_k ? c->seqlens_k[b] : c->Lk;
}

void tc_qpos(const tcase *c, int64_t b, int64_t i, int64_t *bidx, int64_t *row) {
  *bidx = c->cu_q ? 0 : b;
  *row = c->cu_q ? c->cu_q[b] + i : i;
}

void tc_kpos(const tcase *c, int64_t b, int64_t j, int64_t *bidx, int64_t *row) {
  *bidx = c->cu_k ? 0 : b;
  *row = c->cu_k ? c->cu_k[b] + j : j;
}

/* ---- inputs ---------------------------------------------------------- */

static int64_t idx4(const int64_t shape[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * shape[1] + b) * shape[2] + c) * shape[3] + d;
}

/* logical index -> index into the stored (broadcast) shape */
static int64_t bcast_idx(const int64_t shape[4], int64_t b, int64_t h, int64_t i, int64_t j) {
  return idx4(shape, shape[0] == 1 ? 0 : b, shape[1] == 1 ? 0 : h, shape[2] == 1 ? 0 : i, shape[3] == 1 ? 0 : j);
}

static double *normal_array(trng *r, int64_t n, double mag, fa_dtype dt) {
  double *a = (double *)xmalloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; ++i) a[i] = tb_round(dt, mag * trng_normal(r));
  return a;
}

void tc_inputs_make(tc_inputs *in, const tcase *c, fa_dtype dt, uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->c = c;
  in->dt = dt;
  tc_geom_of(c, &in->g);
  const tc_geom *g = &in->g;
  trng r = {seed};
  const double mag = c->mag > 0 ? c->mag : 1.0;
  in->q = normal_array(&r, g->Bt * g->Hq * g->rows_q * g->D, mag, dt);
  in->k = normal_array(&r, g->Bt * g->Hkv * g->rows_k * g->D, mag, dt);
  in->v = normal_array(&r, g->Bt * g->Hkv * g->rows_k * g->Dv, 1.0, dt);
  in->dout = normal_array(&r, g->Bt * g->Hq * g->rows_q * g->Dv, 1.0, dt);
  const int64_t logical[4] = {g->nseq, g->Hq, g->mq, g->mk};
  if (c->mask) {
    const double keep = c->mask_keep > 0 ? c->mask_keep : 0.7;
    for (int d = 0; d < 4; ++d) in->mshape[d] = (c->mask_bcast & (1u << d)) ? 1 : logical[d];
    const int64_t n = in->mshape[0] * in->mshape[1] * in->mshape[2] * in->mshape[3];
    in->mask = (uint8_t *)xmalloc((size_t)n);
    for (int64_t e = 0; e < n; ++e) {
      const int64_t i = (e / in->mshape[3]) % in->mshape[2];
      const int dead = c->mask_dead_rows && in->mshape[2] > 1 && i % 4 == 1;
      in->mask[e] = !dead && trng_uniform(&r) < keep;
    }
  }
  if (c->bias) {
    for (int d = 0; d < 4; ++d) in->bshape[d] = (c->bias_bcast & (1u << d)) ? 1 : logical[d];
    const int64_t n = in->bshape[0] * in->bshape[1] * in->bshape[2] * in->bshape[3];
    in->bias = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t e = 0; e < n; ++e) {
      const int64_t i = (e / in->bshape[3]) % in->bshape[2];
      double b = trng_normal(&r) + c->bias_shift;
      /* -inf bias: a common way to mask. Row 1 entirely, and 1 in 8 elsewhere. */
      if (c->bias_neginf && ((in->bshape[2] > 1 && i == 1) || trng_uniform(&r) < 0.125)) b = -INFINITY;
      in->bias[e] = tb_round(dt, b);
    }
  }
  if (c->alibi) {
    in->alibi = (float *)xmalloc((size_t)g->Hq * sizeof(float));
    for (int64_t h = 0; h < g->Hq; ++h) in->alibi[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)g->Hq);
  }
}

void tc_inputs_free(tc_inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->dout);
  free(in->mask);
  free(in->bias);
  free(in->alibi);
  memset(in, 0, sizeof *in);
}

int tc_mask_at(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j) {
  return in->mask ? in->mask[bcast_idx(in->mshape, b, h, i, j)] : 1;
}

double tc_bias_at(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j) {
  return in->bias ? in->bias[bcast_idx(in->bshape, b, h, i, j)] : 0.0;
}

/* ---- visibility, from DESIGN.md ------------------------------------- */

/* positions: row i is i + q_offset, key j is j + k_offset; distances are
 * measured between positions, so diag(i) - j gains q_offset - k_offset */
static int64_t diag_of(const tcase *c, int64_t b, int64_t i) {
  const int64_t shift = c->q_offset - c->k_offset;
  return (c->align == FA_ALIGN_BOTTOM_RIGHT ? i + tc_lk(c, b) - tc_lq(c, b) : i) + shift;
}

int tc_visible(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j) {
  const tcase *c = in->c;
  if (i >= tc_lq(c, b) || j >= tc_lk(c, b)) return 0;
  const int64_t diag = diag_of(c, b, i);
  if (c->causal && j > diag) return 0;
  if (c->use_window && c->wl >= 0 && j < diag - c->wl) return 0;
  if (c->use_window && c->wr >= 0 && j > diag + c->wr) return 0;
  if (!tc_mask_at(in, b, h, i, j)) return 0;
  return tc_bias_at(in, b, h, i, j) != -INFINITY;
}

/* ---- tensors ---------------------------------------------------------- */

static void fill4(const tbuf *t, const double *vals) {
  int64_t n = 0;
  for (int64_t a = 0; a < t->t.shape[0]; ++a)
    for (int64_t b = 0; b < t->t.shape[1]; ++b)
      for (int64_t c = 0; c < t->t.shape[2]; ++c)
        for (int64_t d = 0; d < t->t.shape[3]; ++d) tb_set(t, a, b, c, d, vals[n++]);
}

/* A mask or bias: stored shape, or the full shape with stride 0 on the
 * broadcast dims; values come from the stored-shape array. */
static void make_operand(tbuf *t, fa_dtype dt, const int64_t stored[4], const int64_t logical[4], unsigned bcast,
                         int stride0, tb_layout layout, int on_device, const uint8_t *bits, const double *vals) {
  const int64_t *shape = stride0 ? logical : stored;
  tb_alloc(t, dt, shape, 4, layout, stride0 ? bcast : 0u, on_device ? FA_MEMORY_CUDA : FA_MEMORY_AUTO);
  for (int64_t a = 0; a < stored[0]; ++a)
    for (int64_t b = 0; b < stored[1]; ++b)
      for (int64_t c = 0; c < stored[2]; ++c)
        for (int64_t d = 0; d < stored[3]; ++d) {
          const int64_t e = idx4(stored, a, b, c, d);
          tb_set(t, a, b, c, d, bits ? (double)bits[e] : vals[e]);
        }
}

static const void *device_copy(tc_tensors *T, int slot, const void *host, size_t bytes, int on_device, int *fail) {
  if (!host || !on_device) return host;
  T->dev[slot] = tdev_alloc(bytes);
  if (!T->dev[slot] || tdev_to_device(T->dev[slot], host, bytes) != 0) *fail = 1;
  return T->dev[slot];
}

int tc_tensors_make(tc_tensors *T, const tc_inputs *in, fa_dtype dt, tb_layout layout, int on_device) {
  memset(T, 0, sizeof *T);
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  const fa_memory mem = on_device ? FA_MEMORY_CUDA : FA_MEMORY_AUTO;
  const int64_t sq[4] = {g->Bt, g->Hq, g->rows_q, g->D}, sk[4] = {g->Bt, g->Hkv, g->rows_k, g->D};
  const int64_t sv[4] = {g->Bt, g->Hkv, g->rows_k, g->Dv}, so[4] = {g->Bt, g->Hq, g->rows_q, g->Dv};
  const int64_t logical[4] = {g->nseq, g->Hq, g->mq, g->mk};
  tb_alloc(&T->q, dt, sq, 4, layout, 0, mem);
  tb_alloc(&T->k, dt, sk, 4, layout, 0, mem);
  tb_alloc(&T->v, dt, sv, 4, layout, 0, mem);
  tb_alloc(&T->dout, dt, so, 4, layout, 0, mem);
  tb_alloc(&T->o, dt, so, 4, layout, 0, mem);
  tb_alloc(&T->lse, dt == FA_F64 ? FA_F64 : FA_F32, so, 3, layout, 0, mem);
  tb_alloc(&T->dq, dt, sq, 4, layout, 0, mem);
  tb_alloc(&T->dk, dt, sk, 4, layout, 0, mem);
  tb_alloc(&T->dv, dt, sv, 4, layout, 0, mem);
  fill4(&T->q, in->q);
  fill4(&T->k, in->k);
  fill4(&T->v, in->v);
  fill4(&T->dout, in->dout);
  if (in->mask)
    make_operand(&T->mask, FA_BOOL, in->mshape, logical, c->mask_bcast, c->mask_stride0, TL_BHLD, on_device, in->mask,
                 NULL);
  if (in->bias) {
    /* a full-shape bias follows the case's layout; a broadcast one is contiguous */
    const tb_layout bl = c->bias_bcast ? TL_BHLD : layout;
    make_operand(&T->bias, dt, in->bshape, logical, c->bias_bcast, c->bias_stride0, bl, on_device, NULL, in->bias);
    if (c->dbias) tb_alloc(&T->dbias, dt, T->bias.t.shape, 4, bl, 0, mem);
  }

  fa_options *o = &T->opt;
  fa_options_init(o);
  o->scale = c->scale;
  o->softcap = c->softcap;
  o->causal = c->causal;
  o->align = c->align;
  o->use_window = c->use_window;
  o->window_left = c->wl;
  o->window_right = c->wr;
  o->dropout_p = c->dropout_p;
  o->dropout_seed = c->seed;
  o->dropout_offset = c->offset;
  o->block_q = c->block_q;
  o->block_k = c->block_k;
  o->deterministic = c->deterministic;
  o->q_offset = c->q_offset;
  o->k_offset = c->k_offset;
  if (tb_present(&T->mask)) o->mask = T->mask.t;
  if (tb_present(&T->bias)) o->bias = T->bias.t;
  int fail = 0;
  const size_t ns = (size_t)c->B * sizeof(int32_t), nc = (size_t)(c->B + 1) * sizeof(int32_t);
  o->seqlens_q = (const int32_t *)device_copy(T, 0, c->seqlens_q, ns, on_device, &fail);
  o->seqlens_k = (const int32_t *)device_copy(T, 1, c->seqlens_k, ns, on_device, &fail);
  o->cu_seqlens_q = (const int32_t *)device_copy(T, 2, c->cu_q, nc, on_device, &fail);
  o->cu_seqlens_k = (const int32_t *)device_copy(T, 3, c->cu_k, nc, on_device, &fail);
  o->alibi_slopes = (const float *)device_copy(T, 4, in->alibi, (size_t)g->Hq * sizeof(float), on_device, &fail);
  if (c->cu_q) o->num_seqs = c->B;

  tbuf *all[] = {&T->q, &T->k, &T->v, &T->o, &T->lse, &T->dout, &T->dq, &T->dk, &T->dv, &T->mask, &T->bias, &T->dbias};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (tb_present(all[i]) && (tb_upload(all[i]) != 0 || (on_device && !all[i]->dev))) fail = 1;
  return fail ? -1 : 0;
}

void tc_tensors_free(tc_tensors *T) {
  tbuf *all[] = {&T->q, &T->k, &T->v, &T->o, &T->lse, &T->dout, &T->dq, &T->dk, &T->dv, &T->mask, &T->bias, &T->dbias};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tb_free(all[i]);
  for (int i = 0; i < 5; ++i) tdev_free(T->dev[i]);
  memset(T, 0, sizeof *T);
}

/* ---- the textbook forward ------------------------------------------- */

double tc_score(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j, double scale) {
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  if (!tc_visible(in, b, h, i, j)) return -INFINITY;
  const int64_t sq[4] = {g->Bt, g->Hq, g->rows_q, g->D}, sk[4] = {g->Bt, g->Hkv, g->rows_k, g->D};
  int64_t qb, qr, kb, kr;
  tc_qpos(c, b, i, &qb, &qr);
  tc_kpos(c, b, j, &kb, &kr);
  double dot = 0;
  for (int64_t d = 0; d < g->D; ++d) dot += in->q[idx4(sq, qb, h, qr, d)] * in->k[idx4(sk, kb, h / g->group, kr, d)];
  double x = scale * dot;
  if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
  if (in->alibi) x -= (double)in->alibi[h] * fabs((double)(diag_of(c, b, i) - j));
  return x + tc_bias_at(in, b, h, i, j);
}

void tc_naive_forward(const tc_inputs *in, double *o, double *lse) {
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)g->D);
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, g->Dv}, sv[4] = {g->Bt, g->Hkv, g->rows_k, g->Dv};
  /* rows no sequence covers (padding) keep O = 0, LSE = -inf */
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q; ++e) lse[e] = -INFINITY;
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) o[e] = 0.0;
  double *s = (double *)xmalloc((size_t)g->mk * sizeof(double));
  for (int64_t b = 0; b < g->nseq; ++b)
    for (int64_t h = 0; h < g->Hq; ++h) {
      const int64_t kvh = h / g->group;
      for (int64_t i = 0; i < tc_lq(c, b); ++i) {
        int64_t qb, qr;
        tc_qpos(c, b, i, &qb, &qr);
        double mx = -INFINITY;
        for (int64_t j = 0; j < tc_lk(c, b); ++j) {
          s[j] = tc_score(in, b, h, i, j, scale);
          if (s[j] > mx) mx = s[j];
        }
        if (mx == -INFINITY) continue; /* nothing visible: O = 0, LSE = -inf */
        double sum = 0;
        for (int64_t j = 0; j < tc_lk(c, b); ++j) sum += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
        lse[(qb * g->Hq + h) * g->rows_q + qr] = mx + log(sum);
        for (int64_t j = 0; j < tc_lk(c, b); ++j) {
          if (s[j] == -INFINITY) continue;
          double p = exp(s[j] - mx) / sum;
          if (c->dropout_p > 0)
            p = fa_dropout_keep(c->dropout_p, c->seed, c->offset, b, h, g->Hq, i + c->q_offset, j + c->k_offset)
                    ? p / (1.0 - c->dropout_p)
                    : 0.0;
          int64_t kb, kr;
          tc_kpos(c, b, j, &kb, &kr);
          for (int64_t d = 0; d < g->Dv; ++d) o[idx4(so, qb, h, qr, d)] += p * in->v[idx4(sv, kb, kvh, kr, d)];
        }
      }
    }
  free(s);
}
