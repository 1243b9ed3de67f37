/* AVX-512F kernels. The micro-kernel holds an 8 x 48 tile of C in 24 zmm
 * accumulators; per k it loads 3 vectors of the B panel and broadcasts 8
 * scalars of A (embedded broadcasts), so 24 FMAs cost 11 loads: the FMA
 * pipes, not the loads, set the pace. Compiled with -mavx512f; only called
 * when the CPU has AVX-512F. */
#include <math.h>

#include "kernels.h"
#include "rules/dropout.h"
#include "vexp_avx512.h"

enum { K5_VL = 16, K5_MR = 8, K5_NV = 3 };

#define FA_INLINE static inline __attribute__((always_inline))

/* The micro-tile with compile-time MR_ x NV_ (at most 8 x 3, or 6 x 4 for
 * the wide tile below: 24 accumulators either way). Named accumulators
 * rather than an array, so that no compiler is tempted to keep them in
 * memory (GCC does exactly that with an array in the AVX2 kernel); the
 * guards fold away for each instantiation. */
#define K5_ACC(m, v) c##m##v
#define K5_FOR_ALL(X)                                                                                                 \
  X(0, 0)                                                                                                             \
  X(0, 1)                                                                                                             \
  X(0, 2) X(0, 3) X(1, 0) X(1, 1) X(1, 2) X(1, 3) X(2, 0) X(2, 1) X(2, 2) X(2, 3) X(3, 0) X(3, 1) X(3, 2) X(3, 3)     \
      X(4, 0) X(4, 1) X(4, 2) X(4, 3) X(5, 0) X(5, 1) X(5, 2) X(5, 3) X(6, 0) X(6, 1) X(6, 2) X(6, 3) X(7, 0) X(7, 1) \
          X(7, 2) X(7, 3)

