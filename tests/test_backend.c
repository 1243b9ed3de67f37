/* One test program per backend, built from this file with
 * FA_TEST_BACKEND_NAME set to the backend's name in support/backends.c.
 * Every case of cases.c in every dtype it lists, under every variant of the
 * backend (each CPU ISA), against ref in float64; then the checks that need
 * a problem of their own (the dropout keep-mask bit for bit, NaN inputs,
 * the deterministic backward).
 *
 * If the backend is not compiled in or cannot run here (no GPU), every test
 * is reported SKIPPED and the program exits 77, which ctest reports as
 * Skipped: never as passed. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_run.h"
#include "support/cm.h"

#ifndef FA_TEST_BACKEND_NAME
#error "build with -DFA_TEST_BACKEND_NAME=\"ref\" (or another name of support/backends.c)"
#endif

#define SKIP_RETURN_CODE 77
#define MAX_VARIANTS 8

static const tb_backend *g_be;
static int g_usable;
static char g_why[512];
static tb_variant g_var[MAX_VARIANTS];
static int g_nvar;

/* The oracle of one (case, dtype), shared by the variants that run it and
 * freed after the last one. */
typedef struct slot {
  const tcase *c;
  fa_dtype dt;
  uint64_t seed;
  tc_oracle *orc;
  int users;
} slot;

typedef struct case_test {
  slot *s;
  const tb_variant *var;
} case_test;

static void skip_unless_usable(const tb_variant *var) {
  if (!g_usable) {
    print_message("skipped: %s\n", g_why);
    skip();
  }
  if (var->absent) {
    print_message("skipped: ISA %s is not on this CPU or in this build\n", var->name);
    skip();
  }
  if (var->unselected) {
    print_message("skipped: ISA %s is not in FA_TEST_CPU_ISAS\n", var->name);
    skip();
  }
}

/* ref is the oracle, so on its own program its forward is also held to a
 * textbook forward written independently in the tests (support/problem.c). */
static void check_oracle_against_naive(const tc_oracle *orc) {
  const tc_geom *g = &orc->in.g;
  const int64_t nrow = g->Bt * g->Hq * g->rows_q, no = nrow * g->Dv;
  double *o = (double *)malloc((size_t)no * sizeof(double)), *lse = (double *)malloc((size_t)nrow * sizeof(double));
  tc_naive_forward(&orc->in, o, lse);
  double maxd = 0, rmax = 1;
  for (int64_t e = 0; e < no; ++e) {
    maxd = fmax(maxd, fabs(o[e] - orc->o[e]));
    rmax = fmax(rmax, fabs(o[e]));
  }
  const double err_o = maxd / rmax;
  maxd = 0, rmax = 1;
  int64_t inf_bad = -1;
  for (int64_t e = 0; e < nrow; ++e) {
    if (isinf(lse[e]) || isinf(orc->lse[e])) {
      if (lse[e] != orc->lse[e] && inf_bad < 0) inf_bad = e;
      continue;
    }
    maxd = fmax(maxd, fabs(lse[e] - orc->lse[e]));
    rmax = fmax(rmax, fabs(lse[e]));
  }
  const double err_lse = maxd / rmax;
  free(o);
  free(lse);
  if (err_o > 1e-12 || err_lse > 1e-12 || inf_bad >= 0)
    fail_msg("ref (f64) disagrees with the textbook forward: O err %.3g, LSE err %.3g, LSE row %lld -inf mismatch",
             err_o, err_lse, (long long)inf_bad);
}

static void test_case(void **state) {
  case_test *ct = (case_test *)*state;
  skip_unless_usable(ct->var);
  if (!ct->s->orc) {
    ct->s->orc = tc_oracle_make(ct->s->c, ct->s->dt, ct->s->seed);
    if (g_be->id == FA_BACKEND_REF) check_oracle_against_naive(ct->s->orc);
  }
  tc_run_case(ct->s->orc, g_be, ct->var);
}

static int case_teardown(void **state) {
  case_test *ct = (case_test *)*state;
  if (--ct->s->users == 0) {
    tc_oracle_free(ct->s->orc);
    ct->s->orc = NULL;
  }
  return 0;
}

