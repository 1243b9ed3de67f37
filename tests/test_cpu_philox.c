/* The cpu backend's dropout kernel (kt->dropout of src/cpu/kernels.h),
 * under every ISA this CPU has, against the one definition of the
 * keep-mask, fa__dropout_keep of src/rules/dropout.h, element by element
 * and bit for bit: many seeds, offsets, heads, rows and column ranges
 * (unaligned starts and ends, Philox groups near 2^30 and wrapping past
 * 2^32, rows and heads past 2^32), the thresholds of p = 0.01, 0.1, 0.5,
 * 0.9, and the row-major, column-major and strided tile layouts; bytes
 * outside the tile must stay untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_isa.h"
#include "rules/dropout.h"
#include "support/cm.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define PICK(a) (a)[next() % (sizeof(a) / sizeof((a)[0]))]

enum { GUARD = 64, SENTINEL = 0xA5 };

/* One tile in one layout: keep[ii*ki + jj*kj] against the rule; every
 * other byte of the buffer (guards included) still SENTINEL. */
static void check_layout(const fa__cpu_kernels *kt, const uint8_t *want, int br, int bc, ptrdiff_t ki, ptrdiff_t kj,
                         uint64_t seed, uint32_t offset, uint32_t thr, int64_t bh, int64_t i0, int64_t j0) {
  const size_t span = (size_t)((br > 0 ? br - 1 : 0) * ki + (bc > 0 ? bc - 1 : 0) * kj + 1);
  const size_t size = span + 2 * GUARD;
  uint8_t *buf = malloc(size);
  uint8_t *seen = calloc(size, 1);
  assert_non_null(buf);
  assert_non_null(seen);
  memset(buf, SENTINEL, size);
  uint8_t *keep = buf + GUARD;
  kt->dropout(keep, ki, kj, br, bc, seed, offset, thr, bh, i0, j0);
  for (int ii = 0; ii < br; ++ii)
    for (int jj = 0; jj < bc; ++jj) {
      const ptrdiff_t at = ii * ki + jj * kj;
      seen[GUARD + at] = 1;
      if (keep[at] != want[ii * bc + jj])
        fail_msg(
            "isa %s: keep(bh=%lld, i=%lld, j=%lld) = %d, rule says %d (seed 0x%016llx, offset %u, threshold "
            "0x%08x, tile i0=%lld j0=%lld %dx%d, ki=%td kj=%td)",
            fa_cpu_isa_name(kt->isa), (long long)bh, (long long)(i0 + ii), (long long)(j0 + jj), keep[at],
            want[ii * bc + jj], (unsigned long long)seed, (unsigned)offset, (unsigned)thr, (long long)i0, (long long)j0,
            br, bc, ki, kj);
    }
  for (size_t t = 0; t < size; ++t)
    if (!seen[t] && buf[t] != SENTINEL)
      fail_msg("isa %s: byte %td outside the %dx%d tile (ki=%td kj=%td, j0=%lld) was written", fa_cpu_isa_name(kt->isa),
               (ptrdiff_t)t - GUARD, br, bc, ki, kj, (long long)j0);
  free(seen);
  free(buf);
}

static void check_isa(fa_cpu_isa isa) {
  if (!fa__cpu_isa_have(isa)) skip();
  const fa__cpu_kernels *kt = fa__cpu_kernels_get(isa);
  assert_int_equal(kt->isa, isa);
  assert_non_null(kt->dropout);

  static const double ps[] = {0.01, 0.1, 0.5, 0.9};
  static const uint64_t seeds[] = {0, ~0ull, 0x0123456789abcdefull, 42};
  static const uint32_t offsets[] = {0, 1, 0xffffffffu, 0x80000000u};
  static const int64_t bhs[] = {0, 1, 7, 0xffffffffll, (1ll << 32) + 5};
  /* rows: small, and past 2^32 (the counter holds i mod 2^32; vector lanes wrap there) */
  static const int64_t i0s[] = {0, 1, 5, 1000, (1ll << 32) - 5, (1ll << 32) + 3};
  /* columns: aligned and unaligned starts; groups (j >> 2) near 2^30 (j near
   * 2^32) and wrapping past 2^32 (j near 2^34) */
  static const int64_t j0s[] = {0,
                                1,
                                2,
                                3,
                                4,
                                5,
                                6,
                                7,
                                61,
                                62,
                                63,
                                64,
                                65,
                                1021,
                                (1ll << 32) - 70,
                                (1ll << 32) - 3,
                                (1ll << 32) + 1,
                                (1ll << 34) - 70,
                                (1ll << 34) - 33,
                                (1ll << 34) - 6,
                                (1ll << 34) - 1,
                                (1ll << 34) + 2};
  static const int brs[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33};
  static const int bcs[] = {0, 1, 2, 3, 4, 5, 7, 31, 32, 33, 63, 64, 65, 66, 67, 127, 128, 129, 200};

  for (int cs = 0; cs < 10000; ++cs) {
    const uint64_t seed = cs % 5 == 4 ? next() : PICK(seeds);
    const uint32_t offset = cs % 3 == 2 ? (uint32_t)next() : PICK(offsets);
    const int64_t bh = cs % 4 == 3 ? (int64_t)(next() >> 24) : PICK(bhs);
    const int64_t i0 = cs % 6 == 5 ? (int64_t)(next() >> 30) : PICK(i0s);
    const int64_t j0 = cs % 5 == 3 ? (int64_t)(next() >> 28) : PICK(j0s);
    const int br = PICK(brs), bc = PICK(bcs);
    const uint32_t thr = fa__dropout_threshold(ps[cs % 4]);

    uint8_t *want = malloc((size_t)(br * bc) + 1);
    assert_non_null(want);
    for (int ii = 0; ii < br; ++ii)
      for (int jj = 0; jj < bc; ++jj)
        want[ii * bc + jj] = (uint8_t)fa__dropout_keep(seed, offset, thr, bh, i0 + ii, j0 + jj);

    /* row-major (the backward's), column-major (the forward's), and two strided layouts */
    check_layout(kt, want, br, bc, bc + 3, 1, seed, offset, thr, bh, i0, j0);
    check_layout(kt, want, br, bc, 1, br + 5, seed, offset, thr, bh, i0, j0);
    check_layout(kt, want, br, bc, 2, 2 * br + 1, seed, offset, thr, bh, i0, j0);
    check_layout(kt, want, br, bc, 3 * bc + 1, 3, seed, offset, thr, bh, i0, j0);
    free(want);
  }
}

static void test_generic(void **state) {
  (void)state;
  check_isa(FA_ISA_GENERIC);
}

static void test_avx2(void **state) {
  (void)state;
  check_isa(FA_ISA_AVX2);
}

static void test_avx512(void **state) {
  (void)state;
  check_isa(FA_ISA_AVX512);
}

static void test_avx512bf16(void **state) {
  (void)state;
  check_isa(FA_ISA_AVX512BF16);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_generic),
      cmocka_unit_test(test_avx2),
      cmocka_unit_test(test_avx512),
      cmocka_unit_test(test_avx512bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