FA_INLINE void mk512(const int MR_, const int NV_, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                     ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
#define K5_DECL(m, v) __m512 K5_ACC(m, v) = _mm512_setzero_ps();
  K5_FOR_ALL(K5_DECL)
#undef K5_DECL
  if (accumulate) {
#define K5_LOAD(m, v) \
  if (m < MR_ && v < NV_) K5_ACC(m, v) = _mm512_loadu_ps(c + m * ldc + v * K5_VL);
    K5_FOR_ALL(K5_LOAD)
#undef K5_LOAD
  }
  const float *a0 = a, *a1 = a + rsa, *a2 = a + 2 * rsa, *a3 = a + 3 * rsa, *a4 = a + 4 * rsa, *a5 = a + 5 * rsa,
              *a6 = a + 6 * rsa, *a7 = a + 7 * rsa;
  ptrdiff_t ko = 0;
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = NV_ > 1 ? _mm512_loadu_ps(b + K5_VL) : b0;
    const __m512 b2 = NV_ > 2 ? _mm512_loadu_ps(b + 2 * K5_VL) : b0;
    const __m512 b3 = NV_ > 3 ? _mm512_loadu_ps(b + 3 * K5_VL) : b0;
    __m512 am;
#define K5_ROW(m)                                                      \
  if (m < MR_) {                                                       \
    am = _mm512_set1_ps(a##m[ko]);                                     \
    K5_ACC(m, 0) = _mm512_fmadd_ps(am, b0, K5_ACC(m, 0));              \
    if (NV_ > 1) K5_ACC(m, 1) = _mm512_fmadd_ps(am, b1, K5_ACC(m, 1)); \
    if (NV_ > 2) K5_ACC(m, 2) = _mm512_fmadd_ps(am, b2, K5_ACC(m, 2)); \
    if (NV_ > 3) K5_ACC(m, 3) = _mm512_fmadd_ps(am, b3, K5_ACC(m, 3)); \
  }
    K5_ROW(0)
    K5_ROW(1)
    K5_ROW(2)
    K5_ROW(3)
    K5_ROW(4)
    K5_ROW(5) K5_ROW(6) K5_ROW(7)
#undef K5_ROW
        ko += csa;
    b += ldb;
  }
#define K5_STORE(m, v) \
  if (m < MR_ && v < NV_) _mm512_storeu_ps(c + m * ldc + v * K5_VL, K5_ACC(m, v));
  K5_FOR_ALL(K5_STORE)
#undef K5_STORE
  (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
}

typedef void (*mk_fn)(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb, float *c,
                      ptrdiff_t ldc, int accumulate);

#define MK(MR_, NV_)                                                                                                   \
  static void mk512_##MR_##_##NV_(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb, \
                                  float *c, ptrdiff_t ldc, int accumulate) {                                           \
    mk512(MR_, NV_, kc, a, rsa, csa, b, ldb, c, ldc, accumulate);                                                      \
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
  { mk512_##MR_##_1, mk512_##MR_##_2, mk512_##MR_##_3 }
static const mk_fn mk512_table[K5_MR][K5_NV] = {MK_ENTRY(1), MK_ENTRY(2), MK_ENTRY(3), MK_ENTRY(4),
                                                MK_ENTRY(5), MK_ENTRY(6), MK_ENTRY(7), MK_ENTRY(8)};
#undef MK_ENTRY

static void gemm_avx512(int mr, int nv, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                        ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  mk512_table[mr - 1][nv - 1](kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

/* The wide micro-tile: 6 x 64 (24 accumulators, 4 vectors of B, 6
 * broadcasts: 10 loads per 24 FMAs). For panels of a multiple of 64
 * columns (the amx table's 64-row query tiles and 64-key backward tiles),
 * which the 8 x 48 tile could only cut into strips of 2 vectors (8 x 32:
 * 10 loads per 16 FMAs, every A element broadcast twice). Measured on the
 * Xeon (Sapphire Rapids class, one thread, D = 128, 48-64 key-wide panels
 * in L1): the P.V product 182 GFLOP/s as 8 x 32 strips, 212 as 6 x 64; the
 * score product 217 and 224. It is mk512 at NV_ = 4: the same k order per
 * element as the 8 x 48 tile, so the
 * same bits. */
#define MKW(MR_)                                                                                                \
  static void mk512w_##MR_(int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb, \
                           float *c, ptrdiff_t ldc, int accumulate) {                                           \
    mk512(MR_, 4, kc, a, rsa, csa, b, ldb, c, ldc, accumulate);                                                 \
  }
MKW(1)
MKW(2)
MKW(3)
MKW(4)
MKW(5)
MKW(6)
#undef MKW
static const mk_fn mk512w_table[6] = {mk512w_1, mk512w_2, mk512w_3, mk512w_4, mk512w_5, mk512w_6};

static void gemm4_avx512(int mr, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b, ptrdiff_t ldb,
                         float *c, ptrdiff_t ldc, int accumulate) {
  mk512w_table[mr - 1](kc, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

static int softmax_avx512(float *s, ptrdiff_t lds, int bc, int np, float *m, float *l, float *f) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
  __mmask16 moved = 0;
  for (int i = 0; i < np; i += K5_VL) {
    float *col = s + i;
    __m512 mx0 = ninf, mx1 = ninf;
    int j = 0;
    for (; j + 1 < bc; j += 2) {
      mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(col + j * lds));
      mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(col + (j + 1) * lds));
    }
    if (j < bc) mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(col + j * lds));
    const __m512 mold = _mm512_loadu_ps(m + i);
    const __m512 mn = _mm512_max_ps(_mm512_max_ps(mx0, mx1), mold);
    const __m512 mu = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ), mn, _mm512_setzero_ps());
    const __m512 fi = fa__cpu_exp512(_mm512_sub_ps(mold, mu));
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    for (j = 0; j + 1 < bc; j += 2) {
      const __m512 p0 = fa__cpu_exp512(_mm512_sub_ps(_mm512_loadu_ps(col + j * lds), mu));
      const __m512 p1 = fa__cpu_exp512(_mm512_sub_ps(_mm512_loadu_ps(col + (j + 1) * lds), mu));
      _mm512_storeu_ps(col + j * lds, p0);
      _mm512_storeu_ps(col + (j + 1) * lds, p1);
      sum0 = _mm512_add_ps(sum0, p0);
      sum1 = _mm512_add_ps(sum1, p1);
    }
    if (j < bc) {
      const __m512 p0 = fa__cpu_exp512(_mm512_sub_ps(_mm512_loadu_ps(col + j * lds), mu));
      _mm512_storeu_ps(col + j * lds, p0);
      sum0 = _mm512_add_ps(sum0, p0);
    }
    _mm512_storeu_ps(l + i, _mm512_fmadd_ps(_mm512_loadu_ps(l + i), fi, _mm512_add_ps(sum0, sum1)));
    _mm512_storeu_ps(m + i, mn);
    _mm512_storeu_ps(f + i, fi);
    moved |= _mm512_cmp_ps_mask(fi, one, _CMP_NEQ_UQ);
  }
  return moved != 0;
}

