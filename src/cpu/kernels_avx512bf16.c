/* AVX512-BF16 kernels: the bf16 products on vdpbf16ps, which adds two bf16
 * products into each f32 lane, so one instruction does the work of two
 * FMAs. The micro-kernel is the AVX-512 one with pairs: an 8 x 48 tile of
 * C in 24 zmm accumulators; per pair step it loads 3 vectors of the pair
 * panel and broadcasts 8 pair words of A, 24 vdpbf16ps for 11 loads.
 * Compiled with -mavx512f -mavx512bw -mavx512bf16; only called when the CPU
 * has AVX512-BF16 (and BW). */
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "kernels_bf16_avx512.h"
#include "vexp_avx512.h"

enum { KB_VL = 16, KB_MR = 8, KB_NV = 3 };

#define FA_INLINE static inline __attribute__((always_inline))

/* The pair at p as a broadcast pair word (vpbroadcastd from memory). */
FA_INLINE __m512i pair_bcast(const uint16_t *p) {
  uint32_t w;
  memcpy(&w, p, sizeof w);
  return _mm512_set1_epi32((int)w);
}

#define KB_ACC(m, v) c##m##v
#define KB_FOR_ALL(X) \
  X(0, 0)             \
  X(0, 1)             \
  X(0, 2)             \
  X(1, 0)             \
  X(1, 1)             \
  X(1, 2)             \
  X(2, 0)             \
  X(2, 1)             \
  X(2, 2)             \
  X(3, 0)             \
  X(3, 1) X(3, 2) X(4, 0) X(4, 1) X(4, 2) X(5, 0) X(5, 1) X(5, 2) X(6, 0) X(6, 1) X(6, 2) X(7, 0) X(7, 1) X(7, 2)

