/* AVX2 + FMA kernels. With 16 ymm registers the micro-kernel holds a
 * 4 x 24 tile of C in 12 accumulators, 3 registers of the B panel and one
 * broadcast: 12 FMAs per k for 3 loads and 4 broadcasts. Compiled with
 * -mavx2 -mfma (-mf16c for the f16 converter, which the table installs only
 * when the CPU has F16C); only called when the CPU has AVX2 and FMA. */
#include <cpuid.h>
#include <math.h>

#include "kernels.h"
#include "rules/dropout.h"
#include "vexp_avx2.h"

enum { K2_VL = 8, K2_MR = 4, K2_NV = 3 };

#define FA_INLINE static inline __attribute__((always_inline))

/* Named accumulators, not an array: with exactly 16 ymm registers in use
 * (12 + 3 + 1) GCC otherwise keeps the array in memory and stores it on
 * every k. The guards fold away for each compile-time MR_ x NV_. */
#define K2_ACC(m, v) c##m##v
#define K2_FOR_ALL(X) X(0, 0) X(0, 1) X(0, 2) X(1, 0) X(1, 1) X(1, 2) X(2, 0) X(2, 1) X(2, 2) X(3, 0) X(3, 1) X(3, 2)

FA_INLINE void mk256(const int MR_, const int NV_, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                     ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
#define K2_DECL(m, v) __m256 K2_ACC(m, v) = _mm256_setzero_ps();
  K2_FOR_ALL(K2_DECL)
#undef K2_DECL
  if (accumulate) {
#define K2_LOAD(m, v) \
  if (m < MR_ && v < NV_) K2_ACC(m, v) = _mm256_loadu_ps(c + m * ldc + v * K2_VL);
    K2_FOR_ALL(K2_LOAD)
#undef K2_LOAD
  }
  const float *a0 = a, *a1 = a + rsa, *a2 = a + 2 * rsa, *a3 = a + 3 * rsa;
  ptrdiff_t ko = 0;
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = NV_ > 1 ? _mm256_loadu_ps(b + K2_VL) : b0;
    const __m256 b2 = NV_ > 2 ? _mm256_loadu_ps(b + 2 * K2_VL) : b0;
    __m256 am;
#define K2_ROW(m)                                                      \
  if (m < MR_) {                                                       \
    am = _mm256_broadcast_ss(a##m + ko);                               \
    K2_ACC(m, 0) = _mm256_fmadd_ps(am, b0, K2_ACC(m, 0));              \
    if (NV_ > 1) K2_ACC(m, 1) = _mm256_fmadd_ps(am, b1, K2_ACC(m, 1)); \
    if (NV_ > 2) K2_ACC(m, 2) = _mm256_fmadd_ps(am, b2, K2_ACC(m, 2)); \
  }
    K2_ROW(0)
    K2_ROW(1)
    K2_ROW(2)
    K2_ROW(3)
#undef K2_ROW
        ko += csa;
    b += ldb;
  }
#define K2_STORE(m, v) \
  if (m < MR_ && v < NV_) _mm256_storeu_ps(c + m * ldc + v * K2_VL, K2_ACC(m, v));
  K2_FOR_ALL(K2_STORE)
#undef K2_STORE
}

typedef void (*mk_fn)(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb, float *c,
                      ptrdiff_t ldc, int accumulate);

#define MK(MR_, NV_)                                                                                                   \
  static void mk256_##MR_##_##NV_(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb, \
                                  float *c, ptrdiff_t ldc, int accumulate) {                                           \
    mk256(MR_, NV_, kc, a, rsa, csa, b, ldb, c, ldc, accumulate);                                                      \
  }
#define MK_ROW(MR_) MK(MR_, 1) MK(MR_, 2) MK(MR_, 3)
MK_ROW(1)
MK_ROW(2)
MK_ROW(3)
MK_ROW(4)
#undef MK_ROW
#undef MK

