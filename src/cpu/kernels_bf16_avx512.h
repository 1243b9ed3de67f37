/* The two AVX512-BF16 operations both bf16 kernel files use: one pair step
 * of vdpbf16ps, and f32 to bf16 (round to nearest even, vcvtne2ps2bf16:
 * docs/semantics.md's rounding of P and of a rotated q) 32 elements at a
 * time. Included only by files compiled with the avx512bf16 flags
 * (kernels_avx512bf16.c, kernels_decode_avx512bf16.c). */
#ifndef FA_CPU_KERNELS_BF16_AVX512_H
#define FA_CPU_KERNELS_BF16_AVX512_H

#include <immintrin.h>

#define KBF_INLINE static inline __attribute__((always_inline))

/* The first n lanes (any n; <= 0: none, >= 16: all). */
KBF_INLINE __mmask16 kbf_mask16(int n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

KBF_INLINE __mmask32 kbf_mask32(int n) {
  return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}

/* acc[i] += a[2i] * b[2i] + a[2i + 1] * b[2i + 1] (pairs of bf16) */
KBF_INLINE __m512 kbf_dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* min(n, 32) floats at x as 32 bf16 in order, zeros past n; nothing past n is read */
KBF_INLINE __m512i kbf_from_f32(const float *x, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(kbf_mask16(n), x);
  const __m512 hi = _mm512_maskz_loadu_ps(kbf_mask16(n - 16), x + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

#endif