static void scale_cols_avx512(float *c, ptrdiff_t ldc, int rows, int np, const float *f) {
  for (int i = 0; i < np; i += K5_VL) {
    const __m512 fi = _mm512_loadu_ps(f + i);
    for (int r = 0; r < rows; ++r)
      _mm512_storeu_ps(c + r * ldc + i, _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + i), fi));
  }
}

static void exp_rows_avx512(float *s, ptrdiff_t lds, int rows, int n, const float *lse) {
  for (int r = 0; r < rows; ++r) {
    float *row = s + r * lds;
    if (lse[r] == -INFINITY) {
      for (int j = 0; j < n; j += K5_VL) _mm512_storeu_ps(row + j, _mm512_setzero_ps());
      continue;
    }
    const __m512 lr = _mm512_set1_ps(lse[r]);
    for (int j = 0; j < n; j += K5_VL)
      _mm512_storeu_ps(row + j, fa__cpu_exp512(_mm512_sub_ps(_mm512_loadu_ps(row + j), lr)));
  }
}

static void ds_rows_avx512(const float *p, float *dp, ptrdiff_t ld, int rows, int n, const float *di) {
  for (int r = 0; r < rows; ++r) {
    const __m512 d = _mm512_set1_ps(di[r]);
    for (int j = 0; j < n; j += K5_VL) {
      const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(dp + r * ld + j), d);
      _mm512_storeu_ps(dp + r * ld + j, _mm512_mul_ps(_mm512_loadu_ps(p + r * ld + j), x));
    }
  }
}

static void exp_avx512(float *y, const float *x, int n) {
  int t = 0;
  for (; t + K5_VL <= n; t += K5_VL) _mm512_storeu_ps(y + t, fa__cpu_exp512(_mm512_loadu_ps(x + t)));
  if (t < n) {
    const __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
    _mm512_mask_storeu_ps(y + t, k, fa__cpu_exp512(_mm512_maskz_loadu_ps(k, x + t)));
  }
}

static void softcap_avx512(float *s, int n, float cap) {
  const __m512 c = _mm512_set1_ps(cap), inv = _mm512_set1_ps(1.0f / cap);
  int t = 0;
  for (; t + K5_VL <= n; t += K5_VL)
    _mm512_storeu_ps(s + t, _mm512_mul_ps(c, fa__cpu_tanh512(_mm512_mul_ps(_mm512_loadu_ps(s + t), inv))));
  if (t < n) {
    const __mmask16 k = (__mmask16)((1u << (n - t)) - 1u);
    _mm512_mask_storeu_ps(s + t, k,
                          _mm512_mul_ps(c, fa__cpu_tanh512(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + t), inv))));
  }
}

/* vcvtph2ps converts every f16 exactly (subnormals included), like half.h. */
static void f16_avx512(float *dst, const uint16_t *src, int n) {
  int t = 0;
  for (; t + K5_VL <= n; t += K5_VL)
    _mm512_storeu_ps(dst + t, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + t))));
  for (; t < n; ++t) {
    const __m128i h = _mm_cvtsi32_si128(src[t]);
    dst[t] = _mm_cvtss_f32(_mm_cvtph_ps(h));
  }
}

