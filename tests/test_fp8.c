/* The FP8 (e4m3) forward (docs/semantics.md, "FP8 (e4m3)"), one program
 * per backend like test_backend.c:
 *   ref   its result against the rule written out again here (fp8_rule),
 *         the rule not vacuous (rounding P to e4m3 changes o by more than
 *         the cuda tolerance), and the FP8 argument checks;
 *   cpu   refuses every case with FA_ERR_DTYPE, outputs untouched;
 *   cuda  every case against ref, within the tolerance explained at
 *         cuda_tolerance (skipped without a compute capability 9.0 GPU).
 * Inputs are N(0, mag^2) rounded to e4m3; head dims are multiples of 16
 * (what the cuda kernel takes). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "core/element.h"
#include "rules/fp8.h"
#include "support/backends.h"
#include "support/cm.h"
#include "support/device.h"
#include "support/problem.h"

#define SKIP_RETURN_CODE 77

static const tb_backend *g_be;
static int g_usable;
static char g_why[512];

/* descales: 0 none, 1 per tensor ([1, 1] broadcast), 2 per (sequence, kv head), 3 as 2 with
 * every other k_descale negative (the cuda kernels fold a positive scale into the exponent and
 * take the unfolded path for the rest: both in one call) */
typedef struct fcase {
  tcase c;
  int descale;
  fa_dtype odt; /* FA_BF16 (0 = that) or FA_F16 */
} fcase;

static const int32_t sq2[] = {70, 1}, sk2[] = {300, 129};
static const int32_t cuq[] = {0, 65, 66, 200}, cuk[] = {0, 130, 131, 400};

/* Lengths over 128 so that P is rounded over several key blocks, and tails. */
static const fcase g_cases[] = {
    {{"basic", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 70, .Lk = 300, .D = 128, .Dv = 128}, 0, 0},
    {{"descale_tensor", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 65, .Lk = 260, .D = 128, .Dv = 128}, 1, 0},
    {{"descale_heads_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 33, .Lk = 200, .D = 128, .Dv = 128}, 2, 0},
    {{"o_f16", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 40, .Lk = 140, .D = 128, .Dv = 128}, 2, FA_F16},
    {{"causal_tl", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 200, .Lk = 260, .D = 128, .Dv = 128, .causal = 1}, 1, 0},
    {{"causal_br_mqa", .B = 1, .Hq = 4, .Hkv = 1, .Lq = 100, .Lk = 300, .D = 64, .Dv = 64, .causal = 1,
      .align = FA_ALIGN_BOTTOM_RIGHT},
     2,
     0},
    {{"window", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 300, .Lk = 300, .D = 128, .Dv = 128, .use_window = 1, .wl = 150,
      .wr = 20},
     0,
     0},
    {{"softcap_alibi", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 70, .Lk = 270, .D = 128, .Dv = 128, .softcap = 3.0, .alibi = 1},
     2,
     0},
    {{"D64_Dv128", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 50, .Lk = 190, .D = 64, .Dv = 128}, 0, 0},
    {{"D256", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 70, .Lk = 200, .D = 256, .Dv = 256, .causal = 1}, 1, 0},
    {{"D128_Dv256_blhd", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 33, .Lk = 150, .D = 128, .Dv = 256, .layout = TL_BLHD}, 2, 0},
    {{"seqlens", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 70, .Lk = 300, .D = 128, .Dv = 128, .seqlens_q = sq2,
      .seqlens_k = sk2},
     2,
     0},
    /* rows not 16-byte aligned: ref runs it, cuda refuses */
    {{"layout_padded", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 33, .Lk = 140, .D = 64, .Dv = 64, .layout = TL_PADDED}, 1, 0},
    {{"varlen_causal_br", .B = 3, .Hq = 2, .Hkv = 2, .D = 128, .Dv = 128, .cu_q = cuq, .cu_k = cuk, .causal = 1,
      .align = FA_ALIGN_BOTTOM_RIGHT},
     2,
     0},
    /* large scores: a peaked softmax, where P's rounding shows most */
    {{"peaked_mag2", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 40, .Lk = 260, .D = 128, .Dv = 128, .mag = 2.0}, 0, 0},
    {{"descale_signs_causal_br", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 150, .Lk = 300, .D = 128, .Dv = 128, .causal = 1,
      .align = FA_ALIGN_BOTTOM_RIGHT},
     3,
     0},
    {{"scale_custom_block64", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 40, .Lk = 200, .D = 128, .Dv = 128, .scale = 0.05,
      .block_k = 64},
     0,
     0},
};
enum { NCASES = (int)(sizeof g_cases / sizeof g_cases[0]) };

static fa_dtype odt_of(const fcase *f) {
  return f->odt ? f->odt : FA_BF16;
}

/* ---- the rule, written out again ---------------------------------------- */

typedef struct fp8_io {
  tc_inputs in;
  double *qd, *kd, *vd; /* [nseq * Hkv] */
} fp8_io;

static double descale_at(const double *d, const tc_geom *g, int64_t b, int64_t kvh) {
  return d ? d[b * g->Hkv + kvh] : 1.0;
}

static int64_t idx4(const int64_t s[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

/* What fp8_rule computes besides the rule itself: the self-checks' bugs,
 * which a layout or descale mistake in a kernel would make. */
enum fp8_bug {
  BUG_NONE,
  BUG_SWAP_P,       /* P of keys 2k and 2k + 1 swapped in P V (P paired with the wrong key's V) */
  BUG_DROP_LAST,    /* the last key block left out of o (not of lse) */
  BUG_V_DESCALE_SQ, /* v_descale applied twice */
};

/* o, lse in natural order of [Bt, Hq, rows_q, Dv] / [Bt, Hq, rows_q]; with
 * round_p = 0 P goes into P V unrounded; bug: BUG_NONE, or a mistake to
 * make on purpose. */
static void fp8_rule(const fp8_io *io, int bk, int round_p, enum fp8_bug bug, double *o, double *lse) {
  const tc_inputs *in = &io->in;
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)g->D);
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, g->Dv}, sv[4] = {g->Bt, g->Hkv, g->rows_k, g->Dv};
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q; ++e) lse[e] = -INFINITY;
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) o[e] = 0.0;
  double *s = (double *)malloc((size_t)g->mk * sizeof(double));
  double *acc = (double *)malloc((size_t)g->Dv * sizeof(double));
  for (int64_t b = 0; b < g->nseq; ++b)
    for (int64_t h = 0; h < g->Hq; ++h) {
      const int64_t kvh = h / g->group, lk = tc_lk(c, b);
      const double sc = scale * descale_at(io->qd, g, b, kvh) * descale_at(io->kd, g, b, kvh);
      double vd = descale_at(io->vd, g, b, kvh);
      if (bug == BUG_V_DESCALE_SQ) vd *= vd;
      for (int64_t i = 0; i < tc_lq(c, b); ++i) {
        int64_t qb, qr;
        tc_qpos(c, b, i, &qb, &qr);
        for (int64_t j = 0; j < lk; ++j) s[j] = tc_score(in, b, h, i, j, sc);
        double m = -INFINITY, l = 0;
        for (int64_t d = 0; d < g->Dv; ++d) acc[d] = 0;
        for (int64_t j0 = 0; j0 < lk; j0 += bk) {
          const int64_t j1 = j0 + bk < lk ? j0 + bk : lk;
          double mn = m;
          for (int64_t j = j0; j < j1; ++j) mn = fmax(mn, s[j]);
          if (mn == -INFINITY) continue;
          const double alpha = exp(m - mn);
          l *= alpha;
          for (int64_t d = 0; d < g->Dv; ++d) acc[d] *= alpha;
          for (int64_t j = j0; j < j1; ++j) {
            if (s[j] == -INFINITY) continue;
            const double pj = 256.0 * exp(s[j] - mn); /* 2^FA__FP8_P_SHIFT, spelled out */
            l += pj;
            if (bug == BUG_DROP_LAST && j1 == lk) continue;
            const double p8 = round_p ? fa__e4m3_round(pj) : pj;
            int64_t jv = j, kb, kr;
            if (bug == BUG_SWAP_P && (j ^ 1) < j1) jv = j ^ 1;
            tc_kpos(c, b, jv, &kb, &kr);
            for (int64_t d = 0; d < g->Dv; ++d) acc[d] += p8 * in->v[idx4(sv, kb, kvh, kr, d)];
          }
          m = mn;
        }
        if (m == -INFINITY) continue;
        lse[(qb * g->Hq + h) * g->rows_q + qr] = m + log(l) - 8.0 * log(2.0);
        for (int64_t d = 0; d < g->Dv; ++d) o[idx4(so, qb, h, qr, d)] = acc[d] * vd / l;
      }
    }
  free(s);
  free(acc);
}

