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

/* descales: 0 none, 1 per tensor ([1, 1] broadcast), 2 per (sequence, kv head) */
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

/* o, lse in natural order of [Bt, Hq, rows_q, Dv] / [Bt, Hq, rows_q]; with
 * round_p = 0 P goes into P V unrounded. slack (may be NULL): per element
 * of o, what the P values lying within a relative 2^-14 of an e4m3
 * rounding boundary could move it by if rounded the other way. */
static void fp8_rule(const fp8_io *io, int bk, int round_p, double *o, double *lse, double *slack) {
  const tc_inputs *in = &io->in;
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  const double scale = c->scale != 0 ? c->scale : 1.0 / sqrt((double)g->D), eps = ldexp(1.0, -14);
  const int64_t so[4] = {g->Bt, g->Hq, g->rows_q, g->Dv}, sv[4] = {g->Bt, g->Hkv, g->rows_k, g->Dv};
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q; ++e) lse[e] = -INFINITY;
  for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) o[e] = 0.0;
  if (slack)
    for (int64_t e = 0; e < g->Bt * g->Hq * g->rows_q * g->Dv; ++e) slack[e] = 0.0;
  double *s = (double *)malloc((size_t)g->mk * sizeof(double));
  double *acc = (double *)malloc((size_t)g->Dv * 2 * sizeof(double)), *sl = acc + g->Dv;
  for (int64_t b = 0; b < g->nseq; ++b)
    for (int64_t h = 0; h < g->Hq; ++h) {
      const int64_t kvh = h / g->group, lk = tc_lk(c, b);
      const double sc = scale * descale_at(io->qd, g, b, kvh) * descale_at(io->kd, g, b, kvh);
      const double vd = descale_at(io->vd, g, b, kvh);
      for (int64_t i = 0; i < tc_lq(c, b); ++i) {
        int64_t qb, qr;
        tc_qpos(c, b, i, &qb, &qr);
        for (int64_t j = 0; j < lk; ++j) s[j] = tc_score(in, b, h, i, j, sc);
        double m = -INFINITY, l = 0;
        for (int64_t d = 0; d < g->Dv; ++d) acc[d] = sl[d] = 0;
        for (int64_t j0 = 0; j0 < lk; j0 += bk) {
          const int64_t j1 = j0 + bk < lk ? j0 + bk : lk;
          double mn = m;
          for (int64_t j = j0; j < j1; ++j) mn = fmax(mn, s[j]);
          if (mn == -INFINITY) continue;
          const double alpha = exp(m - mn);
          l *= alpha;
          for (int64_t d = 0; d < g->Dv; ++d) acc[d] *= alpha, sl[d] *= alpha;
          for (int64_t j = j0; j < j1; ++j) {
            if (s[j] == -INFINITY) continue;
            const double pj = 256.0 * exp(s[j] - mn); /* 2^FA__FP8_P_SHIFT, spelled out */
            l += pj;
            const double p8 = round_p ? fa__e4m3_round(pj) : pj;
            const double flip = fa__e4m3_round(pj * (1 + eps)) - fa__e4m3_round(pj * (1 - eps));
            int64_t kb, kr;
            tc_kpos(c, b, j, &kb, &kr);
            for (int64_t d = 0; d < g->Dv; ++d) {
              const double vv = in->v[idx4(sv, kb, kvh, kr, d)];
              acc[d] += p8 * vv;
              sl[d] += flip * fabs(vv);
            }
          }
          m = mn;
        }
        if (m == -INFINITY) continue;
        lse[(qb * g->Hq + h) * g->rows_q + qr] = m + log(l) - 8.0 * log(2.0);
        for (int64_t d = 0; d < g->Dv; ++d) {
          o[idx4(so, qb, h, qr, d)] = acc[d] * vd / l;
          if (slack) slack[idx4(so, qb, h, qr, d)] = sl[d] * vd / l;
        }
      }
    }
  free(s);
  free(acc);
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
    for (int64_t e = 0; e < n; ++e) /* f32-exact values in [0.25, 2] */
      (*ds[x])[e] = f->descale == 1 ? 0.5 + 0.25 * x : ldexp(1.0 + (double)((e * 7 + x * 3) % 8) / 8.0, -1 + x % 2);
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
  fp8_rule(&io, f->c.block_k ? f->c.block_k : FA__FP8_BLOCK_K, 1, o, lse, NULL);
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
 * left is the kernel's f32 arithmetic (scores, ex2.approx, l and P V sums in
 * another order: relative errors near 2^-20 of o, and ~1e-6 of lse) and o's
 * own rounding (both round to bf16: one ulp, 2^-7 relative, apart at most;
 * f16 2^-10), plus the rare P that lies within 2^-14 of an e4m3 rounding
 * boundary, which the kernel may round the other way (one e4m3 ulp, up to
 * 12% of that P): fp8_rule's slack adds exactly those possible flips,
 * element by element, instead of a loose bound everywhere. */