FA_INLINE void mkbf(const int MR_, const int NV_, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                    const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate,
                    float *cmax) {
#define KB_DECL(m, v) __m512 KB_ACC(m, v) = _mm512_setzero_ps();
  KB_FOR_ALL(KB_DECL)
#undef KB_DECL
  const uint16_t *a0 = a, *a1 = a + rsa, *a2 = a + 2 * rsa, *a3 = a + 3 * rsa, *a4 = a + 4 * rsa, *a5 = a + 5 * rsa,
                 *a6 = a + 6 * rsa, *a7 = a + 7 * rsa;
  ptrdiff_t ko = 0;
  for (int k = 0; k < kp; ++k) {
    const __m512i b0 = _mm512_loadu_si512((const void *)b);
    const __m512i b1 = NV_ > 1 ? _mm512_loadu_si512((const void *)(b + KB_VL)) : b0;
    const __m512i b2 = NV_ > 2 ? _mm512_loadu_si512((const void *)(b + 2 * KB_VL)) : b0;
    __m512i am;
#define KB_ROW(m)                                             \
  if (m < MR_) {                                              \
    am = pair_bcast(a##m + ko);                               \
    KB_ACC(m, 0) = kbf_dp(KB_ACC(m, 0), am, b0);              \
    if (NV_ > 1) KB_ACC(m, 1) = kbf_dp(KB_ACC(m, 1), am, b1); \
    if (NV_ > 2) KB_ACC(m, 2) = kbf_dp(KB_ACC(m, 2), am, b2); \
  }
    KB_ROW(0)
    KB_ROW(1)
    KB_ROW(2)
    KB_ROW(3)
    KB_ROW(4)
    KB_ROW(5)
    KB_ROW(6)
    KB_ROW(7)
#undef KB_ROW
    ko += csa;
    b += ldb;
  }
  const __m512 al = _mm512_set1_ps(alpha);
  if (alpha != 1.0f) {
#define KB_SCALE(m, v) \
  if (m < MR_ && v < NV_) KB_ACC(m, v) = _mm512_mul_ps(KB_ACC(m, v), al);
    KB_FOR_ALL(KB_SCALE)
#undef KB_SCALE
  }
  if (accumulate) {
#define KB_ADD(m, v) \
  if (m < MR_ && v < NV_) KB_ACC(m, v) = _mm512_add_ps(_mm512_loadu_ps(c + m * ldc + v * KB_VL), KB_ACC(m, v));
    KB_FOR_ALL(KB_ADD)
#undef KB_ADD
  }
#define KB_STORE(m, v) \
  if (m < MR_ && v < NV_) _mm512_storeu_ps(c + m * ldc + v * KB_VL, KB_ACC(m, v));
  KB_FOR_ALL(KB_STORE)
#undef KB_STORE
  if (cmax) { /* down the rows in registers: the column maxima of the tile */
    __m512 x0 = KB_ACC(0, 0), x1 = KB_ACC(0, 1), x2 = KB_ACC(0, 2);
#define KB_MAX(m, v) \
  if (m > 0 && m < MR_ && v < NV_) x##v = _mm512_max_ps(x##v, KB_ACC(m, v));
    KB_FOR_ALL(KB_MAX)
#undef KB_MAX
    _mm512_storeu_ps(cmax, _mm512_max_ps(_mm512_loadu_ps(cmax), x0));
    if (NV_ > 1) _mm512_storeu_ps(cmax + KB_VL, _mm512_max_ps(_mm512_loadu_ps(cmax + KB_VL), x1));
    if (NV_ > 2) _mm512_storeu_ps(cmax + 2 * KB_VL, _mm512_max_ps(_mm512_loadu_ps(cmax + 2 * KB_VL), x2));
  }
  (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
}

typedef void (*mkbf_fn)(int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa, const uint32_t *b, ptrdiff_t ldb,
                        float alpha, float *c, ptrdiff_t ldc, int accumulate, float *cmax);

#define MK(MR_, NV_)                                                                                                 \
  static void mkbf_##MR_##_##NV_(int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa, const uint32_t *b,         \
                                 ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate, float *cmax) { \
    mkbf(MR_, NV_, kp, a, rsa, csa, b, ldb, alpha, c, ldc, accumulate, cmax);                                        \
  }
#define MK_ROW(MR_) MK(MR_, 1) MK(MR_, 2) MK(MR_, 3)
MK_ROW(1)
MK_ROW(2)
MK_ROW(3)
MK_ROW(4)
MK_ROW(5)
MK_ROW(6)
MK_ROW(7)
MK_ROW(8)
#undef MK_ROW
#undef MK

#define MK_ENTRY(MR_) \
  { mkbf_##MR_##_1, mkbf_##MR_##_2, mkbf_##MR_##_3 }
static const mkbf_fn mkbf_table[KB_MR][KB_NV] = {MK_ENTRY(1), MK_ENTRY(2), MK_ENTRY(3), MK_ENTRY(4),
                                                 MK_ENTRY(5), MK_ENTRY(6), MK_ENTRY(7), MK_ENTRY(8)};
#undef MK_ENTRY

static void gemm_bf16_avx512(int mr, int nv, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa, const uint32_t *b,
                             ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate, float *cmax) {
  mkbf_table[mr - 1][nv - 1](kp, a, rsa, csa, b, ldb, alpha, c, ldc, accumulate, cmax);
}

/* Two rows of f32 to 16 pair words: vcvtne2ps2bf16 puts row r0 in the low
 * 16 words and row r1 in the high 16, vpermw interleaves them. */
static void pair_pack_f32_avx512(uint32_t *dst, ptrdiff_t ldd, const float *x, ptrdiff_t ldx, int rows, int cols) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int r = 0; r < rows; r += 2) {
    const float *x0 = x + (ptrdiff_t)r * ldx, *x1 = x0 + ldx;
    uint32_t *d = dst + (ptrdiff_t)(r / 2) * ldd;
    if (r + 1 < rows) {
      for (int n = 0; n < cols; n += KB_VL) {
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x1 + n), _mm512_loadu_ps(x0 + n));
        _mm512_storeu_si512((void *)(d + n), _mm512_permutexvar_epi16(idx, (__m512i)h));
      }
    } else {
      for (int n = 0; n < cols; n += KB_VL) {
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x0 + n));
        _mm512_storeu_si512((void *)(d + n), _mm512_cvtepu16_epi32((__m256i)h));
      }
    }
  }
}

/* Two rows of bf16 to pair words, 32 columns at a time: vpermt2w picks
 * the interleave of the two rows' 64 words, once for each half. */