/* ---- problems of their own -------------------------------------------- */

static fa_context *new_ctx(const tb_variant *var) {
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  tb_variant_apply(ctx, var);
  return ctx;
}

/* With q = 0 every visible score is equal, and with V the identity (Dv =
 * Lk) O[b,h,i,j] = keep(b,h,i,j) / ((1 - p) Lk): the output shows the
 * dropout mask, which must be the one fa_dropout_keep describes (the rule
 * of src/rules/dropout.h), bit for bit, on every backend. */
static void check_dropout_mask(const tb_variant *var, int64_t q_offset, int64_t k_offset) {
  skip_unless_usable(var);
  const tcase c = {.name = "dropout_identity",
                   .B = 2,
                   .Hq = 3,
                   .Hkv = 3,
                   .Lq = 17,
                   .Lk = 64,
                   .D = 8,
                   .Dv = 64,
                   .dropout_p = 0.3,
                   .seed = 0xfeedfacecafebeefull,
                   .offset = 5,
                   .q_offset = q_offset,
                   .k_offset = k_offset};
  tc_inputs in;
  tc_inputs_make(&in, &c, FA_F32, 1);
  memset(in.q, 0, (size_t)(c.B * c.Hq * c.Lq * c.D) * sizeof(double));
  for (int64_t e = 0; e < c.B * c.Hkv * c.Lk * c.Dv; ++e) in.v[e] = (e / c.Dv) % c.Lk == e % c.Dv ? 1.0 : 0.0;
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, FA_F32, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  fa_context *ctx = new_ctx(var);
  const fa_status st = fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  if (st != FA_OK) fail_msg("forward: %s", fa_context_last_error(ctx));
  assert_int_equal(tb_download(&T.o), 0);
  const double kept = 1.0 / ((1.0 - c.dropout_p) * (double)c.Lk);
  int64_t wrong = 0, nkeep = 0, n = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Lq; ++i)
        for (int64_t j = 0; j < c.Lk; ++j, ++n) {
          const int keep = fa_dropout_keep(c.dropout_p, c.seed, c.offset, b, h, c.Hq, i + q_offset, j + k_offset);
          const double o = tb_get(&T.o, b, h, i, j);
          nkeep += keep;
          if (fabs(o - (keep ? kept : 0.0)) > 1e-3 * kept) {
            if (!wrong)
              print_message("first mismatch at b=%lld h=%lld i=%lld j=%lld: O = %g, rule says %s\n", (long long)b,
                            (long long)h, (long long)i, (long long)j, o, keep ? "kept" : "dropped");
            ++wrong;
          }
        }
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
  if (wrong) fail_msg("%lld of %lld dropout decisions differ from fa_dropout_keep", (long long)wrong, (long long)n);
  assert_true(nkeep > 0 && nkeep < n);
}

static void test_dropout_mask_exact(void **state) {
  check_dropout_mask((const tb_variant *)*state, 0, 0);
}

/* A block of a ring: its keep bits are those of positions (i + q_offset,
 * j + k_offset) of the whole sequence; an odd k_offset makes the block's
 * columns straddle Philox's groups of four. */
static void test_dropout_mask_exact_offsets(void **state) {
  check_dropout_mask((const tb_variant *)*state, 1000, 37);
}

/* What ring attention relies on: a call with position offsets computes the
 * block of the whole attention it stands for. Causal, window and ALiBi at
 * offsets (q_offset, k_offset) equal, element for element, the same call at
 * offsets 0 with an additive bias built here from positions: -slope[h] *
 * |pi - pj| where the band lets position pi see pj, -inf elsewhere. Forward
 * and backward on this backend, both ways, f32. */
