/* Dropout's generator and keep rule (src/rules/dropout.h): Philox4x32-10
 * against Random123's published known-answer vectors, the counter layout
 * the header documents, the public fa_dropout_keep against the internal
 * rule, and the kept fraction. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flashattn.h"
#include "rules/dropout.h"
#include "support/cm.h"

static void expect_philox(const uint32_t ctr[4], uint32_t k0, uint32_t k1, const uint32_t want[4]) {
  fa__u32x4 c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
  const fa__u32x4 r = fa__philox4x32_10(c, k0, k1);
  for (int i = 0; i < 4; ++i)
    if (r.v[i] != want[i])
      fail_msg("philox4x32_10 word %d = 0x%08x, Random123 says 0x%08x", i, (unsigned)r.v[i], (unsigned)want[i]);
}

/* Random123 kat_vectors: philox4x32 10 rounds */
static void test_kat_zero(void **state) {
  (void)state;
  const uint32_t ctr[4] = {0, 0, 0, 0}, want[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  expect_philox(ctr, 0, 0, want);
}

static void test_kat_ones(void **state) {
  (void)state;
  const uint32_t ctr[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
  const uint32_t want[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
  expect_philox(ctr, 0xffffffff, 0xffffffff, want);
}

static void test_kat_pi(void **state) {
  (void)state;
  const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const uint32_t want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  expect_philox(ctr, 0xa4093822, 0x299f31d0, want);
}

/* The layout the header writes down: key = {seed lo, seed hi}, counter =
 * {j >> 2, i, b*H + h, offset}, word j & 3, keep iff word < threshold. */
static void test_counter_layout(void **state) {
  (void)state;
  const uint64_t seed = 0x0123456789abcdefull;
  const uint32_t offset = 77, thr = fa__dropout_threshold(0.25);
  for (int64_t bh = 0; bh < 5; ++bh)
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 13; ++j) {
        fa__u32x4 c = {{(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)bh, offset}};
        const fa__u32x4 r = fa__philox4x32_10(c, 0x89abcdefu, 0x01234567u);
        const fa__u32x4 w = fa__dropout_words(seed, offset, bh, i, j);
        for (int t = 0; t < 4; ++t) assert_int_equal(w.v[t], r.v[t]);
        assert_int_equal(fa__dropout_keep(seed, offset, thr, bh, i, j), r.v[j & 3] < thr);
      }
}

static void test_threshold(void **state) {
  (void)state;
  assert_int_equal(fa__dropout_threshold(0.5), 0x80000000u);
  assert_int_equal(fa__dropout_threshold(0.75), 0x40000000u);
  /* floor((1 - p) 2^32), clamped to 2^32 - 1 */
  assert_int_equal(fa__dropout_threshold(1e-12), 0xffffffffu);
  assert_int_equal(fa__dropout_threshold(0.1), (uint32_t)floor(0.9 * 4294967296.0));
  assert_true(fa__dropout_threshold(0.999999) < 5000u);
}

/* fa_dropout_keep is the rule, for users who reproduce a mask. */
static void test_public_equals_internal(void **state) {
  (void)state;
  const double ps[] = {0.1, 0.5, 0.9};
  const uint64_t seed = 0xdeadbeef12345678ull;
  for (int k = 0; k < 3; ++k) {
    const uint32_t thr = fa__dropout_threshold(ps[k]);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < 7; ++i)
          for (int64_t j = 0; j < 11; ++j)
            assert_int_equal(fa_dropout_keep(ps[k], seed, 3, b, h, 4, i, j),
                             fa__dropout_keep(seed, 3, thr, b * 4 + h, i, j));
  }
}

/* p = 0 keeps everything (no RNG); the kept fraction of many elements is
 * within 5 standard deviations of 1 - p; seed and offset change the mask. */
static void test_kept_fraction(void **state) {
  (void)state;
  const double ps[] = {0.1, 0.5, 0.9};
  const int64_t B = 2, H = 4, L = 160, n = B * H * L * L;
  for (int k = 0; k < 3; ++k) {
    int64_t kept = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < L; ++j) kept += fa_dropout_keep(ps[k], 42, 0, b, h, H, i, j);
    const double q = 1.0 - ps[k], sigma = sqrt((double)n * q * (1.0 - q));
    const double z = ((double)kept - (double)n * q) / sigma;
    if (fabs(z) > 5.0)
      fail_msg("p = %g: kept %lld of %lld, %.1f sigma from %g", ps[k], (long long)kept, (long long)n, z, q);
  }
  for (int64_t i = 0; i < 1000; ++i) assert_int_equal(fa_dropout_keep(0.0, 42, 0, 0, 0, 1, i, i * 7), 1);
  int diff_seed = 0, diff_offset = 0, diff_seed_hi = 0;
  for (int64_t j = 0; j < 256; ++j) {
    const int a = fa_dropout_keep(0.5, 42, 0, 0, 0, 1, 0, j);
    diff_seed += a != fa_dropout_keep(0.5, 43, 0, 0, 0, 1, 0, j);
    diff_offset += a != fa_dropout_keep(0.5, 42, 1, 0, 0, 1, 0, j);
    diff_seed_hi += a != fa_dropout_keep(0.5, 42 + (1ull << 32), 0, 0, 0, 1, 0, j);
  }
  assert_true(diff_seed > 64 && diff_offset > 64 && diff_seed_hi > 64);
}