/* ---- the tensor cores' arithmetic ---------------------------------------- */

/* Hopper's FP8 tensor cores do not add in f32 (DeepSeek-V3's report,
 * section 3.5.2; SageAttention2; DeepGEMM issues 37 and 50). In one k32 step
 * of wgmma, D = sum_k a_k b_k + C, the exact products (and C) are aligned to
 * the largest exponent among them and cut to hw_frac_bits fraction bits
 * below that top bit (truncated: "sign-fill right shifting"), and D comes
 * out with that many mantissa bits ("FP22": 1 + 8 + 13 bits). The model
 * here, with q = 2^(T - hw_frac_bits), T the top bit position:
 *   T    = max(e(a_k) + e(b_k) + 1 over nonzero products, e(C)), where e is
 *          an operand's exponent (an e4m3 product has up to two integer
 *          bits; subnormals count as 2^-6, the larger choice);
 *   each term loses its bits below q, rounded down (two's complement) or
 *          towards zero: the test allows either, and also any grouping of
 *          the 32 products inside the step (a group's sum loses no more
 *          than its terms' residues do);
 *   C    loses up to q unless its own exponent is T (it carries no bits
 *          below 2^(e(C) - hw_frac_bits) from the step before);
 *   D    is cut again to hw_frac_bits below its own top bit when the sum
 *          carried above T.
 * fp8_hw_step emulates one step (mode 0 rounds down, 1 towards zero);
 * fp8_hw_step_bound bounds its error for either mode from the exact terms.
 * hw_frac_bits is 13 as published; FA_TEST_FP8_ACC_BITS overrides it, to
 * see how the test fares under a coarser or finer model. */
static int hw_frac_bits = 13;

static int imax(int a, int b) {
  return a > b ? a : b;
}

static int e4m3_exp(double x) {
  int e = ilogb(x);
  return e < -6 ? -6 : e;
}

static double hw_cut(double x, double q, int mode) {
  const double r = mode == 0 ? floor(x / q) : trunc(x / q);
  return r * q;
}

/* The error a term t may lose to the grid q: the residue below q, whichever
 * way it is cut (a residue r rounds down by r or up to q by q - r). */
static double hw_term_err(double t, double q) {
  const double r = fmod(fabs(t), q);
  return r == 0 ? 0 : fmax(r, q - r);
}

/* One step: sum_k x[k] y[k * ys] (k < n) + c, as the model's hardware
 * (c == 0 with has_c: a zero accumulator). */
static double fp8_hw_step(const double *x, const double *y, int64_t ys, int n, double c, int has_c, int mode) {
  int T = INT_MIN;
  for (int k = 0; k < n; ++k)
    if (x[k] != 0 && y[k * ys] != 0) T = imax(T, e4m3_exp(x[k]) + e4m3_exp(y[k * ys]) + 1);
  if (has_c && c != 0) T = imax(T, ilogb(c));
  if (T == INT_MIN) return 0;
  const double q = ldexp(1.0, T - hw_frac_bits);
  double sum = has_c ? hw_cut(c, q, mode) : 0;
  for (int k = 0; k < n; ++k) sum += hw_cut(x[k] * y[k * ys], q, mode); /* exact: all on the grid q */
  if (sum != 0 && ilogb(sum) > T) sum = hw_cut(sum, ldexp(1.0, ilogb(sum) - hw_frac_bits), mode);
  return sum;
}

/* Bound on the error of one step's result, given the exact value c0 of
 * what the accumulator should hold and the bound ce of its error so far;
 * *exact gets the exact result. x[k] may be uncertain (a P that may round
 * either way): then flip[k] != 0, xhi[k] is its largest candidate, and the
 * term is charged a whole q; *dev (in: c's deviation from c0 by such x, out:
 * the result's) bounds what the uncertain x may move the sums by, which the
 * caller accounts for apart, and which only sizes the exponents here. */
static double fp8_hw_step_bound(const double *x, const double *xhi, const int *flip, const double *y, int64_t ys, int n,
                                double c0, double ce, int has_c, double *exact, double *dev) {
  int T = INT_MIN;
  double sum = has_c ? c0 : 0, err = 0, flip_abs = 0;
  for (int k = 0; k < n; ++k) {
    const double a = xhi ? xhi[k] : x[k];
    if (a != 0 && y[k * ys] != 0) T = imax(T, e4m3_exp(a) + e4m3_exp(y[k * ys]) + 1);
    sum += x[k] * y[k * ys];
    if (flip && flip[k]) flip_abs += fabs((xhi[k] - x[k]) * y[k * ys]);
  }
  const double chi = has_c ? fabs(c0) + ce + *dev : 0, clo = has_c ? fabs(c0) - ce - *dev : 0;
  flip_abs += has_c ? *dev : 0;
  *dev = flip_abs;
  if (chi > 0) T = imax(T, ilogb(chi));
  *exact = sum;
  if (T == INT_MIN) return ce;
  const double q = ldexp(1.0, T - hw_frac_bits);
  for (int k = 0; k < n; ++k)
    if (flip && flip[k])
      err += q;
    else
      err += hw_term_err(x[k] * y[k * ys], q);
  if (chi > 0 && !(clo > 0 && ilogb(clo) == ilogb(chi) && ilogb(chi) == T)) err += q;
  const double rhi = fabs(sum) + ce + err + flip_abs;
  if (rhi > 0 && ilogb(rhi) > T) err += ldexp(1.0, ilogb(rhi) - hw_frac_bits);
  return ce + err;
}

/* ---- the kernel's computation, bounded and emulated ---------------------- */