static void test_offsets_as_bias(void **state) {
  const tb_variant *var = (const tb_variant *)*state;
  skip_unless_usable(var);
  const int64_t qo = 40, ko = 29, wl = 10;
  const tcase ca = {.name = "offsets",
                    .B = 1,
                    .Hq = 2,
                    .Hkv = 1,
                    .Lq = 20,
                    .Lk = 24,
                    .D = 16,
                    .Dv = 16,
                    .alibi = 1,
                    .causal = 1,
                    .use_window = 1,
                    .wl = wl,
                    .q_offset = qo,
                    .k_offset = ko};
  const tcase cb = {.name = "hand_bias", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 20, .Lk = 24, .D = 16, .Dv = 16, .bias = 1};
  tc_inputs ia, ib;
  tc_inputs_make(&ia, &ca, FA_F32, 17);
  tc_inputs_make(&ib, &cb, FA_F32, 17);
  const tc_geom *g = &ia.g;
  memcpy(ib.q, ia.q, (size_t)(g->Bt * g->Hq * g->rows_q * g->D) * sizeof(double));
  memcpy(ib.k, ia.k, (size_t)(g->Bt * g->Hkv * g->rows_k * g->D) * sizeof(double));
  memcpy(ib.v, ia.v, (size_t)(g->Bt * g->Hkv * g->rows_k * g->Dv) * sizeof(double));
  memcpy(ib.dout, ia.dout, (size_t)(g->Bt * g->Hq * g->rows_q * g->Dv) * sizeof(double));
  int64_t seen = 0, hidden = 0;
  for (int64_t h = 0; h < ca.Hq; ++h)
    for (int64_t i = 0; i < ca.Lq; ++i)
      for (int64_t j = 0; j < ca.Lk; ++j) {
        const int64_t pi = i + qo, pj = j + ko; /* positions in the whole sequence */
        const int vis = pj <= pi && pj >= pi - wl;
        seen += vis;
        hidden += !vis;
        ib.bias[(h * ca.Lq + i) * ca.Lk + j] =
            vis ? tb_round(FA_F32, -(double)ia.alibi[h] * (double)(pi - pj)) : -INFINITY;
      }
  assert_true(seen > 0 && hidden > 0);
  tc_tensors A, Bt;
  const int dev = g_be->memory == FA_MEMORY_CUDA;
  assert_int_equal(tc_tensors_make(&A, &ia, FA_F32, TL_BHLD, dev), 0);
  assert_int_equal(tc_tensors_make(&Bt, &ib, FA_F32, TL_BHLD, dev), 0);
  fa_context *ctx = new_ctx(var);
  tc_tensors *both[2] = {&A, &Bt};
  for (int x = 0; x < 2; ++x) {
    tc_tensors *T = both[x];
    fa_status st = fa_forward(ctx, g_be->id, &T->q.t, &T->k.t, &T->v.t, &T->opt, &T->o.t, &T->lse.t);
    if (st != FA_OK) fail_msg("forward (%s): %s", x ? "hand bias" : "offsets", fa_context_last_error(ctx));
    st = fa_backward(ctx, g_be->id, &T->q.t, &T->k.t, &T->v.t, &T->o.t, &T->dout.t, &T->lse.t, &T->opt, &T->dq.t,
                     &T->dk.t, &T->dv.t, NULL);
    if (st != FA_OK) fail_msg("backward (%s): %s", x ? "hand bias" : "offsets", fa_context_last_error(ctx));
    tbuf *outs[] = {&T->o, &T->lse, &T->dq, &T->dk, &T->dv};
    for (size_t e = 0; e < sizeof outs / sizeof outs[0]; ++e) assert_int_equal(tb_download(outs[e]), 0);
  }
  static const char *names[] = {"o", "lse", "dq", "dk", "dv"};
  tbuf *oa[] = {&A.o, &A.lse, &A.dq, &A.dk, &A.dv}, *ob[] = {&Bt.o, &Bt.lse, &Bt.dq, &Bt.dk, &Bt.dv};
  tc_report rep;
  memset(&rep, 0, sizeof rep);
  for (int e = 0; e < 5; ++e) {
    const int64_t *sh = oa[e]->t.shape;
    const int64_t n3 = e == 1 ? 1 : sh[3];
    double maxd = 0, rmax = 1;
    for (int64_t a = 0; a < sh[0]; ++a)
      for (int64_t h = 0; h < sh[1]; ++h)
        for (int64_t i = 0; i < sh[2]; ++i)
          for (int64_t d = 0; d < n3; ++d) {
            const double u = tb_get(oa[e], a, h, i, d), w = tb_get(ob[e], a, h, i, d);
            maxd = fmax(maxd, fabs(u - w));
            rmax = fmax(rmax, fabs(w));
          }
    if (!(maxd <= 1e-4 * rmax))
      tc_report_add(&rep, "%s: offsets and hand bias differ by %.3g (largest %.3g)", names[e], maxd, rmax);
  }
  fa_context_destroy(ctx);
  tc_tensors_free(&A);
  tc_tensors_free(&Bt);
  tc_inputs_free(&ia);
  tc_inputs_free(&ib);
  if (rep.fails) fail_msg("%s (%s):\n%s", g_be->name, var->name, rep.buf);
}