static void pair_pack_bf16_avx512(uint32_t *dst, ptrdiff_t ldd, const uint16_t *x, ptrdiff_t ldx, int rows, int cols) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                      36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int r = 0; r < rows; r += 2) {
    const uint16_t *x0 = x + (ptrdiff_t)r * ldx, *x1 = x0 + ldx;
    const int two = r + 1 < rows;
    uint32_t *d = dst + (ptrdiff_t)(r / 2) * ldd;
    for (int n = 0; n < cols; n += 2 * KB_VL) {
      const int left = cols - n;
      const __mmask32 k = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1u);
      const __m512i a = _mm512_maskz_loadu_epi16(k, x0 + n);
      const __m512i b = two ? _mm512_maskz_loadu_epi16(k, x1 + n) : _mm512_setzero_si512();
      const __mmask16 k0 = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
      const __mmask16 k1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u) : 0;
      _mm512_mask_storeu_epi32(d + n, k0, _mm512_permutex2var_epi16(a, lo, b));
      if (k1) _mm512_mask_storeu_epi32(d + n + KB_VL, k1, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

static void to_bf16_avx512(uint16_t *dst, const float *x, int n) {
  for (int t = 0; t < n; t += 32) _mm512_mask_storeu_epi16(dst + t, kbf_mask32(n - t), kbf_from_f32(x + t, n - t));
}

/* kernels.h's softmax_pairs: per 16 query rows, the column maximum over
 * the key tile (two chains), then P = 2^(s c - mu) two keys at a time, each
 * pair of rows of P converted and interleaved as pair_pack_f32 does. */
static int softmax_pairs_avx512(const float *s, ptrdiff_t lds, int bc, int np, float c, const float *cmax, float *m,
                                float *l, float *f, uint32_t *pp, ptrdiff_t ldp) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f), cv = _mm512_set1_ps(c);
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __mmask16 moved = 0;
  for (int i = 0; i < np; i += KB_VL) {
    const float *col = s + i;
    __m512 mx0 = ninf, mx1 = ninf;
    int j = 0;
    if (cmax) {
      mx0 = _mm512_loadu_ps(cmax + i);
    } else {
      for (; j + 1 < bc; j += 2) {
        mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(col + j * lds));
        mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(col + (j + 1) * lds));
      }
      if (j < bc) mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(col + j * lds));
    }
    const __m512 mold = _mm512_loadu_ps(m + i);
    const __m512 mn = _mm512_max_ps(_mm512_mul_ps(_mm512_max_ps(mx0, mx1), cv), mold);
    const __m512 mu = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ), mn, _mm512_setzero_ps());
    const __m512 fi = fa__cpu_exp2_512(_mm512_sub_ps(mold, mu));
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    for (j = 0; j + 1 < bc; j += 2) {
      const __m512 p0 = fa__cpu_exp2_512(_mm512_fmsub_ps(_mm512_loadu_ps(col + j * lds), cv, mu));
      const __m512 p1 = fa__cpu_exp2_512(_mm512_fmsub_ps(_mm512_loadu_ps(col + (j + 1) * lds), cv, mu));
      const __m512bh h = _mm512_cvtne2ps_pbh(p1, p0);
      _mm512_storeu_si512((void *)(pp + (ptrdiff_t)(j / 2) * ldp + i), _mm512_permutexvar_epi16(idx, (__m512i)h));
      sum0 = _mm512_add_ps(sum0, p0);
      sum1 = _mm512_add_ps(sum1, p1);
    }
    if (j < bc) {
      const __m512 p0 = fa__cpu_exp2_512(_mm512_fmsub_ps(_mm512_loadu_ps(col + j * lds), cv, mu));
      _mm512_storeu_si512((void *)(pp + (ptrdiff_t)(j / 2) * ldp + i),
                          _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(p0)));
      sum0 = _mm512_add_ps(sum0, p0);
    }
    _mm512_storeu_ps(l + i, _mm512_fmadd_ps(_mm512_loadu_ps(l + i), fi, _mm512_add_ps(sum0, sum1)));
    _mm512_storeu_ps(m + i, mn);
    _mm512_storeu_ps(f + i, fi);
    moved |= _mm512_cmp_ps_mask(fi, one, _CMP_NEQ_UQ);
  }
  return moved != 0;
}

