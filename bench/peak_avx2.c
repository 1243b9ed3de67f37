/* AVX2 + FMA: 12 independent 8-lane FMA chains. Two FMA pipes with a 4-5
 * cycle latency need 8-10 chains in flight; 12 plus the two constants fit
 * in the 16 ymm registers. Compiled with -mavx2 -mfma on x86-64 only. */
#include <immintrin.h>
#include <stdint.h>

#include "peak.h"

double fa_peak_kernel_avx2(int64_t iters) {
  __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(0.1f), a2 = _mm256_set1_ps(0.2f), a3 = _mm256_set1_ps(0.3f),
         a4 = _mm256_set1_ps(0.4f), a5 = _mm256_set1_ps(0.5f), a6 = _mm256_set1_ps(0.6f), a7 = _mm256_set1_ps(0.7f),
         a8 = _mm256_set1_ps(0.8f), a9 = _mm256_set1_ps(0.9f), a10 = _mm256_set1_ps(1.0f), a11 = _mm256_set1_ps(1.1f);
  const __m256 x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = _mm256_fmadd_ps(a0, x, y);
    a1 = _mm256_fmadd_ps(a1, x, y);
    a2 = _mm256_fmadd_ps(a2, x, y);
    a3 = _mm256_fmadd_ps(a3, x, y);
    a4 = _mm256_fmadd_ps(a4, x, y);
    a5 = _mm256_fmadd_ps(a5, x, y);
    a6 = _mm256_fmadd_ps(a6, x, y);
    a7 = _mm256_fmadd_ps(a7, x, y);
    a8 = _mm256_fmadd_ps(a8, x, y);
    a9 = _mm256_fmadd_ps(a9, x, y);
    a10 = _mm256_fmadd_ps(a10, x, y);
    a11 = _mm256_fmadd_ps(a11, x, y);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  volatile float sink = out[0] + out[7]; /* keeps the loop alive */
  (void)sink;
  return (double)iters * 12 * 8 * 2.0;
}
