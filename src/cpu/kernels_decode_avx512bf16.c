/* The decode kernels of kernels.h (dec_scores, dec_pv) for bf16 caches on
 * AVX512-BF16: both products on vdpbf16ps, which adds two bf16 products
 * into each f32 lane, so one instruction does the work of two FMAs and the
 * cache's bf16 rows need no conversion to f32. On the cores where the
 * avx512bf16 ISA is chosen (vdpbf16ps at twice the FMA rate, Zen 4 and 5)
 * the f32 kernels spend as many instructions widening bf16 and adding as
 * multiplying, which bounds the pass where a kv head has many query rows
 * (several new tokens a step): cpu_decode.c takes these kernels for items
 * of more than 8 rows (DEC_PAIRS_ROWS says why not fewer). Other dtypes go
 * to the avx512 kernels.
 *
 * Scores, s = scale * q . k: q rows rounded to bf16 once a call (exact for
 * a bf16 query; a rotated one is rounded, as the cuda decode does) into
 * pair words along d, K rows read as they are (32 elements = 16 pairs a
 * vector); a micro-tile of MR rows x NK keys (MR * NK = 16) reduced by
 * the avx512 kernels' transpose-add tree. d past the last 32 is loaded
 * masked (zeros add nothing).
 *
 * P.V pairs two keys: the lane of column c adds p[2j] * V[2j][c] +
 * p[2j+1] * V[2j+1][c], so P is rounded to bf16 (as the tiled bf16 forward
 * and the GPUs round it) into pair words (p[2j], p[2j+1]), and two V rows
 * are interleaved word by word (vpunpcklwd / vpunpckhwd), which leaves the
 * columns of 32 in two vectors, {0-3, 8-11, 16-19, 24-27} and {4-7, 12-15,
 * 20-23, 28-31}: O's tile is permuted that way when loaded and back when
 * stored. An odd last key pairs with zeros.
 *
 * docs/semantics.md has the rounding; the prefetch of the next tile is the
 * avx512 kernels' (kernels_decode_pf.h). Compiled with the avx512bf16
 * flags; only called where the CPU has AVX512-BF16. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels.h"
#include "kernels_bf16_avx512.h"
#include "kernels_decode_avx512.h"
#include "kernels_decode_pf.h"

#define DB_INLINE static inline __attribute__((always_inline))

enum {
  DB_QROWS = 16,   /* q rows converted at a time, then taken 4 at a time */
  DB_QD = 512,     /* ... of at most this D; longer rows take the f32 kernel */
  DB_PV_MR = 4,    /* P.V rows a tile: 4 x 2 column groups x 2 = 16 accumulators */
  DB_PV_G = 2,     /* column groups of 32 a tile */
  DB_KCHUNK = 256, /* keys whose P pair words are made at a time */
};

/* rows [0, MR) of qb (ldqb elements apart, D rounded up to 32, zero
 * padded) against all bc keys; rows past nr repeat row nr - 1 */
