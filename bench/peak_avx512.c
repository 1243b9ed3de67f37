/* AVX-512F: 16 independent 16-lane FMA chains (of the 32 zmm registers),
 * enough for two FMA pipes at up to 8 cycles of latency. Compiled with
 * -mavx512f on x86-64 only. */
#include <immintrin.h>
#include <stdint.h>

#include "peak.h"

#define CHAINS 16

double fa_peak_kernel_avx512(int64_t iters) {
  __m512 a[CHAINS];
  for (int k = 0; k < CHAINS; ++k) a[k] = _mm512_set1_ps((float)k * 0.1f);
  const __m512 x = _mm512_set1_ps(0.9999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    /* a fixed-count loop over a local array: the compiler keeps a[] in zmm
     * registers and unrolls it fully */
    for (int k = 0; k < CHAINS; ++k) a[k] = _mm512_fmadd_ps(a[k], x, y);
  }
  __m512 s = a[0];
  for (int k = 1; k < CHAINS; ++k) s = _mm512_add_ps(s, a[k]);
  volatile float sink = _mm512_reduce_add_ps(s); /* keeps the loop alive */
  (void)sink;
  return (double)iters * CHAINS * 16 * 2.0;
}