static void bf16_avx512(float *dst, const uint16_t *src, int n) {
  int t = 0;
  for (; t + K5_VL <= n; t += K5_VL) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + t)));
    _mm512_storeu_ps(dst + t, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; t < n; ++t) {
    const uint32_t u = (uint32_t)src[t] << 16;
    float v;
    __builtin_memcpy(&v, &u, 4);
    dst[t] = v;
  }
}

/* Dropout: Philox4x32-10 on 16 counters at once. This mirrors
 * fa__philox4x32_10 and fa__dropout_keep of src/rules/dropout.h (the one
 * definition of the keep-mask; constants taken from there) and is held to
 * it bit for bit by tests/test_cpu_philox.c. A round's 32x32->64 products:
 * _mm512_mul_epu32 multiplies the even lanes; the odd lanes are shifted
 * down first; masked dword swaps put the high and low halves back in
 * their lanes. */
FA_INLINE __m512i k5_mulhilo(__m512i a, __m512i m, __m512i *lo) {
  const __m512i pe = _mm512_mul_epu32(a, m);
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  /* swapping the dwords of each pair brings the other half into the lane */
  *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CDAB);
  return _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_CDAB);
}

/* c = philox4x32_10(c, key) lane by lane (fa__philox4x32_10). */
FA_INLINE void k5_philox(__m512i c[4], uint32_t k0, uint32_t k1) {
  const __m512i m0 = _mm512_set1_epi32((int)FA__PHILOX_M0), m1 = _mm512_set1_epi32((int)FA__PHILOX_M1);
  for (int r = 0; r < 10; ++r) {
    __m512i lo0, lo1;
    const __m512i hi0 = k5_mulhilo(c[0], m0, &lo0), hi1 = k5_mulhilo(c[2], m1, &lo1);
    /* 0x96: a ^ b ^ c */
    c[0] = _mm512_ternarylogic_epi32(hi1, c[1], _mm512_set1_epi32((int)k0), 0x96);
    c[1] = lo1;
    c[2] = _mm512_ternarylogic_epi32(hi0, c[3], _mm512_set1_epi32((int)k1), 0x96);
    c[3] = lo0;
    k0 += FA__PHILOX_W0;
    k1 += FA__PHILOX_W1;
  }
}

/* Row i: the 64 keep bytes of columns 4*g .. 4*g+63 (16 groups, lane L
 * holds group g+L; its 4 words are columns 4(g+L)+w, i.e. byte w of dword
 * L), stored at out. */
FA_INLINE void k5_drop_row64(uint8_t *out, uint32_t g, uint32_t i, uint32_t bh, uint32_t offset, uint64_t seed,
                             __m512i thr) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i c[4] = {_mm512_add_epi32(_mm512_set1_epi32((int)g), iota), _mm512_set1_epi32((int)i),
                  _mm512_set1_epi32((int)bh), _mm512_set1_epi32((int)offset)};
  k5_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  __m512i b = _mm512_maskz_mov_epi32(_mm512_cmplt_epu32_mask(c[0], thr), _mm512_set1_epi32(1));
  b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epu32_mask(c[1], thr), _mm512_or_si512(b, _mm512_set1_epi32(1 << 8)));
  b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epu32_mask(c[2], thr), _mm512_or_si512(b, _mm512_set1_epi32(1 << 16)));
  b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epu32_mask(c[3], thr), _mm512_or_si512(b, _mm512_set1_epi32(1 << 24)));
  _mm512_storeu_si512(out, b);
}