#define MK_ENTRY(MR_) \
  { mk256_##MR_##_1, mk256_##MR_##_2, mk256_##MR_##_3 }
static const mk_fn mk256_table[K2_MR][K2_NV] = {MK_ENTRY(1), MK_ENTRY(2), MK_ENTRY(3), MK_ENTRY(4)};
#undef MK_ENTRY

static void gemm_avx2(int mr, int nv, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                      ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  mk256_table[mr - 1][nv - 1](kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

static int softmax_avx2(float *s, ptrdiff_t lds, int bc, int np, float *m, float *l, float *f) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
  int moved = 0;
  for (int i = 0; i < np; i += K2_VL) {
    float *col = s + i;
    __m256 mx0 = ninf, mx1 = ninf;
    int j = 0;
    for (; j + 1 < bc; j += 2) {
      mx0 = _mm256_max_ps(mx0, _mm256_loadu_ps(col + j * lds));
      mx1 = _mm256_max_ps(mx1, _mm256_loadu_ps(col + (j + 1) * lds));
    }
    if (j < bc) mx0 = _mm256_max_ps(mx0, _mm256_loadu_ps(col + j * lds));
    const __m256 mold = _mm256_loadu_ps(m + i);
    const __m256 mn = _mm256_max_ps(_mm256_max_ps(mx0, mx1), mold);
    const __m256 mu = _mm256_andnot_ps(_mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ), mn);
    const __m256 fi = fa__cpu_exp256(_mm256_sub_ps(mold, mu));
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    for (j = 0; j + 1 < bc; j += 2) {
      const __m256 p0 = fa__cpu_exp256(_mm256_sub_ps(_mm256_loadu_ps(col + j * lds), mu));
      const __m256 p1 = fa__cpu_exp256(_mm256_sub_ps(_mm256_loadu_ps(col + (j + 1) * lds), mu));
      _mm256_storeu_ps(col + j * lds, p0);
      _mm256_storeu_ps(col + (j + 1) * lds, p1);
      sum0 = _mm256_add_ps(sum0, p0);
      sum1 = _mm256_add_ps(sum1, p1);
    }
    if (j < bc) {
      const __m256 p0 = fa__cpu_exp256(_mm256_sub_ps(_mm256_loadu_ps(col + j * lds), mu));
      _mm256_storeu_ps(col + j * lds, p0);
      sum0 = _mm256_add_ps(sum0, p0);
    }
    _mm256_storeu_ps(l + i, _mm256_fmadd_ps(_mm256_loadu_ps(l + i), fi, _mm256_add_ps(sum0, sum1)));
    _mm256_storeu_ps(m + i, mn);
    _mm256_storeu_ps(f + i, fi);
    moved |= _mm256_movemask_ps(_mm256_cmp_ps(fi, one, _CMP_NEQ_UQ));
  }
  return moved != 0;
}

static void scale_cols_avx2(float *c, ptrdiff_t ldc, int rows, int np, const float *f) {
  for (int i = 0; i < np; i += K2_VL) {
    const __m256 fi = _mm256_loadu_ps(f + i);
    for (int r = 0; r < rows; ++r)
      _mm256_storeu_ps(c + r * ldc + i, _mm256_mul_ps(_mm256_loadu_ps(c + r * ldc + i), fi));
  }
}

static void exp_rows_avx2(float *s, ptrdiff_t lds, int rows, int n, const float *lse) {
  for (int r = 0; r < rows; ++r) {
    float *row = s + r * lds;
    if (lse[r] == -INFINITY) {
      for (int j = 0; j < n; j += K2_VL) _mm256_storeu_ps(row + j, _mm256_setzero_ps());
      continue;
    }
    const __m256 lr = _mm256_set1_ps(lse[r]);
    for (int j = 0; j < n; j += K2_VL)
      _mm256_storeu_ps(row + j, fa__cpu_exp256(_mm256_sub_ps(_mm256_loadu_ps(row + j), lr)));
  }
}

static void ds_rows_avx2(const float *p, float *dp, ptrdiff_t ld, int rows, int n, const float *di) {
  for (int r = 0; r < rows; ++r) {
    const __m256 d = _mm256_set1_ps(di[r]);
    for (int j = 0; j < n; j += K2_VL) {
      const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(dp + r * ld + j), d);
      _mm256_storeu_ps(dp + r * ld + j, _mm256_mul_ps(_mm256_loadu_ps(p + r * ld + j), x));
    }
  }
}

