/* exp and tanh on 16 floats with AVX-512F, accurate to a few ulp.
 *
 * exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 split in two
 * constants (Cody-Waite), |r| <= ln2/2, e^r by Cephes' degree-7 polynomial
 * (about 1 ulp). vscalefps applies 2^n with correct underflow, so inputs
 * below -104 (and -inf: masked scores) give exactly 0. The clamps keep NaN:
 * vmaxps/vminps return their second operand when one is NaN. Included only
 * by files compiled with -mavx512f. */
#ifndef FA_CPU_VEXP_AVX512_H
#define FA_CPU_VEXP_AVX512_H

#include <immintrin.h>

static inline __m512 fa__cpu_exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(88.7228394f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* 2^x on 16 floats for the softmax, whose exponents are scores minus their
 * running maximum in log2 units (x <= 0 up to rounding): the scale by
 * log2 e is folded into the score product's factor, so no range reduction
 * by ln 2 is needed; r = x - round(x) is exact, 2^r on [-1/2, 1/2] is a
 * degree-6 polynomial (relative error 2e-9, fitted minimax with p(0) = 1
 * exactly, so 2^0 = 1), and vscalefps applies 2^n with correct underflow.
 * Measured against exp2 in double: at most 0.95 ulp (fa__cpu_exp512: 1.01
 * ulp); six FMAs where fa__cpu_exp512 needs nine operations besides.
 * x < -160 (and -inf: masked scores) gives exactly 0; NaN stays NaN (the
 * clamp returns its second operand); +inf gives NaN (not a softmax
 * exponent: a score of +inf is its own maximum, inf - inf). */
static inline __m512 fa__cpu_exp2_512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-160.0f), x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336341476068e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3398875016719103e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.61843691766262e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5503323674201965e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.24022647738456726f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.6931471824645996f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* tanh(y): odd Taylor polynomial for |y| < 0.125 (no cancellation), else
 * 1 - 2 / (exp(2|y|) + 1) with the sign put back. */
static inline __m512 fa__cpu_tanh512(__m512 y) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
  const __m512 ay = _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(sign), _mm512_castps_si512(y)));
  const __m512 e = fa__cpu_exp512(_mm512_add_ps(ay, ay));
  const __m512 big =
      _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  const __m512 y2 = _mm512_mul_ps(y, y);
  __m512 q = _mm512_set1_ps(-17.0f / 315.0f);
  q = _mm512_fmadd_ps(q, y2, _mm512_set1_ps(2.0f / 15.0f));
  q = _mm512_fmadd_ps(q, y2, _mm512_set1_ps(-1.0f / 3.0f));
  q = _mm512_mul_ps(q, y2);
  const __m512 small = _mm512_fmadd_ps(q, y, y);
  const __mmask16 is_small = _mm512_cmp_ps_mask(ay, _mm512_set1_ps(0.125f), _CMP_LT_OQ);
  const __m512 signed_big = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(big), _mm512_and_si512(_mm512_castps_si512(sign), _mm512_castps_si512(y))));
  return _mm512_mask_blend_ps(is_small, signed_big, small);
}

#endif