/* One row of the problem (sequence b, query head h, row i). */
typedef struct fp8_row {
  int64_t b, h, i, kvh, lk, qb, qr;
  double sc, vd; /* scale * q_descale * k_descale; v_descale */
} fp8_row;

typedef void (*fp8_row_fn)(const fp8_io *io, const fp8_row *r, void *arg);

static void fp8_rows(const fp8_io *io, fp8_row_fn fn, void *arg) {
  const tcase *c = io->in.c;
  const tc_geom *g = &io->in.g;
  const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)g->D);
  for (int64_t b = 0; b < g->nseq; ++b)
    for (int64_t h = 0; h < g->Hq; ++h)
      for (int64_t i = 0; i < tc_lq(c, b); ++i) {
        fp8_row r = {.b = b, .h = h, .i = i, .kvh = h / g->group, .lk = tc_lk(c, b)};
        r.sc = scale * descale_at(io->qd, g, b, r.kvh) * descale_at(io->kd, g, b, r.kvh);
        r.vd = descale_at(io->vd, g, b, r.kvh);
        tc_qpos(c, b, i, &r.qb, &r.qr);
        fn(io, &r, arg);
      }
}

/* Scratch of one row: exact scores, their error bounds, V rows of its keys. */
typedef struct fp8_scratch {
  double *s, *ds, *v, *acc, *p, *phi;
  int *flip;
} fp8_scratch;

static void scratch_make(fp8_scratch *x, const tc_geom *g) {
  x->s = malloc((size_t)g->mk * sizeof(double));
  x->ds = malloc((size_t)g->mk * sizeof(double));
  x->p = malloc((size_t)g->mk * sizeof(double));
  x->phi = malloc((size_t)g->mk * sizeof(double));
  x->flip = malloc((size_t)g->mk * sizeof(int));
  x->v = malloc((size_t)(g->mk * g->Dv) * sizeof(double));
  x->acc = malloc((size_t)g->Dv * sizeof(double));
}

static void scratch_free(fp8_scratch *x) {
  free(x->s), free(x->ds), free(x->p), free(x->phi), free(x->flip), free(x->v), free(x->acc);
}

static const double *q_row(const fp8_io *io, const fp8_row *r) {
  const tc_geom *g = &io->in.g;
  const int64_t sq[4] = {g->Bt, g->Hq, g->rows_q, g->D};
  return io->in.q + idx4(sq, r->qb, r->h, r->qr, 0);
}

static const double *k_row(const fp8_io *io, const fp8_row *r, int64_t j) {
  const tc_geom *g = &io->in.g;
  const int64_t sk[4] = {g->Bt, g->Hkv, g->rows_k, g->D};
  int64_t kb, kr;
  tc_kpos(io->in.c, r->b, j, &kb, &kr);
  return io->in.k + idx4(sk, kb, r->kvh, kr, 0);
}

/* V rows of the row's keys into x->v ([lk][Dv]). */
static void gather_v(const fp8_io *io, const fp8_row *r, fp8_scratch *x) {
  const tc_geom *g = &io->in.g;
  const int64_t sv[4] = {g->Bt, g->Hkv, g->rows_k, g->Dv};
  for (int64_t j = 0; j < r->lk; ++j) {
    int64_t kb, kr;
    tc_kpos(io->in.c, r->b, j, &kb, &kr);
    memcpy(x->v + j * g->Dv, io->in.v + idx4(sv, kb, r->kvh, kr, 0), (size_t)g->Dv * sizeof(double));
  }
}

/* s = softcap(x) (identity without softcap) */
static double capped(const tcase *c, double x) {
  return c->softcap > 0 ? c->softcap * tanh(x / c->softcap) : x;
}

/* x->s: the exact scores; x->ds: bounds on how far the kernel's are off.
 * The k32 steps of S = Q K^T (D / 32 of them, one accumulator chain) as
 * the model bounds them, times scale and descales (softcap's tanh has slope
 * at most 1, ALiBi is added in f32), plus the f32 arithmetic and ex2.approx
 * from the scores to P (relative 2^-22 each; 2^-20 (2 + |s|) covers them). */
static void row_scores(const fp8_io *io, const fp8_row *r, fp8_scratch *x) {
  const int64_t D = io->in.g.D;
  const double *qv = q_row(io, r);
  for (int64_t j = 0; j < r->lk; ++j) {
    x->s[j] = tc_score(&io->in, r->b, r->h, r->i, j, r->sc);
    x->ds[j] = 0;
    if (x->s[j] == -INFINITY) continue;
    const double *kv = k_row(io, r, j);
    double c0 = 0, ce = 0, dev = 0;
    for (int64_t d0 = 0; d0 < D; d0 += 32) {
      double ex;
      ce = fp8_hw_step_bound(qv + d0, NULL, NULL, kv + d0, 1, (int)(D - d0 < 32 ? D - d0 : 32), c0, ce, d0 > 0, &ex,
                             &dev);
      c0 = ex;
    }
    x->ds[j] = ce * fabs(r->sc) + ldexp(1.0, -20) * (2 + fabs(x->s[j]));
  }
}

/* What fp8_bound works out per row. */
typedef struct fp8_bound_acc {
  fp8_scratch x;
  double *bound;             /* per element of o, natural order */
  double *lse_bound;         /* per row (natural order), or NULL */
  int64_t n_p, n_flip;       /* P values, and those that may round the other way */
  double max_ds, sum_rel_ds; /* over scores: largest bound, and sum of bound / |s| */
} fp8_bound_acc;

/* Per element of o, how far the kernel's o may be from the rule's, from
 * the model above. With the kernel's scores s'_j = s_j + d_j, |d_j| <= ds_j
 * (row_scores), its running maxima shift by mu_t = m'_t - m_t, |mu_t| <=
 * G_t = max ds over the keys seen so far. Taking the last shift out of
 * numerator and denominator alike,
 *   o' = sum_t W_t e^(mu_t - mu_last) sum_{j in t} (R'_j v_j + E_t)
 *        / sum_j u_j e^(d_j - mu_last) * v_descale,
 * W_t = e^(m_t - m_last) the rule's block weights, R_j = e4m3(P_j) (R'_j
 * the kernel's), u_j = 2^8 e^(s_j - m_last), E_t the error of block t's
 * P V temporary (4 k32 steps from zero). Bounded term by term:
 *   P_j moves by at most e^(+-w_j), w_j = ds_j + G_t: if e4m3 rounds the
 *     two ends apart, R'_j may be either (a flip): F_j = the largest jump;
 *   |mu_t - mu_last| <= a_t = 0 when block t already holds the row's
 *     maximum and no later key can come within reach of it, else G_t +
 *     G_last (a shift that scales that block's whole sum);
 *   the denominator moves by at most sum_j u_j (e^(ds_j + G_last) - 1),
 *     which moves o by that relative amount (l's error);
 *   E_t by fp8_hw_step_bound over its steps (flipping P charged a whole
 *     grid step).
 * The f32 arithmetic of the add into O and of l comes on top (the
 * caller's tolerance keeps its f32 / output rounding terms). */
