/* The online softmax (src/rules/online_softmax.h) on the worked examples of
 * the literature, merges equal to the one-shot softmax, the rows that see
 * nothing, and the same example through fa_forward on ref. */
#include <math.h>
#include <string.h>

#include "flashattn.h"
#include "rules/online_softmax.h"
#include "support/cm.h"

/* acc = acc * factor + sum_t p[t] v[t] */
static double fold(fa__osm *st, double acc, const double *s, const double *v, int n) {
  double p[8];
  const double factor = fa__osm_update(st, s, n, p);
  acc *= factor;
  for (int t = 0; t < n; ++t) acc += p[t] * v[t];
  return acc;
}

static double one_shot(const double *s, const double *v, int n, double *lse) {
  double m = -INFINITY, l = 0, a = 0;
  for (int t = 0; t < n; ++t) m = fmax(m, s[t]);
  for (int t = 0; t < n; ++t) l += exp(s[t] - m), a += exp(s[t] - m) * v[t];
  *lse = m + log(l);
  return a / l;
}

/* scores [1, 2] then [3], values [10, 20, 40] */
static void test_worked_example(void **state) {
  (void)state;
  const double s1[] = {1, 2}, v1[] = {10, 20}, s2[] = {3}, v2[] = {40};
  fa__osm st = fa__osm_init();
  double acc = fold(&st, 0.0, s1, v1, 2);
  assert_near(st.m, 2.0, 0);
  assert_near(st.l, 1.3679, 1e-4);
  assert_near(acc, 23.6788, 1e-4);
  assert_near(st.l, 1.0 + exp(-1.0), 1e-15);
  acc = fold(&st, acc, s2, v2, 1);
  assert_near(st.m, 3.0, 0);
  assert_near(st.l, 1.5032, 1e-4);
  assert_near(acc, 48.7109, 1e-4);
  const double o = acc * fa__osm_inv_l(&st);
  assert_near(o, 32.405, 1e-3);
  const double s[] = {1, 2, 3}, v[] = {10, 20, 40};
  double lse;
  assert_near(o, one_shot(s, v, 3, &lse), 1e-12);
  assert_near(fa__osm_lse(&st), lse, 1e-12);
}

/* two halves folded separately and merged equal the one-shot softmax */
static void check_merge(const double *sa, const double *sb, const double *va, const double *vb) {
  fa__osm a = fa__osm_init(), b = fa__osm_init();
  const double acc_a = fold(&a, 0.0, sa, va, 2), acc_b = fold(&b, 0.0, sb, vb, 2);
  double wa, wb;
  const fa__osm r = fa__osm_merge(a, b, &wa, &wb);
  const double o = (acc_a * wa + acc_b * wb) * fa__osm_inv_l(&r);
  const double s[] = {sa[0], sa[1], sb[0], sb[1]}, v[] = {va[0], va[1], vb[0], vb[1]};
  double lse;
  assert_near(o, one_shot(s, v, 4, &lse), 1e-12);
  assert_near(fa__osm_lse(&r), lse, 1e-12);
  /* and folding the halves one after the other gives the same */
  fa__osm seq = fa__osm_init();
  double acc = fold(&seq, 0.0, sa, va, 2);
  acc = fold(&seq, acc, sb, vb, 2);
  assert_near(acc * fa__osm_inv_l(&seq), o, 1e-12);
}

static void test_merge_1_2__3_4(void **state) {
  (void)state;
  const double sa[] = {1, 2}, sb[] = {3, 4}, va[] = {1, -2}, vb[] = {3, 5};
  check_merge(sa, sb, va, vb);
}

static void test_merge_0_2__1_3(void **state) {
  (void)state;
  const double sa[] = {0, 2}, sb[] = {1, 3}, va[] = {7, 1}, vb[] = {-4, 2};
  check_merge(sa, sb, va, vb);
  check_merge(sb, sa, vb, va); /* the larger max first */
}

/* -inf scores are masked; a row that sees nothing: o = 0, lse = -inf */
static void test_nothing_visible(void **state) {
  (void)state;
  const double masked[] = {-INFINITY, -INFINITY}, v[] = {1, 2};
  fa__osm st = fa__osm_init();
  double p[2] = {5, 5};
  const double factor = fa__osm_update(&st, masked, 2, p);
  assert_true(st.m == -INFINITY);
  assert_true(st.l == 0.0);
  assert_true(p[0] == 0.0 && p[1] == 0.0);
  assert_false(isnan(factor));
  assert_true(fa__osm_inv_l(&st) == 0.0);
  assert_true(fa__osm_lse(&st) == -INFINITY);
  double wa = 9, wb = 9;
  const fa__osm r = fa__osm_merge(st, fa__osm_init(), &wa, &wb);
  assert_true(r.l == 0.0 && wa == 0.0 && wb == 0.0 && fa__osm_lse(&r) == -INFINITY);
  /* a masked tile then a visible one: the masked one contributes nothing */
  const double s2[] = {-INFINITY, 0.5};
  const double acc = fold(&st, 0.0, s2, v, 2);
  assert_near(acc * fa__osm_inv_l(&st), 2.0, 1e-15);
  assert_near(fa__osm_lse(&st), 0.5, 1e-15);
}