/* NaN and Inf in the inputs propagate as IEEE says and never crash. x (NaN
 * or +Inf) planted in q[0,0,3,0] makes the scores of that row NaN or +-Inf,
 * its max NaN or +Inf, so O[0,0,3,:] and LSE[0,0,3] are NaN (exp(Inf - Inf)
 * = NaN); x in v[1,1,5,2] reaches O[1,1,i,2] of every row (each sees key 5
 * with a weight > 0) with a finite LSE. Everything else stays finite, and
 * the backward runs (its values are not specified). */
static void check_special_inputs(const tb_variant *var, float x, const char *what) {
  skip_unless_usable(var);
  const tcase c = {.name = what, .B = 2, .Hq = 2, .Hkv = 2, .Lq = 9, .Lk = 17, .D = 8, .Dv = 8};
  tc_inputs in;
  tc_inputs_make(&in, &c, FA_F32, isnan(x) ? 2 : 3);
  in.q[((0 * c.Hq + 0) * c.Lq + 3) * c.D + 0] = x;
  in.v[((1 * c.Hkv + 1) * c.Lk + 5) * c.Dv + 2] = x;
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, FA_F32, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  fa_context *ctx = new_ctx(var);
  fa_status st = fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  if (st != FA_OK) fail_msg("forward: %s", fa_context_last_error(ctx));
  assert_int_equal(tb_download(&T.o), 0);
  assert_int_equal(tb_download(&T.lse), 0);
  tc_report rep;
  memset(&rep, 0, sizeof rep);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Lq; ++i) {
        const int nan_row = b == 0 && h == 0 && i == 3;
        const double lse = tb_get(&T.lse, b, h, i, 0);
        if (nan_row ? !isnan(lse) : !isfinite(lse))
          tc_report_add(&rep, "LSE[%lld,%lld,%lld] = %g", (long long)b, (long long)h, (long long)i, lse);
        for (int64_t d = 0; d < c.Dv; ++d) {
          const int want_x = b == 1 && h == 1 && d == 2;
          const double o = tb_get(&T.o, b, h, i, d);
          const int ok = nan_row || (want_x && isnan(x)) ? isnan(o) : want_x ? o == x : isfinite(o);
          if (!ok)
            tc_report_add(&rep, "O[%lld,%lld,%lld,%lld] = %g, expected %s", (long long)b, (long long)h, (long long)i,
                          (long long)d, o,
                          nan_row  ? "NaN"
                          : want_x ? what
                                   : "a finite value");
        }
      }
  st = fa_backward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt, &T.dq.t, &T.dk.t,
                   &T.dv.t, NULL);
  if (st != FA_OK && g_be->refuses(&c, FA_F32, 1) == FA_OK)
    tc_report_add(&rep, "backward with %s inputs: %s", what, fa_context_last_error(ctx));
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
  if (rep.fails) fail_msg("%s inputs on %s (%s):\n%s", what, g_be->name, var->name, rep.buf);
}

static void test_nan_propagates(void **state) {
  check_special_inputs((const tb_variant *)*state, NAN, "NaN");
}
static void test_inf_propagates(void **state) {
  check_special_inputs((const tb_variant *)*state, INFINITY, "+inf");
}