/* fa_dropout_mask is fa_dropout_keep for every element, in row-major order,
 * including a row length that is not a multiple of the four columns one
 * Philox call serves; bad arguments get their status and a reason. */
static void test_mask_equals_keep(void **state) {
  (void)state;
  enum { B = 2, H = 3, LQ = 5, LK = 7 };
  uint8_t keep[B * H * LQ * LK];
  char why[128];
  assert_int_equal(fa_dropout_mask(0.3, 1234567890123ull, 9, B, H, LQ, LK, keep, why, sizeof why), FA_OK);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < LQ; ++i)
        for (int j = 0; j < LK; ++j)
          assert_int_equal(keep[((b * H + h) * LQ + i) * LK + j],
                           fa_dropout_keep(0.3, 1234567890123ull, 9, b, h, H, i, j));
  assert_int_equal(fa_dropout_mask(0.0, 1, 0, B, H, LQ, LK, keep, why, sizeof why), FA_OK);
  for (size_t n = 0; n < sizeof keep; ++n) assert_int_equal(keep[n], 1);
  assert_int_equal(fa_dropout_mask(1.0, 1, 0, B, H, LQ, LK, keep, why, sizeof why), FA_ERR_DROPOUT);
  assert_non_null(strstr(why, "p ="));
  assert_int_equal(fa_dropout_mask(0.5, 1, 0, B, 0, LQ, LK, keep, why, sizeof why), FA_ERR_BAD_SIZE);
  assert_non_null(strstr(why, "H ="));
  assert_int_equal(fa_dropout_mask(0.5, 1, 0, INT64_MAX, INT64_MAX, LQ, LK, keep, why, sizeof why), FA_ERR_BAD_SIZE);
  assert_int_equal(fa_dropout_mask(0.5, 1, 0, B, H, LQ, LK, NULL, why, sizeof why), FA_ERR_NULL_POINTER);
  assert_non_null(strstr(why, "keep"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kat_zero),      cmocka_unit_test(test_kat_ones),
      cmocka_unit_test(test_kat_pi),        cmocka_unit_test(test_counter_layout),
      cmocka_unit_test(test_threshold),     cmocka_unit_test(test_public_equals_internal),
      cmocka_unit_test(test_kept_fraction), cmocka_unit_test(test_mask_equals_keep),
  };
  return cmocka_run_group_tests_name("philox", tests, NULL, NULL);
}