static void ds_pairs_avx512(const float *p, const float *pd, const float *dp, ptrdiff_t ld, int rows, int np,
                            const float *di, uint32_t *pp, uint32_t *sp, uint16_t *s16) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int r = 0; r < rows; r += 2) {
    const int two = r + 1 < rows;
    const ptrdiff_t o0 = (ptrdiff_t)r * ld, o1 = o0 + ld, ok = (ptrdiff_t)(r / 2) * ld;
    const __m512 d0 = _mm512_set1_ps(di[r]), d1 = _mm512_set1_ps(two ? di[r + 1] : 0.0f);
    for (int n = 0; n < np; n += KB_VL) {
      const __m512 ds0 = _mm512_mul_ps(_mm512_loadu_ps(p + o0 + n), _mm512_sub_ps(_mm512_loadu_ps(dp + o0 + n), d0));
      const __m512 ds1 =
          two ? _mm512_mul_ps(_mm512_loadu_ps(p + o1 + n), _mm512_sub_ps(_mm512_loadu_ps(dp + o1 + n), d1))
              : _mm512_setzero_ps();
      const __m512 pd1 = two ? _mm512_loadu_ps(pd + o1 + n) : _mm512_setzero_ps();
      const __m512i hp = (__m512i)_mm512_cvtne2ps_pbh(pd1, _mm512_loadu_ps(pd + o0 + n));
      const __m512i hs = (__m512i)_mm512_cvtne2ps_pbh(ds1, ds0);
      _mm512_storeu_si512((void *)(pp + ok + n), _mm512_permutexvar_epi16(idx, hp));
      _mm512_storeu_si512((void *)(sp + ok + n), _mm512_permutexvar_epi16(idx, hs));
      _mm256_storeu_si256((__m256i *)(void *)(s16 + o0 + n), _mm512_castsi512_si256(hs));
      if (two) _mm256_storeu_si256((__m256i *)(void *)(s16 + o1 + n), _mm512_extracti64x4_epi64(hs, 1));
    }
  }
}

static void exp_rows_off_avx512(float *s, ptrdiff_t lds, int rows, int n, const float *lse, const float *off,
                                const float *off_lo) {
  for (int r = 0; r < rows; ++r) {
    float *row = s + (ptrdiff_t)r * lds;
    if (lse[r] == -INFINITY) {
      for (int j = 0; j < n; j += KB_VL) _mm512_storeu_ps(row + j, _mm512_setzero_ps());
      continue;
    }
    const __m512 o = _mm512_set1_ps(off[r]), lo = _mm512_set1_ps(off_lo[r]), l = _mm512_set1_ps(lse[r]);
    for (int j = 0; j < n; j += KB_VL) {
      const __m512 x = _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(row + j), o), lo);
      _mm512_storeu_ps(row + j, fa__cpu_exp512(_mm512_sub_ps(x, l)));
    }
  }
}