static void exp_avx2(float *y, const float *x, int n) {
  int t = 0;
  for (; t + K2_VL <= n; t += K2_VL) _mm256_storeu_ps(y + t, fa__cpu_exp256(_mm256_loadu_ps(x + t)));
  if (t < n) {
    float buf[K2_VL] = {0};
    for (int u = t; u < n; ++u) buf[u - t] = x[u];
    _mm256_storeu_ps(buf, fa__cpu_exp256(_mm256_loadu_ps(buf)));
    for (int u = t; u < n; ++u) y[u] = buf[u - t];
  }
}

static void softcap_avx2(float *s, int n, float cap) {
  const __m256 c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
  int t = 0;
  for (; t + K2_VL <= n; t += K2_VL)
    _mm256_storeu_ps(s + t, _mm256_mul_ps(c, fa__cpu_tanh256(_mm256_mul_ps(_mm256_loadu_ps(s + t), inv))));
  if (t < n) {
    float buf[K2_VL] = {0};
    for (int u = t; u < n; ++u) buf[u - t] = s[u];
    _mm256_storeu_ps(buf, _mm256_mul_ps(c, fa__cpu_tanh256(_mm256_mul_ps(_mm256_loadu_ps(buf), inv))));
    for (int u = t; u < n; ++u) s[u] = buf[u - t];
  }
}

static void f16_f16c(float *dst, const uint16_t *src, int n) {
  int t = 0;
  for (; t + K2_VL <= n; t += K2_VL)
    _mm256_storeu_ps(dst + t, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + t))));
  for (; t < n; ++t) dst[t] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[t])));
}

static void bf16_avx2(float *dst, const uint16_t *src, int n) {
  int t = 0;
  for (; t + K2_VL <= n; t += K2_VL) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + t)));
    _mm256_storeu_ps(dst + t, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; t < n; ++t) {
    const uint32_t u = (uint32_t)src[t] << 16;
    float v;
    __builtin_memcpy(&v, &u, 4);
    dst[t] = v;
  }
}

/* Dropout: Philox4x32-10 on 8 counters at once. This mirrors
 * fa__philox4x32_10 and fa__dropout_keep of src/rules/dropout.h (the one
 * definition of the keep-mask; constants taken from there) and is held to
 * it bit for bit by tests/test_cpu_philox.c. A round's 32x32->64 products:
 * _mm256_mul_epu32 multiplies the even lanes; the odd lanes are shifted
 * down first; blends put the high and low halves back in their lanes.
 * AVX2 compares signed only: x < t unsigned iff (x ^ 2^31) < (t ^ 2^31). */
FA_INLINE __m256i k2_mulhilo(__m256i a, __m256i m, __m256i *lo) {
  const __m256i pe = _mm256_mul_epu32(a, m);
  const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  return _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}

/* c = philox4x32_10(c, key) lane by lane (fa__philox4x32_10). */
FA_INLINE void k2_philox(__m256i c[4], uint32_t k0, uint32_t k1) {
  const __m256i m0 = _mm256_set1_epi32((int)FA__PHILOX_M0), m1 = _mm256_set1_epi32((int)FA__PHILOX_M1);
  for (int r = 0; r < 10; ++r) {
    __m256i lo0, lo1;
    const __m256i hi0 = k2_mulhilo(c[0], m0, &lo0), hi1 = k2_mulhilo(c[2], m1, &lo1);
    c[0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[1]), _mm256_set1_epi32((int)k0));
    c[1] = lo1;
    c[2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[3]), _mm256_set1_epi32((int)k1));
    c[3] = lo0;
    k0 += FA__PHILOX_W0;
    k1 += FA__PHILOX_W1;
  }
}

/* -1 where x < thr (unsigned), thr_s = thr ^ 2^31. */
FA_INLINE __m256i k2_ltu(__m256i x, __m256i thr_s) {
  return _mm256_cmpgt_epi32(thr_s, _mm256_xor_si256(x, _mm256_set1_epi32((int)0x80000000u)));
}