/* deterministic = 1: the backward gives the same bits on every run and for
 * every thread count (DESIGN.md), with every option that accumulates and
 * with the band alone, in f32 and in bf16 (on cuda, bf16 is the tensor-core
 * path: the wgmma kernels on Hopper; f32 the SIMT one). The values are held
 * to ref by the deterministic_* cases of cases.c. */
static void check_deterministic(const tb_variant *var, const tcase *c, fa_dtype dt) {
  tc_inputs in;
  tc_inputs_make(&in, c, dt, 3);
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, dt, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  T.opt.deterministic = 1;
  fa_context *ctx = new_ctx(var);
  fa_status st = fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  if (st != FA_OK) fail_msg("%s %s forward: %s", c->name, fa_dtype_name(dt), fa_context_last_error(ctx));
  static const int threads[] = {1, 2, 2, 3};
  tbuf *outs[] = {&T.dq, &T.dk, &T.dv, &T.dbias};
  const char *names[] = {"dQ", "dK", "dV", "dBias"};
  const int nout = c->dbias ? 4 : 3;
  unsigned char *first[4] = {NULL, NULL, NULL, NULL};
  for (size_t r = 0; r < sizeof threads / sizeof threads[0]; ++r) {
    assert_int_equal(fa_context_set_threads(ctx, threads[r]), FA_OK);
    for (int t = 0; t < nout; ++t) {
      tb_poison(outs[t]);
      assert_int_equal(tb_upload(outs[t]), 0);
    }
    st = fa_backward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt, &T.dq.t, &T.dk.t,
                     &T.dv.t, c->dbias ? &T.dbias.t : NULL);
    if (st != FA_OK)
      fail_msg("%s %s backward (%d threads): %s", c->name, fa_dtype_name(dt), threads[r], fa_context_last_error(ctx));
    for (int t = 0; t < nout; ++t) {
      assert_int_equal(tb_download(outs[t]), 0);
      if (r == 0) {
        first[t] = (unsigned char *)malloc(outs[t]->span);
        memcpy(first[t], tb_view(outs[t]), outs[t]->span);
      } else if (memcmp(first[t], tb_view(outs[t]), outs[t]->span) != 0) {
        fail_msg("%s %s: %s differs between a run with 1 thread and a run with %d threads (deterministic = 1)", c->name,
                 fa_dtype_name(dt), names[t], threads[r]);
      }
    }
  }
  for (int t = 0; t < 4; ++t) free(first[t]);
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
}

static void test_deterministic_backward(void **state) {
  const tb_variant *var = (const tb_variant *)*state;
  skip_unless_usable(var);
  const tcase everything = {.name = "deterministic (bias, dropout)",
                            .B = 2,
                            .Hq = 4,
                            .Hkv = 2,
                            .Lq = 65,
                            .Lk = 130,
                            .D = 64,
                            .Dv = 64,
                            .causal = 1,
                            .align = FA_ALIGN_BOTTOM_RIGHT,
                            .bias = 1,
                            .bias_bcast = BC_B,
                            .dbias = 1,
                            .dropout_p = 0.2,
                            .seed = 11};
  const tcase band = {.name = "deterministic (causal band)",
                      .B = 2,
                      .Hq = 4,
                      .Hkv = 2,
                      .Lq = 200,
                      .Lk = 300,
                      .D = 64,
                      .Dv = 64,
                      .causal = 1,
                      .align = FA_ALIGN_BOTTOM_RIGHT};
  /* several key tiles meeting on every query tile, GQA, D = 128: on Hopper
   * the warp-specialized kernel's turns (bwd_ws_kernel.cuh) decide the order */
  const tcase window = {.name = "deterministic (window, D = 128)",
                        .B = 1,
                        .Hq = 2,
                        .Hkv = 1,
                        .Lq = 300,
                        .Lk = 300,
                        .D = 128,
                        .Dv = 128,
                        .use_window = 1,
                        .wl = 150,
                        .wr = 100};
  /* D = 256: dK/dV by column halves (cuda bwd_wide_kernel.cuh), dQ by the
   * deterministic dQ kernel at bucket 256; dropout for its element-wise path */
  const tcase wide = {.name = "deterministic (D = 256, dropout)",
                      .B = 1,
                      .Hq = 2,
                      .Hkv = 1,
                      .Lq = 130,
                      .Lk = 200,
                      .D = 256,
                      .Dv = 256,
                      .causal = 1,
                      .dropout_p = 0.1,
                      .seed = 5};
  const tcase *cases[] = {&everything, &band, &window, &wide};
  static const fa_dtype dts[] = {FA_F32, FA_BF16};
  int ran = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; ++d)
      if (g_be->refuses(cases[i], dts[d], 1) == FA_OK) {
        check_deterministic(var, cases[i], dts[d]);
        ++ran;
      }
  if (!ran) skip();
}

