/* ref's backward against central finite differences of ref's forward, in
 * float64: loss = sum(dO o O) with a random dO, so dL/dx is exactly what
 * fa_backward returns for x in q, k, v and bias. h = 1e-6 gives an error of
 * about 1e-9 (rounding ~eps|L|/h, truncation ~h^2), far inside the 1e-6
 * tolerance, and far outside what any wrong term of the chain rule gives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/cm.h"
#include "support/problem.h"

#define FD_H 1e-6
#define FD_TOL 1e-6

static const int32_t sq2[] = {4, 2}, sk2[] = {6, 3};
static const int32_t cu_q[] = {0, 3, 7}, cu_k[] = {0, 5, 6};

static const tcase g_cases[] = {
    {"plain", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 5, .Lk = 6, .D = 4, .Dv = 3},
    {"causal_mask_padding", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 5, .Lk = 6, .D = 4, .Dv = 3, .causal = 1, .seqlens_q = sq2,
     .seqlens_k = sk2, .mask = 1, .mask_bcast = BC_H},
    {"causal_br_window_bias", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 6, .Lk = 4, .D = 3, .Dv = 4, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .use_window = 1, .wl = 2, .wr = -1, .bias = 1, .dbias = 1},
    {"softcap_alibi_bias_bcast_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 4, .Lk = 5, .D = 3, .Dv = 2, .softcap = 2.0,
     .mag = 1.5, .alibi = 1, .bias = 1, .bias_bcast = BC_B | BC_H, .dbias = 1},
    {"dropout_gqa_causal", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 5, .Lk = 7, .D = 4, .Dv = 3, .causal = 1, .dropout_p = 0.3,
     .seed = 2024, .offset = 1},
    {"mqa_varlen_bias_dropout", .B = 2, .Hq = 3, .Hkv = 1, .D = 3, .Dv = 3, .cu_q = cu_q, .cu_k = cu_k, .bias = 1,
     .bias_bcast = BC_Q, .dbias = 1, .dropout_p = 0.2, .seed = 5},
    {"dead_rows_neginf_bias", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 6, .Lk = 5, .D = 3, .Dv = 3, .mask = 1,
     .mask_dead_rows = 1, .bias = 1, .bias_neginf = 1, .dbias = 1},
    {"key_padding_mask_softcap_window", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 5, .Lk = 7, .D = 2, .Dv = 2, .mask = 1,
     .mask_bcast = BC_H | BC_Q, .softcap = 1.5, .use_window = 1, .wl = 1, .wr = 2},
    {"offsets_alibi_dropout_causal", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 5, .Lk = 6, .D = 3, .Dv = 3, .causal = 1,
     .alibi = 1, .dropout_p = 0.3, .seed = 77, .q_offset = 9, .k_offset = 7},
};

static fa_context *g_ctx;

static double loss(tc_tensors *T) {
  const fa_status st = fa_forward(g_ctx, FA_BACKEND_REF, &T->q.t, &T->k.t, &T->v.t, &T->opt, &T->o.t, &T->lse.t);
  if (st != FA_OK) fail_msg("forward: %s", fa_context_last_error(g_ctx));
  double l = 0;
  const int64_t *s = T->o.t.shape;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) l += tb_get(&T->dout, a, b, c, d) * tb_get(&T->o, a, b, c, d);
  return l;
}

/* Central differences of every element of x against grad. */
static int check_tensor(tc_tensors *T, tbuf *x, const tbuf *grad, const char *name, const char *cname) {
  const int64_t *s = x->t.shape;
  double gmax = 1;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) gmax = fmax(gmax, fabs(tb_get(grad, a, b, c, d)));
  double worst = 0;
  int bad = 0;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) {
          const double x0 = tb_get(x, a, b, c, d), an = tb_get(grad, a, b, c, d);
          double fd = 0;
          if (isfinite(x0)) { /* a -inf bias has no neighbourhood: its gradient must be 0 */
            tb_set(x, a, b, c, d, x0 + FD_H);
            const double lp = loss(T);
            tb_set(x, a, b, c, d, x0 - FD_H);
            const double lm = loss(T);
            tb_set(x, a, b, c, d, x0);
            fd = (lp - lm) / (2 * FD_H);
          }
          const double err = fabs(fd - an) / gmax;
          worst = fmax(worst, err);
          if (!(err <= FD_TOL) && bad++ < 5)
            print_message("%s: d%s[%lld,%lld,%lld,%lld]: backward %.12g, finite differences %.12g\n", cname, name,
                          (long long)a, (long long)b, (long long)c, (long long)d, an, fd);
        }
  if (getenv("FA_TEST_VERBOSE")) print_message("%s: d%s worst relative error %.3g\n", cname, name, worst);
  return bad;
}

static void test_gradcheck(void **state) {
  const tcase *c = (const tcase *)*state;
  tc_inputs in;
  tc_inputs_make(&in, c, FA_F64, 0x9badull + (uint64_t)(c - g_cases));
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &in, FA_F64, TL_BHLD, 0), 0);
  assert_int_equal(fa_context_create(&g_ctx), FA_OK);
  (void)loss(&T);
  const fa_status st = fa_backward(g_ctx, FA_BACKEND_REF, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt,
                                   &T.dq.t, &T.dk.t, &T.dv.t, tc_dbias_arg(&T));
  if (st != FA_OK) fail_msg("backward: %s", fa_context_last_error(g_ctx));
  int bad = check_tensor(&T, &T.q, &T.dq, "Q", c->name);
  bad += check_tensor(&T, &T.k, &T.dk, "K", c->name);
  bad += check_tensor(&T, &T.v, &T.dv, "V", c->name);
  if (tb_present(&T.dbias)) {
    /* opt.bias shares its data with T.bias, so perturbing T.bias moves the bias */
    bad += check_tensor(&T, &T.bias, &T.dbias, "Bias", c->name);
  }
  fa_context_destroy(g_ctx);
  tc_tensors_free(&T);
  tc_inputs_free(&in);
  if (bad) fail_msg("%d gradient elements differ from finite differences by more than %g", bad, FD_TOL);
}

int main(void) {
  enum { N = sizeof g_cases / sizeof g_cases[0] };
  struct CMUnitTest tests[N];
  for (int i = 0; i < N; ++i)
    tests[i] = (struct CMUnitTest){g_cases[i].name, test_gradcheck, NULL, NULL, (void *)&g_cases[i]};
  return _cmocka_run_group_tests("ref_gradcheck", tests, N, NULL, NULL);
}