/* Row i: the 32 keep bytes of columns 4*g .. 4*g+31 (8 groups, lane L
 * holds group g+L; its 4 words are columns 4(g+L)+w, i.e. byte w of dword
 * L), stored at out. */
FA_INLINE void k2_drop_row32(uint8_t *out, uint32_t g, uint32_t i, uint32_t bh, uint32_t offset, uint64_t seed,
                             __m256i thr_s) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i c[4] = {_mm256_add_epi32(_mm256_set1_epi32((int)g), iota), _mm256_set1_epi32((int)i),
                  _mm256_set1_epi32((int)bh), _mm256_set1_epi32((int)offset)};
  k2_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  const __m256i b01 = _mm256_or_si256(_mm256_and_si256(k2_ltu(c[0], thr_s), _mm256_set1_epi32(1)),
                                      _mm256_and_si256(k2_ltu(c[1], thr_s), _mm256_set1_epi32(1 << 8)));
  const __m256i b23 = _mm256_or_si256(_mm256_and_si256(k2_ltu(c[2], thr_s), _mm256_set1_epi32(1 << 16)),
                                      _mm256_and_si256(k2_ltu(c[3], thr_s), _mm256_set1_epi32(1 << 24)));
  _mm256_storeu_si256((__m256i *)out, _mm256_or_si256(b01, b23));
}

static void dropout_avx2(uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj, int br, int bc, uint64_t seed, uint32_t offset,
                         uint32_t threshold, int64_t bh, int64_t i0, int64_t j0) {
  const __m256i thr_s = _mm256_set1_epi32((int)(threshold ^ 0x80000000u));
  if (ki == 1 && kj != 1) {
    /* columns: lane L is row i0+ii+L; one Philox group of 4 columns at a time */
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m128i one = _mm_set1_epi8(1);
    for (int ii = 0; ii < br; ii += 8) {
      const int nr = br - ii < 8 ? br - ii : 8;
      const __m256i ci = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)(i0 + ii)), iota);
      for (int jj = 0; jj < bc;) {
        const int64_t j = j0 + jj;
        const int u0 = (int)(j & 3), n = 4 - u0 < bc - jj ? 4 - u0 : bc - jj;
        __m256i c[4] = {_mm256_set1_epi32((int)(uint32_t)((uint64_t)j >> 2)), ci, _mm256_set1_epi32((int)(uint32_t)bh),
                        _mm256_set1_epi32((int)offset)};
        k2_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (int u = 0; u < n; ++u) {
          const __m256i m = k2_ltu(c[u0 + u], thr_s); /* 8 dwords of -1 / 0 ... */
          const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
          const __m128i b = _mm_and_si128(_mm_packs_epi16(w, w), one); /* ... as 8 bytes of 1 / 0, in order */
          uint8_t *dst = keep + (jj + u) * kj + ii;
          if (nr == 8) {
            _mm_storel_epi64((__m128i *)dst, b);
          } else {
            uint8_t tmp[16];
            _mm_storeu_si128((__m128i *)tmp, b);
            for (int r = 0; r < nr; ++r) dst[r] = tmp[r];
          }
        }
        jj += n;
      }
    }
    return;
  }
  /* rows: lanes take 8 consecutive groups (32 columns) */
  uint8_t tmp[32];
  for (int ii = 0; ii < br; ++ii) {
    uint8_t *row = keep + ii * ki;
    const uint32_t i = (uint32_t)(i0 + ii);
    for (int jj = 0; jj < bc;) {
      const int64_t j = j0 + jj;
      const uint32_t g = (uint32_t)((uint64_t)j >> 2);
      const int u0 = (int)(j & 3);
      if (kj == 1 && u0 == 0 && bc - jj >= 32) {
        k2_drop_row32(row + jj, g, i, (uint32_t)bh, offset, seed, thr_s);
        jj += 32;
      } else {
        k2_drop_row32(tmp, g, i, (uint32_t)bh, offset, seed, thr_s);
        const int n = 32 - u0 < bc - jj ? 32 - u0 : bc - jj;
        for (int u = 0; u < n; ++u) row[(jj + u) * kj] = tmp[u0 + u];
        jj += n;
      }
    }
  }
}