static void bound_row(const fp8_io *io, const fp8_row *r, void *arg) {
  fp8_bound_acc *A = arg;
  fp8_scratch *x = &A->x;
  const tc_geom *g = &io->in.g;
  const int64_t Dv = g->Dv, bk = FA__FP8_BLOCK_K, lk = r->lk, nt = (lk + bk - 1) / bk;
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, Dv};
  row_scores(io, r, x);
  gather_v(io, r, x);
  /* per block: running max m_t, G_t, max(s - ds); the suffix max of s + ds */
  double m = -INFINITY, G = 0, mlo = -INFINITY;
  double *mt = malloc((size_t)(4 * nt + 1) * sizeof(double)), *Gt = mt + nt, *mlot = Gt + nt, *up = mlot + nt;
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t j = t * bk; j < lk && j < (t + 1) * bk; ++j)
      if (x->s[j] != -INFINITY) {
        m = fmax(m, x->s[j]);
        G = fmax(G, x->ds[j]);
        mlo = fmax(mlo, x->s[j] - x->ds[j]);
        A->max_ds = fmax(A->max_ds, x->ds[j]);
        A->sum_rel_ds += x->ds[j] / fmax(fabs(x->s[j]), 1e-3);
      }
    mt[t] = m, Gt[t] = G, mlot[t] = mlo;
  }
  up[nt] = -INFINITY;
  for (int64_t t = nt - 1; t >= 0; --t) {
    double u = -INFINITY;
    for (int64_t j = t * bk; j < lk && j < (t + 1) * bk; ++j)
      if (x->s[j] != -INFINITY) u = fmax(u, x->s[j] + x->ds[j]);
    up[t] = fmax(u, t + 1 < nt ? up[t + 1] : -INFINITY);
  }
  if (m == -INFINITY) { /* nothing visible: o = 0 on both sides */
    free(mt);
    return;
  }
  const double mlast = m, Glast = G;
  /* lse = log sum_j e^(s_j) (up to the constant shift) moves by a weighted
   * mean of the d_j: at most their largest bound, Glast */
  if (A->lse_bound) A->lse_bound[(r->qb * g->Hq + r->h) * g->rows_q + r->qr] = Glast;
  /* P, its rounding, its flips; the denominator and its error */
  double L = 0, Lerr = 0, wmax = 0;
  for (int64_t j = 0; j < lk; ++j) {
    x->p[j] = x->phi[j] = 0, x->flip[j] = 0;
    if (x->s[j] == -INFINITY) continue;
    const int64_t t = j / bk;
    const double P = 256.0 * exp(x->s[j] - mt[t]), w = x->ds[j] + Gt[t];
    const double R = fa__e4m3_round(P), rlo = fa__e4m3_round(P * exp(-w)), rhi = fa__e4m3_round(fmin(P * exp(w), 256));
    x->p[j] = R;
    x->flip[j] = rlo != rhi;
    x->phi[j] = R + fmax(rhi - R, R - rlo); /* R + the largest jump: sizes exponents and the flip's slack */
    A->n_p++, A->n_flip += x->flip[j];
    const double u = 256.0 * exp(x->s[j] - mlast), dw = x->ds[j] + Glast;
    L += u, Lerr += u * expm1(dw), wmax = fmax(wmax, dw);
  }
  for (int64_t d = 0; d < Dv; ++d) {
    double num = 0, err = 0;
    for (int64_t t = 0; t < nt; ++t) {
      if (mt[t] == -INFINITY) continue;
      const double W = exp(mt[t] - mlast);
      const double at = (mt[t] == mlast && up[t + 1 < nt ? t + 1 : nt] <= mlot[t]) ? 0 : Gt[t] + Glast;
      const double rho = expm1(at);
      double c0 = 0, ce = 0, dev = 0, fl = 0;
      for (int64_t j0 = t * bk; j0 < lk && j0 < (t + 1) * bk; j0 += 32) {
        const int n = (int)(lk - j0 < 32 ? lk - j0 : 32);
        double ex;
        ce = fp8_hw_step_bound(x->p + j0, x->phi + j0, x->flip + j0, x->v + j0 * Dv + d, Dv, n, c0, ce, j0 > t * bk,
                               &ex, &dev);
        c0 = ex;
        for (int k = 0; k < n; ++k)
          if (x->flip[j0 + k]) fl += fabs((x->phi[j0 + k] - x->p[j0 + k]) * x->v[(j0 + k) * Dv + d]);
      }
      num += W * c0;
      err += W * ((1 + rho) * (fl + ce) + rho * fabs(c0));
    }
    const double oraw = num / L;
    A->bound[idx4(so, r->qb, r->h, r->qr, d)] = (err + fabs(oraw) * Lerr) / (L * exp(-wmax)) * fabs(r->vd);
  }
  free(mt);
}

/* bound: per element of o (natural order); returns the share of P that may
 * round the other way in the kernel. */
static double fp8_bound(const fp8_io *io, double *bound, double *lse_bound) {
  const tc_geom *g = &io->in.g;
  fp8_bound_acc A = {.bound = bound, .lse_bound = lse_bound};
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) bound[e] = 0;
  if (lse_bound)
    for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q; ++e) lse_bound[e] = 0;
  scratch_make(&A.x, g);
  fp8_rows(io, bound_row, &A);
  scratch_free(&A.x);
  return A.n_p ? (double)A.n_flip / (double)A.n_p : 0;
}

/* The model's hardware run by hand: S by k32 steps, the softmax of the rule
 * on those scores (exact), P V by k32 steps, either two-level (each block's
 * 4 steps from zero, added in f32 as the kernel does) or, two_level = 0, in
 * one accumulator across all blocks (the kernel before two-level: O
 * rescaled in f32, then accumulated on). mode: 0 cut down, 1 towards zero. */
typedef struct fp8_emul {
  fp8_scratch x;
  int mode, two_level;
  double *o;
} fp8_emul;

static void emul_row(const fp8_io *io, const fp8_row *r, void *arg) {
  fp8_emul *E = arg;
  fp8_scratch *x = &E->x;
  const tcase *c = io->in.c;
  const tc_geom *g = &io->in.g;
  const int64_t Dv = g->Dv, D = g->D, bk = FA__FP8_BLOCK_K, lk = r->lk;
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, Dv};
  const double *qv = q_row(io, r);
  gather_v(io, r, x);
  for (int64_t j = 0; j < lk; ++j) {
    x->s[j] = tc_score(&io->in, r->b, r->h, r->i, j, r->sc);
    if (x->s[j] == -INFINITY) continue;
    const double *kv = k_row(io, r, j);
    double hw = 0, exact = 0;
    for (int64_t d0 = 0; d0 < D; d0 += 32)
      hw = fp8_hw_step(qv + d0, kv + d0, 1, (int)(D - d0 < 32 ? D - d0 : 32), hw, d0 > 0, E->mode);
    for (int64_t d = 0; d < D; ++d) exact += qv[d] * kv[d];
    /* the exact score's ALiBi (and anything else added after softcap) kept */
    x->s[j] = capped(c, (double)(float)(hw * r->sc)) + (x->s[j] - capped(c, exact * r->sc));
  }
  double m = -INFINITY, l = 0;
  for (int64_t d = 0; d < Dv; ++d) x->acc[d] = 0;
  for (int64_t j0 = 0; j0 < lk; j0 += bk) {
    const int64_t j1 = j0 + bk < lk ? j0 + bk : lk;
    double mn = m;
    for (int64_t j = j0; j < j1; ++j) mn = fmax(mn, x->s[j]);
    if (mn == -INFINITY) continue;
    const double alpha = exp(m - mn);
    l *= alpha;
    for (int64_t j = j0; j < j1; ++j) {
      x->p[j] = x->s[j] == -INFINITY ? 0 : 256.0 * exp(x->s[j] - mn);
      l += x->p[j];
      x->p[j] = fa__e4m3_round(x->p[j]);
    }
    for (int64_t d = 0; d < Dv; ++d) {
      double a = E->two_level ? 0 : (double)(float)(x->acc[d] * alpha);
      for (int64_t k0 = j0; k0 < j1; k0 += 32)
        a = fp8_hw_step(x->p + k0, x->v + k0 * Dv + d, Dv, (int)(j1 - k0 < 32 ? j1 - k0 : 32), a,
                        !E->two_level || k0 > j0, E->mode);
      x->acc[d] = E->two_level ? (double)(float)(x->acc[d] * alpha + a) : a;
    }
    m = mn;
  }
  if (m == -INFINITY) return;
  for (int64_t d = 0; d < Dv; ++d) E->o[idx4(so, r->qb, r->h, r->qr, d)] = x->acc[d] * r->vd / l;
}