DB_INLINE void db_scores_block(const int MR, float *s, ptrdiff_t lds, const uint16_t *qb, int ldqb, int nr,
                               const char *k, ptrdiff_t ldk, int bc, int D, float scale, const char *pf, ptrdiff_t ldpf,
                               int npf, int keep) {
  enum { NK_MAX = 16 };
  const int NK = 16 / MR, Dw = D - D % 32;
  const __mmask32 tail = kbf_mask32(D - Dw);
  const uint16_t *qr[16];
#pragma GCC unroll 16
  for (int rr = 0; rr < MR; ++rr) qr[rr] = qb + (ptrdiff_t)(rr < nr ? rr : nr - 1) * ldqb;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < bc; j0 += NK) {
    const char *kj[NK_MAX];
    const char *pj[NK_MAX];
    const int npj = pf ? (npf - j0 < NK ? npf - j0 : NK) : 0;
#pragma GCC unroll 16
    for (int jj = 0; jj < NK; ++jj) {
      kj[jj] = k + (ptrdiff_t)(j0 + jj < bc ? j0 + jj : bc - 1) * ldk;
      pj[jj] = jj < npj ? pf + (ptrdiff_t)(j0 + jj) * ldpf : NULL;
    }
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    int d = 0;
    for (; d < Dw; d += 32) {
#pragma GCC unroll 16
      for (int jj = 0; jj < NK; ++jj) {
        if (jj < npj) ds_pf(pj[jj] + (ptrdiff_t)d * 2, keep);
        const __m512i kv = _mm512_loadu_si512((const void *)(kj[jj] + (ptrdiff_t)d * 2));
#pragma GCC unroll 16
        for (int rr = 0; rr < MR; ++rr)
          acc[rr * NK + jj] = kbf_dp(acc[rr * NK + jj], kv, _mm512_loadu_si512((const void *)(qr[rr] + d)));
      }
    }
    if (d < D) {
#pragma GCC unroll 16
      for (int jj = 0; jj < NK; ++jj) {
        if (jj < npj) ds_pf(pj[jj] + (ptrdiff_t)d * 2, keep);
        const __m512i kv = _mm512_maskz_loadu_epi16(tail, kj[jj] + (ptrdiff_t)d * 2);
#pragma GCC unroll 16
        for (int rr = 0; rr < MR; ++rr)
          acc[rr * NK + jj] = kbf_dp(acc[rr * NK + jj], kv, _mm512_loadu_si512((const void *)(qr[rr] + d)));
      }
    }
    const __m512 red = _mm512_mul_ps(dsv_reduce(acc), vscale);
    const int nk = bc - j0 < NK ? bc - j0 : NK, mr = nr < MR ? nr : MR;
    if (MR == 4 && nk == 4 && mr == 4)
      dsv_store_rows4(s + j0, lds, red);
    else
      for (int rr = 0; rr < mr; ++rr) dsv_store_lanes(s + (ptrdiff_t)rr * lds + j0, red, rr * NK, nk);
  }
}

static void db_scores(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const char *k, ptrdiff_t ldk,
                      int bc, int D, float scale, const char *pf, ptrdiff_t ldpf, int npf, int keep) {
  uint16_t qb[DB_QROWS * DB_QD] __attribute__((aligned(64)));
  const int ldqb = (D + 31) / 32 * 32;
  for (int r0 = 0; r0 < nr; r0 += DB_QROWS) {
    const int n = nr - r0 < DB_QROWS ? nr - r0 : DB_QROWS;
    for (int r = 0; r < n; ++r)
      for (int d = 0; d < D; d += 32)
        _mm512_store_si512((void *)(qb + (ptrdiff_t)r * ldqb + d),
                           kbf_from_f32(q + (ptrdiff_t)(r0 + r) * ldq + d, D - d));
    /* blocks of 4 rows x 4 keys: K's tile is read from L1 again for each
     * block (no conversion to repeat), and 4 rows' scores leave the tree as
     * 4 stores of 4, where 16 rows x 1 key took a permute and a masked
     * store per row and key */
    for (int b0 = 0; b0 < n; b0 += 4) {
      const int nb = n - b0 < 4 ? n - b0 : 4;
      float *sr = s + (ptrdiff_t)(r0 + b0) * lds;
      const uint16_t *qr = qb + (ptrdiff_t)b0 * ldqb;
      const char *p = r0 + b0 == 0 ? pf : NULL; /* prefetch with the first block only */
      if (nb == 1)
        db_scores_block(1, sr, lds, qr, ldqb, nb, k, ldk, bc, D, scale, p, ldpf, npf, keep);
      else if (nb == 2)
        db_scores_block(2, sr, lds, qr, ldqb, nb, k, ldk, bc, D, scale, p, ldpf, npf, keep);
      else
        db_scores_block(4, sr, lds, qr, ldqb, nb, k, ldk, bc, D, scale, p, ldpf, npf, keep);
    }
  }
}

void fa__cpu_dec_scores_avx512bf16(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                                   ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf,
                                   ptrdiff_t ldpf, int npf, int pf_keep) {
  if (kdt != FA_BF16 || D > DB_QD) {
    fa__cpu_dec_scores_avx512(s, lds, q, ldq, nr, k, ldk, bc, D, scale, kdt, pf, ldpf, npf, pf_keep);
    return;
  }
  db_scores(s, lds, q, ldq, nr, (const char *)k, ldk, bc, D, scale, (const char *)pf, ldpf, npf, pf_keep);
}

/* O's 32 columns c0 .. c0 + 31 (a, b: c0 .. +15, +16 .. +31) in the pair
 * order of the interleaved V rows, and back */