/* lse may be NULL (or have NULL data) when the caller does not need it, and
 * opt may be NULL (the defaults): same O as with them, no crash. */
static void test_optional_arguments(void **state) {
  const tb_variant *var = (const tb_variant *)*state;
  skip_unless_usable(var);
  const tcase c = {.name = "optional", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 33, .Lk = 17, .D = 16, .Dv = 8};
  tc_inputs in;
  tc_inputs_make(&in, &c, FA_F32, 4);
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, FA_F32, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  fa_context *ctx = new_ctx(var);
  if (fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t) != FA_OK)
    fail_msg("forward: %s", fa_context_last_error(ctx));
  assert_int_equal(tb_download(&T.o), 0);
  double *o1 = tb_logical(&T.o);
  fa_tensor no_data = T.lse.t;
  no_data.data = NULL;
  const struct {
    const char *what;
    const fa_options *opt;
    fa_tensor *lse;
  } calls[] = {{"lse NULL", &T.opt, NULL}, {"lse->data NULL", &T.opt, &no_data}, {"opt NULL", NULL, &T.lse.t}};
  for (int k = 0; k < 3; ++k) {
    tb_poison(&T.o);
    assert_int_equal(tb_upload(&T.o), 0);
    if (fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, calls[k].opt, &T.o.t, calls[k].lse) != FA_OK)
      fail_msg("forward with %s: %s", calls[k].what, fa_context_last_error(ctx));
    assert_int_equal(tb_download(&T.o), 0);
    assert_true(tb_guards_ok(&T.o));
    double *o2 = tb_logical(&T.o);
    for (int64_t e = 0; e < tb_numel(&T.o); ++e)
      if (!(fabs(o2[e] - o1[e]) <= 1e-6 * (1 + fabs(o1[e]))))
        fail_msg("forward with %s: O[%lld] = %g, with every argument %g", calls[k].what, (long long)e, o2[e], o1[e]);
    free(o2);
  }
  if (g_be->refuses(&c, FA_F32, 1) == FA_OK && fa_backward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t,
                                                           &T.lse.t, NULL, &T.dq.t, &T.dk.t, &T.dv.t, NULL) != FA_OK)
    fail_msg("backward with opt NULL: %s", fa_context_last_error(ctx));
  free(o1);
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
}

/* Past the cuda kernels' grid: 65535 tiles of 16 rows (the generic f32
 * path's) + 1 row. cuda refuses it with FA_ERR_UNSUPPORTED naming its limit
 * (a launch would fail with "invalid argument"); every other backend
 * computes it: one key, so every row of O is that key's value row (to
 * rounding: exp(0) may be a polynomial's). */
