/* The AVX-512 vector primitives that the decode kernels are written over
 * (kernels_decode_simd.h's list), shared by kernels_avx512.c, which
 * instantiates those kernels, and kernels_decode_avx512bf16.c, whose bf16
 * pair kernels reduce their dot products with the same tree. Included only
 * by files compiled with -mavx512f. */
#ifndef FA_CPU_KERNELS_DECODE_AVX512_H
#define FA_CPU_KERNELS_DECODE_AVX512_H

#include <immintrin.h>
#include <stddef.h>

#include "vexp_avx512.h"

#define DS5_INLINE static inline __attribute__((always_inline))

/* Decode: the primitives kernels_decode_simd.h is written over (16 lanes;
 * a P.V tile of up to 6 rows x 4 vectors = 24 accumulators). */
#define DS_W 16
#define DS_V __m512
#define DS_PV_MR 6
#define DS_PV_NV 4
#define dsv_zero _mm512_setzero_ps
#define dsv_set1 _mm512_set1_ps
#define dsv_fma _mm512_fmadd_ps
#define dsv_add _mm512_add_ps
#define dsv_mul _mm512_mul_ps
#define dsv_max _mm512_max_ps
#define dsv_loadu _mm512_loadu_ps
#define dsv_storeu _mm512_storeu_ps
#define dsv_exp fa__cpu_exp512
#define dsv_hsum _mm512_reduce_add_ps
#define dsv_hmax _mm512_reduce_max_ps
DS5_INLINE __m512 dsv_ld_bf16(const char *p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
DS5_INLINE __m512 dsv_ld_f16(const char *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
DS5_INLINE __m512 dsv_load_tail(const float *p, int n, float fill) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), (__mmask16)((1u << n) - 1u), p);
}
DS5_INLINE void dsv_store_tail(float *p, __m512 v, int n) {
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}
DS5_INLINE void dsv_store_lanes(float *p, __m512 v, int first, int n) {
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(first),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), first ? _mm512_permutexvar_ps(idx, v) : v);
}
/* lanes 4r .. 4r + 3 to p[r * ld ..], r < 4 (ds_scores_r4's micro-tile) */
DS5_INLINE void dsv_store_rows4(float *p, ptrdiff_t ld, __m512 v) {
  _mm_storeu_ps(p, _mm512_castps512_ps128(v));
  _mm_storeu_ps(p + ld, _mm512_extractf32x4_ps(v, 1));
  _mm_storeu_ps(p + 2 * ld, _mm512_extractf32x4_ps(v, 2));
  _mm_storeu_ps(p + 3 * ld, _mm512_extractf32x4_ps(v, 3));
}
/* 16 vectors to one, lane i = sum of a[i]: halves, quarters, pairs, then
 * one permute puts the lanes in order (the tree leaves them as
 * 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15, a permutation that is its own
 * inverse). 45 shuffles and adds for 16 sums. */
DS5_INLINE __m512 dsv_reduce(const __m512 *a) {
  __m512 t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i)
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44), _mm512_shuffle_f32x4(a[i], a[i + 8], 0xEE));
  for (int i = 0; i < 4; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[i], t[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i)
    v[i] = _mm512_add_ps(_mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i perm = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(perm, w);
}

#endif