DB_INLINE void db_o_to_pairs(__m512 a, __m512 b, __m512 *lo, __m512 *hi) {
  const __m512i ilo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i ihi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  *lo = _mm512_permutex2var_ps(a, ilo, b);
  *hi = _mm512_permutex2var_ps(a, ihi, b);
}

DB_INLINE void db_o_from_pairs(__m512 lo, __m512 hi, __m512 *a, __m512 *b) {
  const __m512i ia = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i ib = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  *a = _mm512_permutex2var_ps(lo, ia, hi);
  *b = _mm512_permutex2var_ps(lo, ib, hi);
}

/* o rows [0, MR), columns [e0, e0 + 32 G) but only ncol of them (the
 * last group may be partial), += the key pairs [0, npair) of pw (MR rows,
 * ldpw words apart) times the V rows 2 jp, 2 jp + 1 (the last one absent
 * when bc is odd); f scales O first (NULL: 1). The next tile's rows: the
 * same columns of rows j < npf, a line a key; pfrow > 0 prefetches its
 * rows whole instead (a row that ends in a partial line). */
DB_INLINE void db_pv_tile(const int MR, const int G, float *o, ptrdiff_t ldo, const float *f, const uint32_t *pw,
                          int ldpw, const char *v, ptrdiff_t ldv, int bc, int e0, int ncol, const char *pf,
                          ptrdiff_t ldpf, int npf, int pfrow, int keep) {
  __m512 lo[DB_PV_MR][DB_PV_G], hi[DB_PV_MR][DB_PV_G];
  __mmask32 vm[DB_PV_G];
  __mmask16 om[DB_PV_G][2];
#pragma GCC unroll 2
  for (int g = 0; g < G; ++g) {
    const int n = ncol - 32 * g;
    vm[g] = kbf_mask32(n);
    om[g][0] = kbf_mask16(n);
    om[g][1] = kbf_mask16(n - 16);
  }
#pragma GCC unroll 4
  for (int rr = 0; rr < MR; ++rr) {
    const __m512 fr = _mm512_set1_ps(f ? f[rr] : 1.0f);
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const float *orow = o + (ptrdiff_t)rr * ldo + e0 + 32 * g;
      __m512 a = _mm512_maskz_loadu_ps(om[g][0], orow), b = _mm512_maskz_loadu_ps(om[g][1], orow + 16);
      if (f) {
        a = _mm512_mul_ps(a, fr);
        b = _mm512_mul_ps(b, fr);
      }
      db_o_to_pairs(a, b, &lo[rr][g], &hi[rr][g]);
    }
  }
  const int npair = bc / 2, np = pf ? (npf < bc ? npf : bc) : 0;
  const char *vj = v + (ptrdiff_t)e0 * 2;
  for (int jp = 0; jp <= npair; ++jp, vj += 2 * ldv) {
    const int j = 2 * jp;
    if (j >= bc) break;
    const int two = j + 1 < bc;
    for (int t = 0; t < 2; ++t)
      if (j + t < np) {
        const char *pr = pf + (ptrdiff_t)(j + t) * ldpf;
        if (pfrow)
          ds_prefetch_row(pr, pfrow, keep);
        else
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) ds_pf(pr + (ptrdiff_t)(e0 + 32 * g) * 2, keep);
      }
    __m512i xl[DB_PV_G], xh[DB_PV_G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const __m512i v0 = _mm512_maskz_loadu_epi16(vm[g], vj + 64 * g);
      const __m512i v1 = two ? _mm512_maskz_loadu_epi16(vm[g], vj + ldv + 64 * g) : _mm512_setzero_si512();
      xl[g] = _mm512_unpacklo_epi16(v0, v1);
      xh[g] = _mm512_unpackhi_epi16(v0, v1);
    }
#pragma GCC unroll 4
    for (int rr = 0; rr < MR; ++rr) {
      const __m512i pb = _mm512_set1_epi32((int)pw[(ptrdiff_t)rr * ldpw + jp]);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        lo[rr][g] = kbf_dp(lo[rr][g], xl[g], pb);
        hi[rr][g] = kbf_dp(hi[rr][g], xh[g], pb);
      }
    }
  }
