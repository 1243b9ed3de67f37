/* AVX2 + FMA kernels. With 16 ymm registers the micro-kernel holds a
 * 4 x 24 tile of C in 12 accumulators, 3 registers of the B panel and one
 * broadcast: 12 FMAs per k for 3 loads and 4 broadcasts. Compiled with
 * -mavx2 -mfma (-mf16c for the f16 converter, which the table installs only
 * when the CPU has F16C); only called when the CPU has AVX2 and FMA. */
#include <cpuid.h>
#include <math.h>

#include "kernels.h"
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
    K2_ROW(2) K2_ROW(3)
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
  unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 (every AVX2 CPU we know has it, but ask) */
  if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u)) kt->f16_to_f32 = f16_f16c;
}
