/* exp and tanh on 8 floats with AVX2 + FMA: the same Cody-Waite reduction
 * and Cephes polynomial as vexp_avx512.h. Without vscalefps, 2^n is built
 * in the exponent bits, so inputs below -87.3 are flushed to exactly 0
 * (instead of f32 subnormals) and -inf gives 0. NaN stays NaN: the clamps
 * put x second (vmaxps/vminps return the second operand on NaN) and the
 * flush compare is false for NaN. Included only by -mavx2 -mfma files. */
#ifndef FA_CPU_VEXP_AVX2_H
#define FA_CPU_VEXP_AVX2_H

#include <immintrin.h>

static inline __m256 fa__cpu_exp256(__m256 x0) {
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
  __m256 x = _mm256_max_ps(lo, x0);
  x = _mm256_min_ps(_mm256_set1_ps(88.7228394f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  /* n in [-126, 128]: 2^n by the exponent field (128 only near overflow, giving inf) */
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(_mm256_cmp_ps(x0, lo, _CMP_LT_OQ), y);
}

static inline __m256 fa__cpu_tanh256(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ay = _mm256_andnot_ps(sign, y);
  const __m256 e = fa__cpu_exp256(_mm256_add_ps(ay, ay));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 y2 = _mm256_mul_ps(y, y);
  __m256 q = _mm256_set1_ps(-17.0f / 315.0f);
  q = _mm256_fmadd_ps(q, y2, _mm256_set1_ps(2.0f / 15.0f));
  q = _mm256_fmadd_ps(q, y2, _mm256_set1_ps(-1.0f / 3.0f));
  q = _mm256_mul_ps(q, y2);
  const __m256 small = _mm256_fmadd_ps(q, y, y);
  const __m256 is_small = _mm256_cmp_ps(ay, _mm256_set1_ps(0.125f), _CMP_LT_OQ);
  const __m256 signed_big = _mm256_or_ps(big, _mm256_and_ps(sign, y));
  return _mm256_blendv_ps(signed_big, small, is_small);
}

#endif
