/* AVX512-BF16: 16 independent vdpbf16ps chains, as peak_avx512.c does with
 * FMAs. One vdpbf16ps is 16 lanes x 2 bf16 products, each multiplied and
 * added: 64 FLOP, the count the bf16 products of the cpu backend do. The
 * inputs are 1.0 and tiny pairs so that nothing overflows or goes
 * subnormal. Compiled with -mavx512f -mavx512bf16 on x86-64 only. */
#include <immintrin.h>
#include <stdint.h>

#include "peak.h"

#define CHAINS 16

double fa_peak_kernel_avx512bf16(int64_t iters) {
  __m512 a[CHAINS];
  for (int k = 0; k < CHAINS; ++k) a[k] = _mm512_set1_ps((float)k * 0.1f);
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(-1e-7f));
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < CHAINS; ++k) a[k] = _mm512_dpbf16_ps(a[k], x, y);
  }
  __m512 s = a[0];
  for (int k = 1; k < CHAINS; ++k) s = _mm512_add_ps(s, a[k]);
  volatile float sink = _mm512_reduce_add_ps(s); /* keeps the loop alive */
  (void)sink;
  return (double)iters * CHAINS * 16 * 4.0;
}