/* scores around 1e4 overflow a naive exp; the running max keeps them finite */
static void test_large_scores(void **state) {
  (void)state;
  const double s1[] = {1e4, 1e4 - 1}, s2[] = {1e4 + 2, -1e4}, v1[] = {1, 2}, v2[] = {3, 4};
  fa__osm st = fa__osm_init();
  double acc = fold(&st, 0.0, s1, v1, 2);
  acc = fold(&st, acc, s2, v2, 2);
  const double s[] = {1e4, 1e4 - 1, 1e4 + 2, -1e4}, v[] = {1, 2, 3, 4};
  double lse;
  const double o = acc * fa__osm_inv_l(&st);
  assert_true(isfinite(o) && isfinite(fa__osm_lse(&st)));
  assert_near(o, one_shot(s, v, 4, &lse), 1e-12);
  assert_near(fa__osm_lse(&st), lse, 1e-9);
}

/* The worked example through the public API on ref: D = 1, scale 1, q = 1,
 * k = [1, 2, 3], v = [10, 20, 40] -> o = 32.4045, lse = log(e + e^2 + e^3). */
static void test_through_fa_forward(void **state) {
  (void)state;
  double q[1] = {1}, k[3] = {1, 2, 3}, v[3] = {10, 20, 40}, o[1] = {NAN}, lse[1] = {NAN};
  fa_tensor tq = fa_tensor_contiguous(q, FA_F64, 1, 1, 1, 1), tk = fa_tensor_contiguous(k, FA_F64, 1, 1, 3, 1);
  fa_tensor tv = fa_tensor_contiguous(v, FA_F64, 1, 1, 3, 1), to = fa_tensor_contiguous(o, FA_F64, 1, 1, 1, 1);
  fa_tensor tl = fa_tensor_contiguous(lse, FA_F64, 1, 1, 1, 1);
  fa_options opt;
  fa_options_init(&opt);
  opt.scale = 1.0;
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  assert_int_equal(fa_forward(ctx, FA_BACKEND_REF, &tq, &tk, &tv, &opt, &to, &tl), FA_OK);
  assert_near(o[0], 32.4045, 1e-4);
  const double e = exp(1.0);
  assert_near(o[0], (10 * e + 20 * e * e + 40 * e * e * e) / (e + e * e + e * e * e), 1e-12);
  assert_near(lse[0], log(e + e * e + e * e * e), 1e-12);
  fa_context_destroy(ctx);
}

/* fa_merge_states: the seeds' blocks [1, 2] and [3] (V = [10, 20, 40]) as
 * partial results merge to the one-shot o = 32.405; n-way merges of random
 * parts over f32 and f64 equal the softmax over all keys; rows where every
 * part saw nothing give o = 0, lse = -inf; bad arguments are named. */
