/* The online softmax (src/rules/online_softmax.h) on the worked examples of
 * the literature, merges equal to the one-shot softmax, the rows that see
 * nothing, and the same example through fa_forward on ref. */
#include <math.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worked_example), cmocka_unit_test(test_merge_1_2__3_4),
      cmocka_unit_test(test_merge_0_2__1_3), cmocka_unit_test(test_nothing_visible),
      cmocka_unit_test(test_large_scores),   cmocka_unit_test(test_through_fa_forward),
  };
  return cmocka_run_group_tests_name("online_softmax", tests, NULL, NULL);
}