static void exp_cols_avx512(float *s, ptrdiff_t lds, int rows, int np, const float *lse) {
  for (int i = 0; i < np; i += KB_VL) {
    const __m512 l = _mm512_loadu_ps(lse + i);
    const __mmask16 live = _mm512_cmp_ps_mask(l, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    for (int j = 0; j < rows; ++j) {
      float *x = s + (ptrdiff_t)j * lds + i;
      _mm512_storeu_ps(x, _mm512_maskz_mov_ps(live, fa__cpu_exp512(_mm512_sub_ps(_mm512_loadu_ps(x), l))));
    }
  }
}

static void exp2_rows_off_avx512(float *s, ptrdiff_t lds, int rows, int n, float c, const float *off,
                                 const float *off_lo) {
  const __m512 cv = _mm512_set1_ps(c);
  for (int r = 0; r < rows; ++r) {
    float *row = s + (ptrdiff_t)r * lds;
    if (off[r] == -INFINITY) {
      for (int j = 0; j < n; j += KB_VL) _mm512_storeu_ps(row + j, _mm512_setzero_ps());
      continue;
    }
    const __m512 o = _mm512_set1_ps(off[r]), lo = _mm512_set1_ps(off_lo[r]);
    for (int j = 0; j < n; j += KB_VL) {
      const __m512 x = _mm512_sub_ps(_mm512_fmsub_ps(_mm512_loadu_ps(row + j), cv, o), lo);
      _mm512_storeu_ps(row + j, fa__cpu_exp2_512(x));
    }
  }
}

static void exp2_cols_avx512(float *s, ptrdiff_t lds, int rows, int np, float c, const float *off) {
  const __m512 cv = _mm512_set1_ps(c);
  for (int i = 0; i < np; i += KB_VL) {
    const __m512 o = _mm512_loadu_ps(off + i);
    const __mmask16 live = _mm512_cmp_ps_mask(o, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    for (int j = 0; j < rows; ++j) {
      float *x = s + (ptrdiff_t)j * lds + i;
      _mm512_storeu_ps(x, _mm512_maskz_mov_ps(live, fa__cpu_exp2_512(_mm512_fmsub_ps(_mm512_loadu_ps(x), cv, o))));
    }
  }
}

/* One key's row of 16 lanes into the double sums (a: p, b: p dp), halves lo, hi:
 * each half loaded as 8 floats and widened (vcvtps2pd from memory), no
 * extract of the upper half from a full vector. */
FA_INLINE __m512d ld_pd(const float *x) {
  return _mm512_cvtps_pd(_mm256_loadu_ps(x));
}
#define COLSUM_ROW(j, a0, a1, b0, b1)                                              \
  do {                                                                             \
    const float *x_ = p + (ptrdiff_t)(j)*ld + i, *y_ = dp + (ptrdiff_t)(j)*ld + i; \
    const __m512d xl_ = ld_pd(x_), xh_ = ld_pd(x_ + 8);                            \
    a0 = _mm512_add_pd(a0, xl_);                                                   \
    a1 = _mm512_add_pd(a1, xh_);                                                   \
    b0 = _mm512_fmadd_pd(xl_, ld_pd(y_), b0);                                      \
    b1 = _mm512_fmadd_pd(xh_, ld_pd(y_ + 8), b1);                                  \
  } while (0)

static void colsum2_avx512(const float *p, const float *dp, ptrdiff_t ld, int rows, int np, double *sp, double *spd) {
  for (int i = 0; i < np; i += KB_VL) {
    /* two keys at a time into two sets of sums, for the add latency */
    __m512d a0 = _mm512_loadu_pd(sp + i), a1 = _mm512_loadu_pd(sp + i + 8), b0 = _mm512_loadu_pd(spd + i),
            b1 = _mm512_loadu_pd(spd + i + 8);
    __m512d a2 = _mm512_setzero_pd(), a3 = a2, b2 = a2, b3 = a2;
    int j = 0;
    for (; j + 1 < rows; j += 2) {
      COLSUM_ROW(j, a0, a1, b0, b1);
      COLSUM_ROW(j + 1, a2, a3, b2, b3);
    }
    if (j < rows) COLSUM_ROW(j, a0, a1, b0, b1);
    _mm512_storeu_pd(sp + i, _mm512_add_pd(a0, a2));
    _mm512_storeu_pd(sp + i + 8, _mm512_add_pd(a1, a3));
    _mm512_storeu_pd(spd + i, _mm512_add_pd(b0, b2));
    _mm512_storeu_pd(spd + i + 8, _mm512_add_pd(b1, b3));
  }
}
#undef COLSUM_ROW

/* 24 independent chains of each instruction (enough to cover their latency
 * at two a cycle), the fastest of three rounds after a warm-up round (the
 * AVX-512 clock settles), bf16 counted as 64 FLOP an instruction, FMA as 32. */
static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double fa__cpu_bf16_rate_ratio(void) {
  enum { CHAINS = 24, ITERS = 1024 };
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
  const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-6f);
  double best_bf = 1e9, best_fma = 1e9;
  float sink = 0.0f;
  for (int round = 0; round < 4; ++round) {
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_setzero_ps();
    double t0 = seconds();
    for (int i = 0; i < ITERS; ++i)
      for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    double t1 = seconds();
    for (int c = 0; c < CHAINS; ++c) sink += _mm512_reduce_add_ps(acc[c]);
    if (round > 0 && t1 - t0 < best_bf) best_bf = t1 - t0;
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_setzero_ps();
    t0 = seconds();
    for (int i = 0; i < ITERS; ++i)
      for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_fmadd_ps(x, y, acc[c]);
    t1 = seconds();
    for (int c = 0; c < CHAINS; ++c) sink += _mm512_reduce_add_ps(acc[c]);
    if (round > 0 && t1 - t0 < best_fma) best_fma = t1 - t0;
  }
  volatile float keep = sink;
  (void)keep;
  return 2.0 * best_fma / best_bf;
}

/* The table's vl, mr, nv (AVX-512's 16, 8, 3) are the micro-kernel's. */
void fa__cpu_kernels_avx512bf16(fa__cpu_kernels *kt) {
  kt->isa = FA_ISA_AVX512BF16;
  kt->gemm_bf16 = gemm_bf16_avx512;
  kt->pair_pack_f32 = pair_pack_f32_avx512;
  kt->pair_pack_bf16 = pair_pack_bf16_avx512;
  kt->to_bf16 = to_bf16_avx512;
  kt->exp_cols = exp_cols_avx512;
  kt->colsum2 = colsum2_avx512;
  kt->softmax_pairs = softmax_pairs_avx512;
  kt->ds_pairs = ds_pairs_avx512;
  kt->exp_rows_off = exp_rows_off_avx512;
  kt->exp2_rows_off = exp2_rows_off_avx512;
  kt->exp2_cols = exp2_cols_avx512;
  kt->dec_scores_pairs = fa__cpu_dec_scores_avx512bf16;
  kt->dec_pv_pairs = fa__cpu_dec_pv_avx512bf16;
}