static void fp8_emulate(const fp8_io *io, int mode, int two_level, double *o) {
  const tc_geom *g = &io->in.g;
  fp8_emul E = {.mode = mode, .two_level = two_level, .o = o};
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) o[e] = 0;
  scratch_make(&E.x, g);
  fp8_rows(io, emul_row, &E);
  scratch_free(&E.x);
}

/* ---- one call ------------------------------------------------------------ */

typedef struct fp8_call {
  tc_tensors T;
  tbuf qd, kd, vd;
} fp8_call;

static void io_make(fp8_io *io, const fcase *f, uint64_t seed) {
  memset(io, 0, sizeof *io);
  tc_inputs_make(&io->in, &f->c, FA_F8_E4M3, seed);
  if (!f->descale) return;
  const tc_geom *g = &io->in.g;
  const int64_t n = g->nseq * g->Hkv;
  double **ds[3] = {&io->qd, &io->kd, &io->vd};
  for (int x = 0; x < 3; ++x) {
    *ds[x] = (double *)malloc((size_t)n * sizeof(double));
    for (int64_t e = 0; e < n; ++e) { /* f32-exact magnitudes in [0.25, 2] */
      (*ds[x])[e] = f->descale == 1 ? 0.5 + 0.25 * x : ldexp(1.0 + (double)((e * 7 + x * 3) % 8) / 8.0, -1 + x % 2);
      if (f->descale == 3 && x == 1 && e % 2) (*ds[x])[e] = -(*ds[x])[e];
    }
  }
}

static void io_free(fp8_io *io) {
  tc_inputs_free(&io->in);
  free(io->qd);
  free(io->kd);
  free(io->vd);
}

/* The tensors of one call on memory mem (device when on_device). */
static int call_make(fp8_call *fc, const fp8_io *io, const fcase *f, int on_device) {
  memset(fc, 0, sizeof *fc);
  if (tc_tensors_make(&fc->T, &io->in, FA_F8_E4M3, f->c.layout, on_device) != 0) return -1;
  const tc_geom *g = &io->in.g;
  const fa_memory mem = on_device ? FA_MEMORY_CUDA : FA_MEMORY_AUTO;
  /* o in bf16 / f16 instead of the e4m3 tc_tensors_make made */
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, g->Dv};
  tb_free(&fc->T.o);
  tb_alloc(&fc->T.o, odt_of(f), so, 4, f->c.layout, 0, mem);
  if (tb_upload(&fc->T.o) != 0) return -1;
  if (f->descale) {
    const int64_t shape[4] = {f->descale == 1 ? 1 : g->nseq, f->descale == 1 ? 1 : g->Hkv, 1, 1};
    tbuf *bs[3] = {&fc->qd, &fc->kd, &fc->vd};
    const double *vals[3] = {io->qd, io->kd, io->vd};
    fa_tensor *opts[3] = {&fc->T.opt.q_descale, &fc->T.opt.k_descale, &fc->T.opt.v_descale};
    for (int x = 0; x < 3; ++x) {
      tb_alloc(bs[x], FA_F32, shape, 4, TL_BHLD, 0, mem);
      for (int64_t b = 0; b < shape[0]; ++b)
        for (int64_t h = 0; h < shape[1]; ++h) tb_set(bs[x], b, h, 0, 0, vals[x][b * g->Hkv + h]);
      if (tb_upload(bs[x]) != 0) return -1;
      *opts[x] = bs[x]->t;
    }
  }
  return 0;
}

static void call_free(fp8_call *fc) {
  tc_tensors_free(&fc->T);
  tb_free(&fc->qd);
  tb_free(&fc->kd);
  tb_free(&fc->vd);
}

static fa_status call_run(fp8_call *fc, fa_context *ctx, fa_backend be) {
  return fa_forward(ctx, be, &fc->T.q.t, &fc->T.k.t, &fc->T.v.t, &fc->T.opt, &fc->T.o.t, &fc->T.lse.t);
}