static void test_rows_past_grid_limit(void **state) {
  const tb_variant *var = (const tb_variant *)*state;
  skip_unless_usable(var);
  const tcase c = {.name = "rows_past_grid", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 65535 * 16 + 1, .Lk = 1, .D = 8, .Dv = 8};
  tc_inputs in;
  tc_inputs_make(&in, &c, FA_F32, 5);
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, FA_F32, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  fa_context *ctx = new_ctx(var);
  const fa_status st = fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  if (g_be->memory == FA_MEMORY_CUDA) {
    if (st != FA_ERR_UNSUPPORTED || !strstr(fa_context_last_error(ctx), "limit"))
      fail_msg("cuda, Lq = %lld: status %s (%s), expected FA_ERR_UNSUPPORTED naming the limit", (long long)c.Lq,
               fa_status_name(st), fa_context_last_error(ctx));
  } else {
    if (st != FA_OK) fail_msg("forward: %s", fa_context_last_error(ctx));
    assert_int_equal(tb_download(&T.o), 0);
    double *o = tb_logical(&T.o), *v = tb_logical(&T.v);
    for (int64_t i = 0; i < c.Lq; ++i)
      for (int64_t d = 0; d < c.Dv; ++d)
        if (!(fabs(o[i * c.Dv + d] - v[d]) <= 1e-6 * (1 + fabs(v[d]))))
          fail_msg("O[%lld][%lld] = %g, expected the only value row's %g", (long long)i, (long long)d, o[i * c.Dv + d],
                   v[d]);
    free(o);
    free(v);
  }
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
}

/* More query rows than 65535 blocks of 4: the cuda backward's row-per-warp
 * kernels (rowsum(dO * O), the dQ conversion) stride past CUDA's grid-y limit
 * (they failed to launch at L = 256k on the H200 before). One key makes the
 * answer closed-form and cheap on every backend: P = 1, so dS = dO.v - D_i = 0
 * and dQ = dK = 0 exactly where D_i was computed (a row the kernel skipped
 * would get dQ = scale dO.v k), and dV = the column sums of dO. */
static void test_long_rows_backward(void **state) {
  const tb_variant *var = (const tb_variant *)*state;
  skip_unless_usable(var);
  const tcase c = {.name = "long_rows", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 4 * 65535 + 7, .Lk = 1, .D = 64, .Dv = 64};
  const fa_dtype dt = FA_BF16;
  if (g_be->refuses(&c, dt, 1) != FA_OK) skip();
  tc_inputs in;
  tc_inputs_make(&in, &c, dt, 6);
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, dt, TL_BHLD, g_be->memory == FA_MEMORY_CUDA), 0);
  fa_context *ctx = new_ctx(var);
  if (fa_forward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t) != FA_OK)
    fail_msg("forward: %s", fa_context_last_error(ctx));
  if (fa_backward(ctx, g_be->id, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt, &T.dq.t, &T.dk.t, &T.dv.t,
                  NULL) != FA_OK)
    fail_msg("backward: %s", fa_context_last_error(ctx));
  assert_int_equal(tb_download(&T.dq), 0);
  assert_int_equal(tb_download(&T.dv), 0);
  double *dq = tb_logical(&T.dq), *dv = tb_logical(&T.dv), *dout = tb_logical(&T.dout);
  double want[64] = {0}, big = 1;
  for (int64_t i = 0; i < c.Lq; ++i)
    for (int d = 0; d < 64; ++d) want[d] += dout[i * 64 + d];
  for (int d = 0; d < 64; ++d) big = fmax(big, fabs(want[d]));
  for (int d = 0; d < 64; ++d)
    if (!(fabs(dv[d] - want[d]) <= tc_tol(dt) * big))
      fail_msg("dV[%d] = %g, expected the column sum of dO %g", d, dv[d], want[d]);
  for (int64_t e = 0; e < c.Lq * 64; ++e)
    if (!(fabs(dq[e]) <= 1e-2))
      fail_msg("dQ row %lld = %g, expected 0 (dS = 0 with one key): that row's rowsum(dO * O) was not computed",
               (long long)(e / 64), dq[e]);
  free(dq);
  free(dv);
  free(dout);
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
}

/* ---- main ----------------------------------------------------------------- */

static char *dupf(const char *fmt, const char *a, const char *b, const char *c) {
  char buf[512];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  char *s = (char *)malloc(strlen(buf) + 1);
  strcpy(s, buf);
  return s;
}