static void test_merge_states_public(void **state) {
  (void)state;
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  const double e = exp(1.0);
  double o_parts[2] = {(10 * e + 20 * e * e) / (e + e * e), 40.0}, lse_parts[2] = {log(e + e * e), 3.0};
  fa_tensor to[2], tl[2];
  for (int k = 0; k < 2; ++k) {
    to[k] = fa_tensor_contiguous(&o_parts[k], FA_F64, 1, 1, 1, 1);
    tl[k] = fa_tensor_contiguous(&lse_parts[k], FA_F64, 1, 1, 1, 1);
  }
  double o = NAN, lse = NAN;
  fa_tensor tout = fa_tensor_contiguous(&o, FA_F64, 1, 1, 1, 1), tlse = fa_tensor_contiguous(&lse, FA_F64, 1, 1, 1, 1);
  for (int be = FA_BACKEND_AUTO; be <= FA_BACKEND_CPU; ++be) {
    if (be == FA_BACKEND_CPU && fa_backend_available(FA_BACKEND_CPU, NULL, 0) != FA_OK) continue;
    o = lse = NAN;
    assert_int_equal(fa_merge_states(ctx, (fa_backend)be, 2, to, tl, &tout, &tlse), FA_OK);
    assert_near(o, 32.405, 1e-3);
    assert_near(o, (10 * e + 20 * e * e + 40 * e * e * e) / (e + e * e + e * e * e), 1e-12);
    assert_near(lse, log(e + e * e + e * e * e), 1e-12);
  }

  /* 4 parts, [2, 3, 5, 4] (o f32, lse f32), against the softmax of all keys */
  enum { NP = 4, B = 2, H = 3, L = 5, DV = 4, NK = 6 };
  static float op[NP][B * H * L * DV], lp[NP][B * H * L], of[B * H * L * DV], lf[B * H * L];
  static double sc[NP][B * H * L][NK], vv[NP][NK][DV];
  unsigned r = 12345;
  for (int k = 0; k < NP; ++k) {
    for (int j = 0; j < NK; ++j)
      for (int d = 0; d < DV; ++d) vv[k][j][d] = (double)((r = r * 1103515245u + 12345u) >> 16 & 1023) / 100.0 - 5;
    for (int row = 0; row < B * H * L; ++row) {
      double m = -INFINITY, l = 0, acc[DV] = {0};
      for (int j = 0; j < NK; ++j) {
        sc[k][row][j] = (double)((r = r * 1103515245u + 12345u) >> 16 & 1023) / 64.0 - 8;
        if (row % 5 == 2 || (row % 5 == 3 && k != 1)) sc[k][row][j] = -INFINITY; /* row%5==2 sees nothing */
        m = fmax(m, sc[k][row][j]);
      }
      for (int j = 0; j < NK && m != -INFINITY; ++j) {
        const double w = exp(sc[k][row][j] - m);
        l += w;
        for (int d = 0; d < DV; ++d) acc[d] += w * vv[k][j][d];
      }
      for (int d = 0; d < DV; ++d) op[k][row * DV + d] = l > 0 ? (float)(acc[d] / l) : 0.0f;
      lp[k][row] = l > 0 ? (float)(m + log(l)) : -INFINITY;
    }
  }
  fa_tensor pto[NP], ptl[NP];
  for (int k = 0; k < NP; ++k) {
    pto[k] = fa_tensor_contiguous(op[k], FA_F32, B, H, L, DV);
    ptl[k] = fa_tensor_contiguous(lp[k], FA_F32, B, H, L, 1);
  }
  fa_tensor fo = fa_tensor_contiguous(of, FA_F32, B, H, L, DV), fl = fa_tensor_contiguous(lf, FA_F32, B, H, L, 1);
  assert_int_equal(fa_merge_states(ctx, FA_BACKEND_AUTO, NP, pto, ptl, &fo, &fl), FA_OK);
  for (int row = 0; row < B * H * L; ++row) {
    double m = -INFINITY, l = 0, acc[DV] = {0};
    for (int k = 0; k < NP; ++k)
      for (int j = 0; j < NK; ++j) m = fmax(m, sc[k][row][j]);
    for (int k = 0; k < NP && m != -INFINITY; ++k)
      for (int j = 0; j < NK; ++j) {
        const double w = exp(sc[k][row][j] - m);
        l += w;
        for (int d = 0; d < DV; ++d) acc[d] += w * vv[k][j][d];
      }
    if (l == 0) {
      assert_true(lf[row] == -INFINITY);
      for (int d = 0; d < DV; ++d) assert_true(of[row * DV + d] == 0.0f);
      continue;
    }
    assert_near(lf[row], m + log(l), 1e-5 * (1 + fabs(m)));
    for (int d = 0; d < DV; ++d) assert_near(of[row * DV + d], acc[d] / l, 1e-5 * 10);
  }

  /* bad arguments: named, outputs untouched */
  o = 7;
  assert_int_equal(fa_merge_states(ctx, FA_BACKEND_REF, 0, to, tl, &tout, &tlse), FA_ERR_BAD_SIZE);
  assert_non_null(strstr(fa_context_last_error(ctx), "n = 0"));
  assert_int_equal(fa_merge_states(ctx, FA_BACKEND_REF, 2, NULL, tl, &tout, &tlse), FA_ERR_NULL_POINTER);
  assert_non_null(strstr(fa_context_last_error(ctx), "o_parts"));
  assert_int_equal(fa_merge_states(ctx, FA_BACKEND_REF, 2, pto, tl, &tout, &tlse), FA_ERR_SHAPE);
  assert_non_null(strstr(fa_context_last_error(ctx), "o_parts[0]"));
  fa_tensor alias = to[1];
  alias.data = &o;
  fa_tensor bad[2] = {to[0], alias};
  assert_int_equal(fa_merge_states(ctx, FA_BACKEND_REF, 2, bad, tl, &tout, &tlse), FA_ERR_OVERLAP);
  assert_non_null(strstr(fa_context_last_error(ctx), "o_parts[1]"));
  assert_true(o == 7);
  if (fa_backend_available(FA_BACKEND_CUDA, NULL, 0) == FA_OK) {
    /* host tensors: the cuda merge needs device memory */
    assert_int_equal(fa_merge_states(ctx, FA_BACKEND_CUDA, 2, to, tl, &tout, &tlse), FA_ERR_MEMORY_SPACE);
  }
  fa_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worked_example),      cmocka_unit_test(test_merge_1_2__3_4),
      cmocka_unit_test(test_merge_0_2__1_3),      cmocka_unit_test(test_nothing_visible),
      cmocka_unit_test(test_large_scores),        cmocka_unit_test(test_through_fa_forward),
      cmocka_unit_test(test_merge_states_public),
  };
  return cmocka_run_group_tests_name("online_softmax", tests, NULL, NULL);
}