#pragma GCC unroll 4
  for (int rr = 0; rr < MR; ++rr)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      float *orow = o + (ptrdiff_t)rr * ldo + e0 + 32 * g;
      __m512 a, b;
      db_o_from_pairs(lo[rr][g], hi[rr][g], &a, &b);
      _mm512_mask_storeu_ps(orow, om[g][0], a);
      _mm512_mask_storeu_ps(orow + 16, om[g][1], b);
    }
}

/* rows [0, MR) of o over the keys of pw (bc of them), every column */
DB_INLINE void db_pv_rows(const int MR, float *o, ptrdiff_t ldo, const float *f, const uint32_t *pw, int ldpw,
                          const char *v, ptrdiff_t ldv, int bc, int Dv, const char *pf, ptrdiff_t ldpf, int npf,
                          int keep) {
  enum { W = 32 * DB_PV_G };
  /* a row ending in a partial line: the first column tile prefetches rows whole */
  int pfrow = Dv % 32 ? Dv * 2 : 0;
  int e = 0;
  for (; e + W <= Dv; e += W) {
    db_pv_tile(MR, DB_PV_G, o, ldo, f, pw, ldpw, v, ldv, bc, e, W, pf, ldpf, npf, pfrow, keep);
    pfrow = 0;
  }
  for (; e < Dv; e += 32) {
    db_pv_tile(MR, 1, o, ldo, f, pw, ldpw, v, ldv, bc, e, Dv - e < 32 ? Dv - e : 32, pf, ldpf, npf, pfrow, keep);
    pfrow = 0;
  }
}

static void db_pv(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp, const char *v,
                  ptrdiff_t ldv, int bc, int Dv, const char *pf, ptrdiff_t ldpf, int npf, int keep) {
  enum { LDPW = DB_KCHUNK / 2 };
  uint32_t pw[DB_PV_MR * LDPW] __attribute__((aligned(64)));
  const int nb = (nr + DB_PV_MR - 1) / DB_PV_MR, mr = (nr + nb - 1) / nb; /* balanced row blocks */
  for (int r0 = 0; r0 < nr; r0 += mr) {
    const int n = nr - r0 < mr ? nr - r0 : mr;
    float *orow = o + (ptrdiff_t)r0 * ldo;
    for (int j0 = 0; j0 < bc; j0 += DB_KCHUNK) {
      const int kc = bc - j0 < DB_KCHUNK ? bc - j0 : DB_KCHUNK;
      /* P of these keys as pair words, rounded to bf16; an odd last key pairs with 0 */
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < kc; j += 32)
          _mm512_store_si512((void *)(pw + (ptrdiff_t)r * LDPW + j / 2),
                             kbf_from_f32(p + (ptrdiff_t)(r0 + r) * ldp + j0 + j, kc - j));
      /* f scales O once, with the first chunk; the next tile's prefetch rides on the first row block */
      const float *fr = f && j0 == 0 ? f + r0 : NULL;
      const char *vc = v + (ptrdiff_t)j0 * ldv;
      const char *pp = r0 == 0 && pf && npf > j0 ? pf + (ptrdiff_t)j0 * ldpf : NULL;
      const int npp = pp ? npf - j0 : 0;
      switch (n) {
        case 1: db_pv_rows(1, orow, ldo, fr, pw, LDPW, vc, ldv, kc, Dv, pp, ldpf, npp, keep); break;
        case 2: db_pv_rows(2, orow, ldo, fr, pw, LDPW, vc, ldv, kc, Dv, pp, ldpf, npp, keep); break;
        case 3: db_pv_rows(3, orow, ldo, fr, pw, LDPW, vc, ldv, kc, Dv, pp, ldpf, npp, keep); break;
        default: db_pv_rows(4, orow, ldo, fr, pw, LDPW, vc, ldv, kc, Dv, pp, ldpf, npp, keep); break;
      }
    }
  }
}

void fa__cpu_dec_pv_avx512bf16(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                               const void *v, ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf,
                               ptrdiff_t ldpf, int npf, int pf_keep) {
  if (vdt != FA_BF16) {
    fa__cpu_dec_pv_avx512(o, ldo, nr, f, p, ldp, v, ldv, bc, Dv, vdt, pf, ldpf, npf, pf_keep);
    return;
  }
  db_pv(o, ldo, nr, f, p, ldp, (const char *)v, ldv, bc, Dv, (const char *)pf, ldpf, npf, pf_keep);
}