/* Decode: the primitives kernels_decode_simd.h is written over (8 lanes;
 * a P.V tile of up to 4 rows x 2 vectors: 8 accumulators, 2 V vectors and
 * a broadcast within the 16 ymm registers). f16 rows need F16C, which the
 * table's dec_dtypes offers only when the CPU has it. */
#define DS_W 8
#define DS_V __m256
#define DS_PV_MR 4
#define DS_PV_NV 2
#define dsv_zero _mm256_setzero_ps
#define dsv_set1 _mm256_set1_ps
#define dsv_fma _mm256_fmadd_ps
#define dsv_add _mm256_add_ps
#define dsv_mul _mm256_mul_ps
#define dsv_max _mm256_max_ps
#define dsv_loadu _mm256_loadu_ps
#define dsv_storeu _mm256_storeu_ps
#define dsv_exp fa__cpu_exp256
FA_INLINE __m256 dsv_ld_bf16(const char *p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
FA_INLINE __m256 dsv_ld_f16(const char *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
FA_INLINE __m256i dsv_tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
FA_INLINE __m256 dsv_load_tail(const float *p, int n, float fill) {
  const __m256i k = dsv_tail_mask(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k));
}
FA_INLINE void dsv_store_tail(float *p, __m256 v, int n) {
  _mm256_maskstore_ps(p, dsv_tail_mask(n), v);
}
/* Plain stores, not vmaskmovps: the scores store 2 .. 8 lanes of every
 * micro-tile, and a masked store costs Zen 3 several times a plain one. */
FA_INLINE void dsv_store_lanes(float *p, __m256 v, int first, int n) {
  if (n == 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  float t[8];
  _mm256_storeu_ps(t, v);
  for (int i = 0; i < n; ++i) p[i] = t[first + i];
}
/* lanes 2r, 2r + 1 to p[r * ld], p[r * ld + 1], r < 4 (ds_scores_r4's micro-tile) */
FA_INLINE void dsv_store_rows4(float *p, ptrdiff_t ld, __m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  _mm_storel_pi((__m64 *)p, lo);
  _mm_storeh_pi((__m64 *)(p + ld), lo);
  _mm_storel_pi((__m64 *)(p + 2 * ld), hi);
  _mm_storeh_pi((__m64 *)(p + 3 * ld), hi);
}
FA_INLINE float dsv_hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}
FA_INLINE float dsv_hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}
/* 8 vectors to one, lane i = sum of a[i]: halves, pairs, then one in-lane
 * permute (the tree leaves 0 2 1 3 | 4 6 5 7). */
FA_INLINE __m256 dsv_reduce(const __m256 *a) {
  __m256 t[4], u[2];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20), _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  for (int i = 0; i < 2; ++i)
    u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permute_ps(w, _MM_SHUFFLE(3, 1, 2, 0));
}
#include "kernels_decode_simd.h"

void fa__cpu_kernels_avx2(fa__cpu_kernels *kt) {
  kt->isa = FA_ISA_AVX2;
  kt->vl = K2_VL;
  kt->mr = K2_MR;
  kt->nv = K2_NV;
  kt->gemm = gemm_avx2;
  kt->softmax = softmax_avx2;
  kt->scale_cols = scale_cols_avx2;
  kt->exp_rows = exp_rows_avx2;
  kt->ds_rows = ds_rows_avx2;
  kt->exp = exp_avx2;
  kt->softcap = softcap_avx2;
  kt->bf16_to_f32 = bf16_avx2;
  kt->dropout = dropout_avx2;
  kt->dec_scores = ds_dec_scores;
  kt->dec_softmax = ds_dec_softmax;
  kt->dec_pv = ds_dec_pv;
  kt->dec_dtypes = 1u << FA_F32 | 1u << FA_BF16;
  unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 (every AVX2 CPU we know has it, but ask) */
  if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u)) {
    kt->f16_to_f32 = f16_f16c;
    kt->dec_dtypes |= 1u << FA_F16;
  }
}