/* ref's o and lse of case f in natural order (the caller frees). */
static void ref_outputs(const fp8_io *io, const fcase *f, double **o, double **lse) {
  fp8_call fc;
  assert_int_equal(call_make(&fc, io, f, 0), 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  const fa_status st = call_run(&fc, ctx, FA_BACKEND_REF);
  if (st != FA_OK) fail_msg("ref refused %s: %s", f->c.name, fa_context_last_error(ctx));
  fa_context_destroy(ctx);
  *o = tb_logical(&fc.T.o);
  *lse = tb_logical(&fc.T.lse);
  call_free(&fc);
}

/* ---- the tests ------------------------------------------------------------ */

/* What a backend is documented to do with an FP8 case (docs/semantics.md):
 * FA_OK, or the status it refuses it with. */
static fa_status fp8_refuses(const fcase *f) {
  if (g_be->id == FA_BACKEND_CPU) return FA_ERR_DTYPE; /* no FP8 */
  if (g_be->id == FA_BACKEND_CUDA) {
    if (f->c.block_k && f->c.block_k != FA__FP8_BLOCK_K) return FA_ERR_UNSUPPORTED; /* the kernel's key tile only */
    if (f->c.layout == TL_PADDED || f->c.layout == TL_STRIDED) return FA_ERR_UNSUPPORTED; /* 16-byte rows */
  }
  return FA_OK;
}

static uint64_t seed_of(int i) {
  return 0xf8f80000ull + (uint64_t)i;
}

/* ref against the rule above: o rounded to its dtype once (2^-8 relative
 * for bf16, 2^-11 for f16), lse stored in f32. */
static void check_ref(const fcase *f, int i) {
  fp8_io io;
  io_make(&io, f, seed_of(i));
  const tc_geom *g = &io.in.g;
  const int64_t no = g->Bt * g->Hq * g->rows_q * g->Dv, nl = g->Bt * g->Hq * g->rows_q;
  double *o = malloc((size_t)no * sizeof(double)), *lse = malloc((size_t)nl * sizeof(double)), *ro, *rl;
  fp8_rule(&io, f->c.block_k ? f->c.block_k : FA__FP8_BLOCK_K, 1, BUG_NONE, o, lse);
  ref_outputs(&io, f, &ro, &rl);
  const double rel = odt_of(f) == FA_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
  for (int64_t e = 0; e < no; ++e)
    if (!(fabs(ro[e] - o[e]) <= rel * fabs(o[e]) + 1e-7))
      fail_msg("%s: ref o[%lld] = %.9g, the rule gives %.9g", f->c.name, (long long)e, ro[e], o[e]);
  for (int64_t e = 0; e < nl; ++e)
    if (!(rl[e] == lse[e] || fabs(rl[e] - lse[e]) <= 1e-6 * (1 + fabs(lse[e]))))
      fail_msg("%s: ref lse[%lld] = %.9g, the rule gives %.9g", f->c.name, (long long)e, rl[e], lse[e]);
  free(o), free(lse), free(ro), free(rl);
  io_free(&io);
}

/* cuda against ref. Both round P to e4m3 in the same key blocks; what is
 * left is the tensor cores' arithmetic, bounded element by element by
 * fp8_bound (the model above: S's k32 steps move the scores by up to ds_j,
 * which moves P, may round P to the neighbouring e4m3 value where it lies
 * that close to a rounding boundary, and moves l; each block's P V
 * temporary has its steps' error), then the kernel's f32 arithmetic (sums in
 * another order, ex2.approx: near 2^-20 of o; 1e-4 of max |v| covers it) and
 * o's own rounding (both round to bf16: one ulp, 2^-7 relative, apart at
 * most; f16 2^-10). hw: fp8_bound's value for the element. */
static double cuda_tolerance(const fcase *f, double o_ref, double hw, double vmax) {
  const double rel = odt_of(f) == FA_F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
  return rel * fabs(o_ref) + 1e-4 * vmax + hw;
}

/* max |v| * max v_descale of a case (the tolerance's f32 term) */
static double vscale_of(const fp8_io *io) {
  const tc_geom *g = &io->in.g;
  double vmax = 0, vdmax = 1;
  for (int64_t e = 0; e < g->Bt * g->Hkv * g->rows_k * g->Dv; ++e) vmax = fmax(vmax, fabs(io->in.v[e]));
  if (io->vd)
    for (int64_t e = 0; e < g->nseq * g->Hkv; ++e) vdmax = fmax(vdmax, io->vd[e]);
  return vmax * vdmax;
}

static void check_backend(const fcase *f, int i) {
  fp8_io io;
  io_make(&io, f, seed_of(i));
  const tc_geom *g = &io.in.g;
  fp8_call fc;
  const int on_device = g_be->memory == FA_MEMORY_CUDA;
  if (call_make(&fc, &io, f, on_device) != 0) fail_msg("%s: cannot make the tensors: %s", f->c.name, tdev_last_error());
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  const fa_status st = call_run(&fc, ctx, g_be->id), want = fp8_refuses(f);
  if (want != FA_OK) { /* the documented refusal, with a message, nothing written */
    if (st != want || !fa_context_last_error(ctx)[0])
      fail_msg("%s on %s: %s (%s), expected %s", f->c.name, g_be->name, fa_status_name(st), fa_context_last_error(ctx),
               fa_status_name(want));
    if (g_be->id == FA_BACKEND_CPU && !strstr(fa_context_last_error(ctx), "no FP8"))
      fail_msg("%s: cpu's message does not say it has no FP8: %s", f->c.name, fa_context_last_error(ctx));
    assert_int_equal(tb_download(&fc.T.o), 0);
    if (!tb_all_poison(&fc.T.o)) fail_msg("%s: %s wrote o while refusing", f->c.name, g_be->name);
  } else {
    if (st != FA_OK)
      fail_msg("%s on %s: %s: %s", f->c.name, g_be->name, fa_status_name(st), fa_context_last_error(ctx));
    assert_int_equal(tb_download(&fc.T.o), 0);
    assert_int_equal(tb_download(&fc.T.lse), 0);
    if (!tb_guards_ok(&fc.T.o) || !tb_guards_ok(&fc.T.lse)) fail_msg("%s: a write outside o or lse", f->c.name);
    if (tb_dirty_holes(&fc.T.o)) fail_msg("%s: a write into the padding of o", f->c.name);
    double *bo = tb_logical(&fc.T.o), *bl = tb_logical(&fc.T.lse), *ro, *rl;
    ref_outputs(&io, f, &ro, &rl);
    const int64_t no = g->Bt * g->Hq * g->rows_q * g->Dv, nl = g->Bt * g->Hq * g->rows_q;
    double *hw = malloc((size_t)(no + nl) * sizeof(double)), *hw_lse = hw + no;
    const double flips = fp8_bound(&io, hw, hw_lse), vs = vscale_of(&io);
    double worst = 0, sum_err = 0, sum_tol = 0;
    for (int64_t e = 0; e < no; ++e) {
      const double tol = cuda_tolerance(f, ro[e], hw[e], vs), err = fabs(bo[e] - ro[e]);
      worst = fmax(worst, err / tol), sum_err += err, sum_tol += tol;
      if (!(err <= tol))
        fail_msg("%s on %s: o[%lld] = %.9g, ref %.9g (tolerance %.3g, of which the tensor cores' %.3g)", f->c.name,
                 g_be->name, (long long)e, bo[e], ro[e], tol, hw[e]);
    }
    /* lse: f32 arithmetic (1e-4 relative) plus the scores' error bound of
     * the row (the tensor cores' S steps; bound_row) */
    for (int64_t e = 0; e < nl; ++e)
      if (!(bl[e] == rl[e] || fabs(bl[e] - rl[e]) <= 1e-4 * (1 + fabs(rl[e])) + hw_lse[e]))
        fail_msg("%s on %s: lse[%lld] = %.9g, ref %.9g (tolerance %.3g, of which the tensor cores' %.3g)", f->c.name,
                 g_be->name, (long long)e, bl[e], rl[e], 1e-4 * (1 + fabs(rl[e])) + hw_lse[e], hw_lse[e]);
    print_message(
        "    %s: |o - ref| at most %.2f of the tolerance (mean error %.3g, mean tolerance %.3g); %.1f%% of P "
        "may round the other way\n",
        f->c.name, worst, sum_err / (double)no, sum_tol / (double)no, 100 * flips);
    free(bo), free(bl), free(ro), free(rl), free(hw);
  }
  fa_context_destroy(ctx);
  call_free(&fc);
  io_free(&io);
}

static void test_case(void **state) {
  const int i = (int)(intptr_t)*state;
  if (!g_usable) {
    print_message("skipped: %s\n", g_why);
    skip();
  }
  if (g_be->id == FA_BACKEND_REF)
    check_ref(&g_cases[i], i);
  else
    check_backend(&g_cases[i], i);
}

static int case_index(const char *name) {
  int i = 0;
  while (strcmp(g_cases[i].c.name, name) != 0) ++i;
  return i;
}

/* The rule is not vacuous: on the peaked case, rounding P to e4m3 moves o by
 * more than the tolerance cuda is held to. */
static void test_rounding_matters(void **state) {
  (void)state;
  const int i = case_index("peaked_mag2");
  fp8_io io;
  io_make(&io, &g_cases[i], seed_of(i));
  const tc_geom *g = &io.in.g;
  const int64_t no = g->Bt * g->Hq * g->rows_q * g->Dv, nl = g->Bt * g->Hq * g->rows_q;
  double *o8 = malloc((size_t)no * sizeof(double)), *o = malloc((size_t)no * sizeof(double));
  double *lse = malloc((size_t)nl * sizeof(double)), *hw = malloc((size_t)no * sizeof(double));
  fp8_rule(&io, FA__FP8_BLOCK_K, 1, BUG_NONE, o8, lse);
  fp8_rule(&io, FA__FP8_BLOCK_K, 0, BUG_NONE, o, lse);
  fp8_bound(&io, hw, NULL);
  const double vs = vscale_of(&io);
  int64_t beyond = 0;
  double worst = 0;
  for (int64_t e = 0; e < no; ++e) {
    const double d = fabs(o8[e] - o[e]);
    worst = fmax(worst, d);
    if (d > cuda_tolerance(&g_cases[i], o8[e], hw[e], vs)) ++beyond;
  }
  print_message("    rounding P to e4m3: max |change of o| %.3g; %lld of %lld elements beyond the tolerance\n", worst,
                (long long)beyond, (long long)no);
  assert_true(beyond > 0);
  free(o8), free(o), free(lse), free(hw);
  io_free(&io);
}

/* Case i on the host: its inputs, the rule's o (and lse), the model's bound
 * per element of o, the share of P that may flip, and scratch x of o's size. */
typedef struct fp8_host_run {
  fp8_io io;
  int64_t no;
  double *o, *lse, *hw, *x;
  double flips, vs;
} fp8_host_run;

static void host_run_make(fp8_host_run *m, int i) {
  io_make(&m->io, &g_cases[i], seed_of(i));
  const tc_geom *g = &m->io.in.g;
  const int64_t nl = g->Bt * g->Hq * g->rows_q;
  m->no = nl * g->Dv;
  m->o = malloc((size_t)(3 * m->no + nl) * sizeof(double));
  m->hw = m->o + m->no, m->x = m->hw + m->no, m->lse = m->x + m->no;
  fp8_rule(&m->io, FA__FP8_BLOCK_K, 1, BUG_NONE, m->o, m->lse);
  m->flips = fp8_bound(&m->io, m->hw, NULL);
  m->vs = vscale_of(&m->io);
}

static void host_run_free(fp8_host_run *m) {
  free(m->o);
  io_free(&m->io);
}

/* The tolerance covers the model it is derived from: the model's hardware
 * run by hand (fp8_emulate, cutting down and towards zero) stays within it
 * on every case the kernel runs. The kernel before two-level accumulation
 * (P V in one accumulator across key blocks) is run too, for comparison. */
static void test_hw_model(void **state) {
  (void)state;
  for (int i = 0; i < NCASES; ++i) {
    const fcase *f = &g_cases[i];
    if (f->c.block_k && f->c.block_k != FA__FP8_BLOCK_K) continue;
    fp8_host_run m;
    host_run_make(&m, i);
    const int64_t no = m.no;
    const double *o = m.o, *hw = m.hw, vs = m.vs, flips = m.flips;
    double *oe = m.x;
    double worst[3] = {0, 0, 0};
    int64_t old_beyond = 0;
    for (int run = 0; run < 3; ++run) { /* two-level cut down, towards zero; one chain cut down */
      fp8_emulate(&m.io, run == 1, run < 2, oe);
      for (int64_t e = 0; e < no; ++e) {
        const double err = fabs(oe[e] - o[e]), tol = cuda_tolerance(f, o[e], hw[e], vs);
        worst[run] = fmax(worst[run], err / tol);
        if (run == 2 && err > cuda_tolerance(f, o[e], 0, vs)) ++old_beyond;
        if (run < 2 && !(err <= tol))
          fail_msg("%s: the model's hardware (%s) gives o[%lld] = %.9g, the rule %.9g, tolerance %.3g", f->c.name,
                   run ? "towards zero" : "cut down", (long long)e, oe[e], o[e], tol);
      }
    }
    print_message(
        "    %-22s error / tolerance at most %.2f, %.2f (two-level), %.2f (one chain: %lld of %lld beyond "
        "the f32 and rounding terms alone); %.1f%% of P may flip\n",
        f->c.name, worst[0], worst[1], worst[2], (long long)old_beyond, (long long)no, 100 * flips);
    host_run_free(&m);
  }
}

/* The tolerance can fail: the rule with a bug a kernel could have (P of the
 * wrong key, a key block left out, v_descale twice) is rejected, in a share
 * of the elements printed. */
static void test_rejects_bugs(void **state) {
  (void)state;
  const struct {
    const char *name;
    enum fp8_bug bug;
    const char *what;
  } t[] = {
      {"basic", BUG_SWAP_P, "P of keys 2k, 2k+1 swapped"},
      {"basic", BUG_DROP_LAST, "last key block dropped"},
      {"D256", BUG_SWAP_P, "P of keys 2k, 2k+1 swapped"},
      {"descale_heads_gqa", BUG_SWAP_P, "P of keys 2k, 2k+1 swapped"},
      {"descale_heads_gqa", BUG_V_DESCALE_SQ, "v_descale twice"},
      {"peaked_mag2", BUG_SWAP_P, "P of keys 2k, 2k+1 swapped"},
  };
  for (size_t x = 0; x < sizeof t / sizeof t[0]; ++x) {
    const int i = case_index(t[x].name);
    const fcase *f = &g_cases[i];
    fp8_host_run m;
    host_run_make(&m, i);
    const int64_t no = m.no;
    const double *o = m.o, *hw = m.hw, vs = m.vs;
    double *ob = m.x;
    fp8_rule(&m.io, FA__FP8_BLOCK_K, 1, t[x].bug, ob, m.lse);
    int64_t beyond = 0;
    for (int64_t e = 0; e < no; ++e)
      if (fabs(ob[e] - o[e]) > cuda_tolerance(f, o[e], hw[e], vs)) ++beyond;
    print_message("    %s, %s: %lld of %lld elements (%.1f%%) beyond the tolerance\n", t[x].name, t[x].what,
                  (long long)beyond, (long long)no, 100.0 * (double)beyond / (double)no);
    if (beyond == 0) fail_msg("%s: the tolerance accepts %s", t[x].name, t[x].what);
    host_run_free(&m);
  }
}

/* e4m3 encoding: every byte decodes and encodes back (NaN to NaN), and
 * rounding is to nearest even, saturating. */
static void test_e4m3_format(void **state) {
  (void)state;
  for (int b = 0; b < 256; ++b) {
    const double x = fa__e4m3_to_double((uint8_t)b);
    if (isnan(x)) {
      assert_int_equal(b & 0x7f, 0x7f);
      continue;
    }
    assert_int_equal(fa__double_to_e4m3(x), b);
  }
  assert_true(fa__e4m3_to_double(0x7e) == 448.0);
  assert_true(fa__e4m3_to_double(0x01) == ldexp(1.0, -9));
  assert_true(fa__e4m3_round(1.0625) == 1.0);  /* tie: to even */
  assert_true(fa__e4m3_round(1.1875) == 1.25); /* tie: to even */
  assert_true(fa__e4m3_round(1000.0) == 448.0);
  assert_true(fa__e4m3_round(ldexp(1.0, -10)) == 0.0); /* half the smallest subnormal: to even (0) */
  assert_true(fa__e4m3_round(ldexp(1.5, -10)) == ldexp(1.0, -9));
}

/* ---- argument checks (ref program only: they are backend-independent) ---- */

static fa_status bad_call(const char *what, void (*perturb)(fp8_call *, fa_options *), fa_backend be, char *msg,
                          size_t n) {
  (void)what;
  const fcase *f = &g_cases[2]; /* descales per (b, kv head), GQA */
  fp8_io io;
  io_make(&io, f, 1);
  fp8_call fc;
  assert_int_equal(call_make(&fc, &io, f, 0), 0);
  fa_options opt = fc.T.opt;
  perturb(&fc, &opt);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  const fa_status st = fa_forward(ctx, be, &fc.T.q.t, &fc.T.k.t, &fc.T.v.t, &opt, &fc.T.o.t, &fc.T.lse.t);
  snprintf(msg, n, "%s", fa_context_last_error(ctx));
  if (st != FA_OK && !tb_all_poison(&fc.T.o)) fail_msg("%s: o written on error", what);
  fa_context_destroy(ctx);
  call_free(&fc);
  io_free(&io);
  return st;
}

static void p_none(fp8_call *c, fa_options *o) {
  (void)c, (void)o;
}
static void p_o_f32(fp8_call *c, fa_options *o) {
  (void)o;
  c->T.o.t.dtype = FA_F32;
}
static void p_o_e4m3(fp8_call *c, fa_options *o) {
  (void)o;
  c->T.o.t.dtype = FA_F8_E4M3;
}
static void p_k_bf16(fp8_call *c, fa_options *o) {
  (void)o;
  c->T.k.t.dtype = FA_BF16;
}
static void p_descale_shape(fp8_call *c, fa_options *o) {
  (void)c;
  o->k_descale.shape[1] = 3; /* Hkv = 2 */
}
static void p_descale_dtype(fp8_call *c, fa_options *o) {
  (void)c;
  o->v_descale.dtype = FA_F64;
}
static void p_descale_not_fp8(fp8_call *c, fa_options *o) {
  (void)o;
  c->T.q.t.dtype = c->T.k.t.dtype = c->T.v.t.dtype = FA_BF16;
}
static void p_mask(fp8_call *c, fa_options *o) {
  (void)c;
  static uint8_t m[1] = {1};
  o->mask = fa_tensor_contiguous(m, FA_BOOL, 1, 1, 1, 1);
}
static void p_dropout(fp8_call *c, fa_options *o) {
  (void)c;
  o->dropout_p = 0.1;
}
static void p_bias(fp8_call *c, fa_options *o) {
  (void)c;
  static float bb[1] = {0};
  o->bias = fa_tensor_contiguous(bb, FA_F32, 1, 1, 1, 1);
}

static void test_bad_input(void **state) {
  (void)state;
  char msg[512];
  struct {
    const char *name;
    void (*perturb)(fp8_call *, fa_options *);
    fa_status want;
    const char *word;
  } t[] = {
      {"valid", p_none, FA_OK, ""},
      {"o f32", p_o_f32, FA_ERR_DTYPE, "o->dtype"},
      {"o e4m3", p_o_e4m3, FA_ERR_DTYPE, "o->dtype"},
      {"k bf16", p_k_bf16, FA_ERR_DTYPE, "k->dtype"},
      {"descale shape", p_descale_shape, FA_ERR_SHAPE, "opt->k_descale"},
      {"descale dtype", p_descale_dtype, FA_ERR_DTYPE, "opt->v_descale"},
      {"descale without e4m3", p_descale_not_fp8, FA_ERR_OPTION, "opt->q_descale"},
      {"mask", p_mask, FA_ERR_OPTION, "opt->mask"},
      {"bias", p_bias, FA_ERR_OPTION, "opt->bias"},
      {"dropout", p_dropout, FA_ERR_OPTION, "opt->dropout_p"},
  };
  for (size_t x = 0; x < sizeof t / sizeof t[0]; ++x) {
    const fa_status st = bad_call(t[x].name, t[x].perturb, FA_BACKEND_REF, msg, sizeof msg);
    if (st != t[x].want || !strstr(msg, t[x].word))
      fail_msg("%s: %s (\"%s\"), expected %s naming %s", t[x].name, fa_status_name(st), msg, fa_status_name(t[x].want),
               t[x].word);
  }
  /* auto on host memory: cpu has no FP8, ref takes it */
  const fa_status st = bad_call("auto", p_none, FA_BACKEND_AUTO, msg, sizeof msg);
  assert_int_equal(st, FA_OK);
}

/* No FP8 backward: fa_backward with e4m3 tensors is FA_ERR_DTYPE. */
static void test_backward_refused(void **state) {
  (void)state;
  const fcase *f = &g_cases[0];
  fp8_io io;
  io_make(&io, f, 1);
  fp8_call fc;
  assert_int_equal(call_make(&fc, &io, f, 0), 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  tc_tensors *T = &fc.T;
  const fa_status st = fa_backward(ctx, FA_BACKEND_REF, &T->q.t, &T->k.t, &T->v.t, &T->o.t, &T->dout.t, &T->lse.t,
                                   &T->opt, &T->dq.t, &T->dk.t, &T->dv.t, NULL);
  assert_int_equal(st, FA_ERR_DTYPE);
  assert_non_null(strstr(fa_context_last_error(ctx), "forward only"));
  assert_true(tb_all_poison(&T->dq) && tb_all_poison(&T->dk) && tb_all_poison(&T->dv));
  fa_context_destroy(ctx);
  call_free(&fc);
  io_free(&io);
}

int main(void) {
  g_be = tb_program_backend(FA_TEST_BACKEND_NAME, &g_usable, g_why, sizeof g_why);
  if (!g_be) return 1;
  const char *bits = getenv("FA_TEST_FP8_ACC_BITS");
  if (bits) hw_frac_bits = atoi(bits);
  struct CMUnitTest tests[NCASES + 6];
  int n = 0;
  for (int i = 0; i < NCASES; ++i)
    tests[n++] = (struct CMUnitTest){g_cases[i].c.name, test_case, NULL, NULL, (void *)(intptr_t)i};
  if (g_be->id == FA_BACKEND_REF) {
    tests[n++] = (struct CMUnitTest){"e4m3_format", test_e4m3_format, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"rounding_matters", test_rounding_matters, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"hw_model", test_hw_model, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"rejects_bugs", test_rejects_bugs, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"bad_input", test_bad_input, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"backward_refused", test_backward_refused, NULL, NULL, NULL};
  }
  char group[64];
  snprintf(group, sizeof group, "fp8_%s", g_be->name);
  if (!g_usable) fprintf(stderr, "%s backend: every FP8 test skipped: %s\n", g_be->name, g_why);
  const int failed = _cmocka_run_group_tests(group, tests, (size_t)n, NULL, NULL);
  if (failed) return 1;
  return g_usable ? 0 : SKIP_RETURN_CODE;
}