int main(void) {
  g_be = tb_program_backend(FA_TEST_BACKEND_NAME, &g_usable, g_why, sizeof g_why);
  if (!g_be) return 1;
  g_nvar = g_be->variants(g_var, MAX_VARIANTS);
  if (g_usable && g_nvar == 0) {
    g_usable = 0;
    snprintf(g_why, sizeof g_why, "%s has no variant this machine can run", g_be->name);
  }
  if (g_nvar == 0) { /* still list the tests, as skipped */
    memset(&g_var[0], 0, sizeof g_var[0]);
    snprintf(g_var[0].name, sizeof g_var[0].name, "none");
    g_nvar = 1;
  }
  if (!g_usable) fprintf(stderr, "%s backend: every test skipped: %s\n", g_be->name, g_why);

  int nslots = 0;
  for (int i = 0; i < tc_ncases; ++i)
    for (int dt = FA_F32; dt <= FA_BF16; ++dt) nslots += (tc_dtypes(&tc_cases[i]) >> dt) & 1;
  slot *slots = (slot *)calloc((size_t)nslots, sizeof *slots);
  case_test *cts = (case_test *)calloc((size_t)(nslots * g_nvar), sizeof *cts);
  const int ntests = nslots * g_nvar + 7 * g_nvar + 2;
  struct CMUnitTest *tests = (struct CMUnitTest *)calloc((size_t)ntests, sizeof *tests);
  int n = 0, s = 0;
  for (int i = 0; i < tc_ncases; ++i)
    for (int dt = FA_F32; dt <= FA_BF16; ++dt) {
      if (!((tc_dtypes(&tc_cases[i]) >> dt) & 1)) continue;
      slots[s] = (slot){&tc_cases[i], (fa_dtype)dt, 0x5eed0000ull + (uint64_t)i * 16 + (uint64_t)dt, NULL, g_nvar};
      for (int v = 0; v < g_nvar; ++v) {
        cts[s * g_nvar + v] = (case_test){&slots[s], &g_var[v]};
        tests[n++] = (struct CMUnitTest){
            dupf(g_nvar > 1 ? "%s/%s/%s" : "%s/%s", tc_cases[i].name, fa_dtype_name((fa_dtype)dt), g_var[v].name),
            test_case, NULL, case_teardown, &cts[s * g_nvar + v]};
      }
      ++s;
    }
  for (int v = 0; v < g_nvar; ++v) {
    tests[n++] = (struct CMUnitTest){dupf("dropout_mask_matches_rule/%s%s%s", g_var[v].name, "", ""),
                                     test_dropout_mask_exact, NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("dropout_mask_matches_rule_offsets/%s%s%s", g_var[v].name, "", ""),
                                     test_dropout_mask_exact_offsets, NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("offsets_equal_hand_bias/%s%s%s", g_var[v].name, "", ""),
                                     test_offsets_as_bias, NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("nan_inputs_propagate/%s%s%s", g_var[v].name, "", ""), test_nan_propagates,
                                     NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("inf_inputs_propagate/%s%s%s", g_var[v].name, "", ""), test_inf_propagates,
                                     NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("optional_arguments/%s%s%s", g_var[v].name, "", ""), test_optional_arguments,
                                     NULL, NULL, &g_var[v]};
    tests[n++] = (struct CMUnitTest){dupf("deterministic_backward/%s%s%s", g_var[v].name, "", ""),
                                     test_deterministic_backward, NULL, NULL, &g_var[v]};
  }
  /* the grid tests are about sizes, not ISAs: once, on the first variant */
  tests[n++] = (struct CMUnitTest){dupf("rows_past_grid_limit/%s%s%s", g_var[0].name, "", ""),
                                   test_rows_past_grid_limit, NULL, NULL, &g_var[0]};
  tests[n++] = (struct CMUnitTest){dupf("long_rows_backward/%s%s%s", g_var[0].name, "", ""), test_long_rows_backward,
                                   NULL, NULL, &g_var[0]};
  char group[64];
  snprintf(group, sizeof group, "backend_%s", g_be->name);
  const int failed = _cmocka_run_group_tests(group, tests, (size_t)n, NULL, NULL);
  for (int i = 0; i < n; ++i) free((void *)tests[i].name);
  free(tests);
  free(cts);
  free(slots);
  if (failed) return 1;
  return g_usable ? 0 : SKIP_RETURN_CODE;
}