static void dropout_avx512(uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj, int br, int bc, uint64_t seed, uint32_t offset,
                           uint32_t threshold, int64_t bh, int64_t i0, int64_t j0) {
  const __m512i thr = _mm512_set1_epi32((int)threshold);
  if (ki == 1 && kj != 1) {
    /* columns: lane L is row i0+ii+L; one Philox group of 4 columns at a time */
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i one = _mm512_set1_epi32(1);
    for (int ii = 0; ii < br; ii += 16) {
      const __mmask16 rows = br - ii >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (br - ii)) - 1u);
      const __m512i ci = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)(i0 + ii)), iota);
      for (int jj = 0; jj < bc;) {
        const int64_t j = j0 + jj;
        const int u0 = (int)(j & 3), n = 4 - u0 < bc - jj ? 4 - u0 : bc - jj;
        __m512i c[4] = {_mm512_set1_epi32((int)(uint32_t)((uint64_t)j >> 2)), ci, _mm512_set1_epi32((int)(uint32_t)bh),
                        _mm512_set1_epi32((int)offset)};
        k5_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (int u = 0; u < n; ++u)
          _mm512_mask_cvtepi32_storeu_epi8(keep + (jj + u) * kj + ii, rows,
                                           _mm512_maskz_mov_epi32(_mm512_cmplt_epu32_mask(c[u0 + u], thr), one));
        jj += n;
      }
    }
    return;
  }
  /* rows: lanes take 16 consecutive groups (64 columns) */
  uint8_t tmp[64];
  for (int ii = 0; ii < br; ++ii) {
    uint8_t *row = keep + ii * ki;
    const uint32_t i = (uint32_t)(i0 + ii);
    for (int jj = 0; jj < bc;) {
      const int64_t j = j0 + jj;
      const uint32_t g = (uint32_t)((uint64_t)j >> 2);
      const int u0 = (int)(j & 3);
      if (kj == 1 && u0 == 0 && bc - jj >= 64) {
        k5_drop_row64(row + jj, g, i, (uint32_t)bh, offset, seed, thr);
        jj += 64;
      } else {
        k5_drop_row64(tmp, g, i, (uint32_t)bh, offset, seed, thr);
        const int n = 64 - u0 < bc - jj ? 64 - u0 : bc - jj;
        for (int u = 0; u < n; ++u) row[(jj + u) * kj] = tmp[u0 + u];
        jj += n;
      }
    }
  }
}

#include "kernels_decode_avx512.h"
#include "kernels_decode_simd.h"

void fa__cpu_dec_scores_avx512(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                               ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf, ptrdiff_t ldpf,
                               int npf, int pf_keep) {
  ds_dec_scores(s, lds, q, ldq, nr, k, ldk, bc, D, scale, kdt, pf, ldpf, npf, pf_keep);
}

void fa__cpu_dec_pv_avx512(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                           const void *v, ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf, ptrdiff_t ldpf,
                           int npf, int pf_keep) {
  ds_dec_pv(o, ldo, nr, f, p, ldp, v, ldv, bc, Dv, vdt, pf, ldpf, npf, pf_keep);
}

void fa__cpu_kernels_avx512(fa__cpu_kernels *kt) {
  kt->isa = FA_ISA_AVX512;
  kt->vl = K5_VL;
  kt->mr = K5_MR;
  kt->nv = K5_NV;
  kt->gemm = gemm_avx512;
  kt->gemm4 = gemm4_avx512;
  kt->mr4 = 6;
  kt->softmax = softmax_avx512;
  kt->scale_cols = scale_cols_avx512;
  kt->exp_rows = exp_rows_avx512;
  kt->ds_rows = ds_rows_avx512;
  kt->exp = exp_avx512;
  kt->softcap = softcap_avx512;
  kt->f16_to_f32 = f16_avx512;
  kt->bf16_to_f32 = bf16_avx512;
  kt->dropout = dropout_avx512;
  kt->dec_scores = fa__cpu_dec_scores_avx512;
  kt->dec_softmax = ds_dec_softmax;
  kt->dec_pv = fa__cpu_dec_pv_avx512;
  kt->dec_dtypes = 1u << FA_F32 | 1u << FA_F16 | 1u << FA_BF16;
}