static double cuda_tolerance(const fcase *f, double o_ref, double slack, double vmax) {
  const double rel = odt_of(f) == FA_F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
  return rel * fabs(o_ref) + 1e-4 * vmax + slack;
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
    double *o = malloc((size_t)no * sizeof(double)), *lse = malloc((size_t)nl * sizeof(double));
    double *slack = malloc((size_t)no * sizeof(double));
    fp8_rule(&io, FA__FP8_BLOCK_K, 1, o, lse, slack);
    double vmax = 0;
    for (int64_t e = 0; e < g->Bt * g->Hkv * g->rows_k * g->Dv; ++e) vmax = fmax(vmax, fabs(io.in.v[e]));
    double vdmax = 1;
    if (io.vd)
      for (int64_t e = 0; e < g->nseq * g->Hkv; ++e) vdmax = fmax(vdmax, io.vd[e]);
    int64_t flips = 0;
    for (int64_t e = 0; e < no; ++e) {
      if (slack[e] > 0) ++flips;
      const double tol = cuda_tolerance(f, ro[e], slack[e], vmax * vdmax);
      if (!(fabs(bo[e] - ro[e]) <= tol))
        fail_msg("%s on %s: o[%lld] = %.9g, ref %.9g (tolerance %.3g of which slack %.3g)", f->c.name, g_be->name,
                 (long long)e, bo[e], ro[e], tol, slack[e]);
    }
    for (int64_t e = 0; e < nl; ++e)
      if (!(bl[e] == rl[e] || fabs(bl[e] - rl[e]) <= 1e-4 * (1 + fabs(rl[e]))))
        fail_msg("%s on %s: lse[%lld] = %.9g, ref %.9g", f->c.name, g_be->name, (long long)e, bl[e], rl[e]);
    print_message("    %s: %lld of %lld o elements have a P near an e4m3 boundary\n", f->c.name, (long long)flips,
                  (long long)no);
    free(bo), free(bl), free(ro), free(rl), free(o), free(lse), free(slack);
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

/* The rule is not vacuous: on the peaked case, rounding P to e4m3 moves o by
 * more than the tolerance cuda is held to. */
static void test_rounding_matters(void **state) {
  (void)state;
  int i = 0;
  while (strcmp(g_cases[i].c.name, "peaked_mag2") != 0) ++i;
  fp8_io io;
  io_make(&io, &g_cases[i], seed_of(i));
  const tc_geom *g = &io.in.g;
  const int64_t no = g->Bt * g->Hq * g->rows_q * g->Dv, nl = g->Bt * g->Hq * g->rows_q;
  double *o8 = malloc((size_t)no * sizeof(double)), *o = malloc((size_t)no * sizeof(double));
  double *lse = malloc((size_t)nl * sizeof(double));
  fp8_rule(&io, FA__FP8_BLOCK_K, 1, o8, lse, NULL);
  fp8_rule(&io, FA__FP8_BLOCK_K, 0, o, lse, NULL);
  int64_t beyond = 0;
  double worst = 0;
  for (int64_t e = 0; e < no; ++e) {
    const double d = fabs(o8[e] - o[e]);
    worst = fmax(worst, d);
    if (d > 4 * cuda_tolerance(&g_cases[i], o8[e], 0, 4.0)) ++beyond;
  }
  print_message("    rounding P to e4m3: max |change of o| %.3g; %lld of %lld elements beyond 4x the tolerance\n",
                worst, (long long)beyond, (long long)no);
  assert_true(beyond > 0);
  free(o8), free(o), free(lse);
  io_free(&io);
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
  struct CMUnitTest tests[NCASES + 4];
  int n = 0;
  for (int i = 0; i < NCASES; ++i)
    tests[n++] = (struct CMUnitTest){g_cases[i].c.name, test_case, NULL, NULL, (void *)(intptr_t)i};
  if (g_be->id == FA_BACKEND_REF) {
    tests[n++] = (struct CMUnitTest){"e4m3_format", test_e4m3_format, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"rounding_matters", test_rounding_matters, NULL, NULL, NULL};
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
