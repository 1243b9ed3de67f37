/* The per-ISA kernel table of the cpu backend (BLIS-shaped): a handful of
 * small functions with written contracts, filled with the portable C
 * versions first and then overridden by each instruction set. Everything
 * else in src/cpu (tiling, packing, masks, threads) is portable and calls
 * these through the table. */
#ifndef FA_CPU_KERNELS_H
#define FA_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

/* Panels (the B operand of the micro-kernel, score tiles) are padded to a
 * multiple of this many floats, so that every ISA's vectors divide them. */
#define FA_CPU_PANEL 16

/* Micro-kernel. For one micro-tile of mr rows and nv vectors (nv * vl
 * floats) of columns:
 *
 *   C[m*ldc + n] = (accumulate ? C[m*ldc + n] : 0) + sum_{k < kc} A(m, k) * B[k*ldb + n]
 *   with A(m, k) = a[m*rsa + k*csa],   m < mr, n < nv * vl.
 *
 * A is the broadcast operand: read one scalar at a time, so any strides
 * work and it is read straight from a tensor of any layout (the tiled
 * loops pass Q, K, V or dO rows without packing them). B is a packed panel:
 * kc rows of at least nv*vl contiguous floats with row stride ldb. C is
 * row-major. 1 <= mr <= table.mr, 1 <= nv <= table.nv, kc >= 0 (kc = 0
 * without accumulate zeroes the tile). Nothing outside these ranges is read
 * or written; no alignment is required (64-byte aligned panels are faster).
 * Rounding: each C element is a sum over k in increasing order of k, with
 * or without fused multiply-adds; the same arguments give the same bits. */
typedef void (*fa__cpu_gemm_fn)(int mr, int nv, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                                ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);
typedef void (*fa__cpu_gemm4_fn)(int mr, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, const float *b,
                                 ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);

/* One online-softmax step on a score tile stored transposed: s[j*lds + i]
 * is the score of query row i against key j, j < bc (>= 1), i < np (a
 * multiple of FA_CPU_PANEL). For every column i:
 *   mn = max(m[i], max_j s[j][i]);   mu = (mn == -inf) ? 0 : mn
 *   f[i] = exp(m[i] - mu)            (0 when m[i] = -inf: nothing seen yet)
 *   s[j][i] = exp(s[j][i] - mu)      (0 for -inf scores: masked)
 *   l[i] = l[i] * f[i] + sum_j s[j][i];   m[i] = mn
 * Returns nonzero if some f[i] != 1, i.e. the caller must rescale its
 * accumulator. Rows that saw nothing keep m = -inf, l = 0 (no NaN). This is
 * fa__osm_update of src/rules/online_softmax.h, vectorized across rows. */
typedef int (*fa__cpu_softmax_fn)(float *s, ptrdiff_t lds, int bc, int np, float *m, float *l, float *f);

/* c[r*ldc + i] *= f[i] for r < rows, i < np (np a multiple of FA_CPU_PANEL). */
typedef void (*fa__cpu_scale_cols_fn)(float *c, ptrdiff_t ldc, int rows, int np, const float *f);

/* Backward: P = exp(S - lse[r]) in place, s[r*lds + j] for r < rows, j < n
 * (n a multiple of FA_CPU_PANEL). Rows with lse[r] = -inf (nothing
 * visible) become 0; -inf scores become 0. */
typedef void (*fa__cpu_exp_rows_fn)(float *s, ptrdiff_t lds, int rows, int n, const float *lse);

/* Backward: dS = P * (dP - di[r]) in place in dp (same layout as above). */
typedef void (*fa__cpu_ds_rows_fn)(const float *p, float *dp, ptrdiff_t ld, int rows, int n, const float *di);

/* y[t] = exp(x[t]) for t < n, to f32 accuracy (a few ulp); exp(-inf) = 0,
 * NaN stays NaN. y may alias x. */
typedef void (*fa__cpu_exp_fn)(float *y, const float *x, int n);

/* s[t] = cap * tanh(s[t] / cap) for t < n (the softcap of src/rules/score.h). */
typedef void (*fa__cpu_softcap_fn)(float *s, int n, float cap);

/* dst[t] = src[t] (f16 or bf16, contiguous) as f32, for t < n; bit-exact
 * with src/rules/half.h. */
typedef void (*fa__cpu_cvt_fn)(float *dst, const uint16_t *src, int n);

/* The dropout keep-mask of a tile, the rule of src/rules/dropout.h for
 * every element:
 *   keep[ii*ki + jj*kj] = fa__dropout_keep(seed, offset, threshold, bh, i0 + ii, j0 + jj)   (1 or 0)
 * for ii < br, jj < bc (br, bc >= 0; i0, j0, bh >= 0). Nothing else of keep
 * is written. Any strides work; the vector kernels are fast when kj = 1
 * (rows: lanes take consecutive 4-column Philox groups) or ki = 1 (columns:
 * lanes take consecutive rows). Bit for bit the scalar rule, under every
 * ISA: tests/test_cpu_philox.c holds each table's entry to it. */
typedef void (*fa__cpu_dropout_fn)(uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj, int br, int bc, uint64_t seed,
                                   uint32_t offset, uint32_t threshold, int64_t bh, int64_t i0, int64_t j0);

/* Decode (cpu_decode.c; the portable C in kernels_decode.h, the vector
 * kernels in kernels_decode_simd.h, compiled per ISA). One tile of a decode
 * step: nr >= 1 query rows (the heads of one kv head times the new tokens;
 * any count, the kernels block them) against bc >= 1 keys that K and V hold
 * as rows: key j's elements are at k + j*ldk BYTES, contiguous along d, of
 * dtype kdt (FA_F32, FA_F16 or FA_BF16 where bit 1 << kdt of dec_dtypes is
 * set; the caller converts anything else to f32 first). K and V are read
 * straight from the cache: converting a bf16/f16 element costs a shift or a
 * vcvtph2ps in the kernel, and every element of the tile is loaded from
 * memory once (the kernels loop over the rows inside, in registers).
 *
 *   dec_scores:  s[r*lds + j] = scale * sum_{d < D} q[r*ldq + d] * K(j, d)   r < nr, j < bc
 *                (q unscaled: the bf16 products of avx512bf16 take q as
 *                bf16, which a scaled q would not be)
 *   dec_softmax: one online-softmax step along each row, fa__osm_update of
 *                src/rules/online_softmax.h: for r < nr,
 *                  mn = max(m[r], max_j s[r][j]);  mu = (mn == -inf) ? 0 : mn
 *                  f[r] = exp(m[r] - mu);  s[r][j] = exp(s[r][j] - mu)
 *                  l[r] = l[r] * f[r] + sum_j s[r][j];  m[r] = mn
 *                returns nonzero if some f[r] != 1 (-inf scores give 0; rows
 *                that saw nothing keep m = -inf, l = 0).
 *   dec_pv:      o[r*ldo + e] = f[r] * o[r*ldo + e] + sum_{j < bc} p[r*ldp + j] * V(j, e)
 *                r < nr, e < Dv; f == NULL means f[r] = 1.
 *
 * Prefetch hint: pf (may be NULL) is the next tile, npf rows pf + j*ldpf
 * bytes of the same row length (or, for heads interleaved in the cache's
 * rows, this head's share of the next tile's block of all heads, cut into
 * such rows: cpu_decode.c); the kernel may prefetch them as it goes
 * (the paged cache's rows are scattered, so the hardware's stream
 * prefetcher cannot guess them). pf_keep = 0: the rows are read once, by
 * the next call (prefetched non-temporal, into L1 only); 1: prefetched
 * into every level: for rows other calls read too (the other kv heads of an
 * interleaved tile), and for the items where that measured faster (MHA,
 * more than 8 query rows: cpu_decode.c picks). Nothing outside the ranges above is read
 * or written (s rows only up to bc); no alignment is required. Rounding:
 * the same arguments give the same bits (fixed summation order, no
 * dependence on threads); different ISAs round differently. */
typedef void (*fa__cpu_dec_scores_fn)(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                                      ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf,
                                      ptrdiff_t ldpf, int npf, int pf_keep);
typedef int (*fa__cpu_dec_softmax_fn)(float *s, ptrdiff_t lds, int nr, int bc, float *m, float *l, float *f);
typedef void (*fa__cpu_dec_pv_fn)(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                                  const void *v, ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf,
                                  ptrdiff_t ldpf, int npf, int pf_keep);

/* bf16 products on pairs (AVX512-BF16's vdpbf16ps: two bf16 products per
 * f32 lane). NULL in the tables of ISAs without them; the loops then
 * convert bf16 to f32 and use gemm. Operands hold bf16 bit patterns; a
 * "pair word" is a uint32 whose low half is the even element and whose
 * high half the odd one (little-endian: two consecutive bf16 in memory).
 *
 * Micro-kernel (cut like gemm: table.vl, mr, nv). For m < mr, n < nv*vl:
 *   C[m*ldc + n] = (accumulate ? C[m*ldc + n] : 0)
 *                + alpha * sum_{k < kp} (A0(m, k) B0[k][n] + A1(m, k) B1[k][n])
 * A(m, k): the pair of bf16 at a + m*rsa + k*csa (element offsets; the two
 * halves A0, A1 are consecutive in memory, no alignment required),
 * broadcast. B: a packed panel of pair words b[k*ldb + n] (B0 the low
 * half, B1 the high half). Products of two bf16 are exact in f32; the sum
 * is vdpbf16ps's: f32, round to nearest even, bf16/f32 subnormals flushed
 * to zero. The same arguments give the same bits. 1 <= mr <= table.mr,
 * 1 <= nv <= table.nv, kp >= 0.
 * cmax: NULL, or column maxima to raise: cmax[n] = max(cmax[n], max_m
 * C[m][n]) of the C written (vmaxps, NaN as it does), n < nv*vl: the
 * forward's softmax then needs no pass over S for its row maxima. */
typedef void (*fa__cpu_gemm_bf16_fn)(int mr, int nv, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                                     const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc,
                                     int accumulate, float *cmax);

/* A whole bf16 product in one call, for kernels that block it their own
 * way (AMX tiles): fa__cpu_gemm_bf16's contract (cpu_bf16.h), m >= 1 rows,
 * n >= 16 columns (a multiple of FA_CPU_PANEL), kp >= 0; A as gemm_bf16
 * reads it, any strides (fast when csa = 2 or rsa = 2). Each C element is
 * a sum of the same exact products in f32 (in another order than
 * gemm_bf16's; the same arguments give the same bits), cmax as there
 * (n < n). NULL: the product is cut into gemm_bf16 micro-tiles. */
typedef void (*fa__cpu_gemm_bf16_block_fn)(int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                                           const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc,
                                           int accumulate, float *cmax);

/* Packing into pair words, along rows: for k < ceil(rows/2), n < cols,
 *   dst[k*ldd + n] = pair(X(2k, n), X(2k+1, n))      (X(rows, n) = 0 when rows is odd)
 * pack_f32: X(r, n) = x[r*ldx + n] rounded to bf16 (nearest even; NaN stays
 *           NaN), cols a multiple of FA_CPU_PANEL (the P^T tile of the forward);
 * pack_bf16: X(r, n) = x[r*ldx + n], bf16 bits copied (the V tile), any cols. */
typedef void (*fa__cpu_pair_pack_f32_fn)(uint32_t *dst, ptrdiff_t ldd, const float *x, ptrdiff_t ldx, int rows,
                                         int cols);
typedef void (*fa__cpu_pair_pack_bf16_fn)(uint32_t *dst, ptrdiff_t ldd, const uint16_t *x, ptrdiff_t ldx, int rows,
                                          int cols);
/* dst[t] = x[t] rounded to bf16 (nearest even; NaN stays NaN), t < n: a
 * row of f32 as the broadcast operand of gemm_bf16 (pairs along it). */
typedef void (*fa__cpu_to_bf16_fn)(uint16_t *dst, const float *x, int n);
/* The forward's softmax step with P for the bf16 P.V product, in log2
 * units: c * s[j*lds + i] is the score of query row i against key j in
 * log2 units (c = scale * log2 e when s holds the unscaled products, log2 e
 * when it holds the scores; c > 0), j < bc (>= 1), i < np (a multiple of
 * FA_CPU_PANEL), and m holds the running maxima in log2 units. For every
 * column i:
 *   mn = max(m[i], c * max_j s[j][i]) (the product rounded);   mu = (mn == -inf) ? 0 : mn
 *   f[i] = 2^(m[i] - mu)          (exactly 1 when m[i] = mn; 0 when m[i] = -inf)
 *   P[j][i] = 2^(s[j][i] c - mu)  (the exponent rounded once: an FMA; 0 for -inf scores)
 *   l[i] = l[i] * f[i] + sum_j P[j][i];   m[i] = mn
 * with 2^x to f32 accuracy (about an ulp). P goes to pp as pair words along
 * keys, rounded to bf16 (pp[k*ldp + i] = pair(P[2k][i], P[2k+1][i]), the
 * odd row's partner 0, k < ceil(bc/2)); s is left as it was. Returns
 * nonzero if some f[i] != 1. Rows that saw nothing keep m = -inf, l = 0.
 * cmax: NULL, or max_j s[j][i] for i < np as the product found them
 * (gemm_bf16's cmax from -inf: the same values, so the same bits).
 * Log2 units because this is the forward's per-score work, which bounds it
 * where the products are fast (AMX): with log2 e folded into c, 2^x needs no
 * range reduction by ln 2, and with the scale folded too the score product
 * needs no epilogue (cpu_forward.c). The same function as kt->softmax
 * followed by rounding P to bf16, to f32 rounding. */
typedef int (*fa__cpu_softmax_pairs_fn)(const float *s, ptrdiff_t lds, int bc, int np, float c, const float *cmax,
                                        float *m, float *l, float *f, uint32_t *pp, ptrdiff_t ldp);

/* exp_rows with the LSE fold of the backward (cpu_bwd_tile.c) in it:
 *   s[r*lds + j] = exp(((s - off[r]) - off_lo[r]) - lse[r])   (0 where lse[r] = -inf)
 * the same bits as fa__cpu_score_tile's row_off subtraction followed by
 * exp_rows. NULL where a table lacks it. */
typedef void (*fa__cpu_exp_rows_off_fn)(float *s, ptrdiff_t lds, int rows, int n, const float *lse, const float *off,
                                        const float *off_lo);

/* The backward's dS on bf16 products, and the operands of its gradient
 * products, in one pass over a tile of rows x np (row stride ld, np a
 * multiple of FA_CPU_PANEL):
 *   dS = P (dP - di[r])                           (as ds_rows; dp is left as it was)
 *   pp[k*ld + n] = pair(pd[2k][n], pd[2k+1][n])   (pd: P as O saw it, dropout applied)
 *   sp[k*ld + n] = pair(dS[2k][n], dS[2k+1][n])   (the odd row's partners 0)
 *   s16[r*ld + n] = dS[r][n]
 * all rounded to bf16: the same bits as ds_rows, pair_pack_f32 of pd and dS
 * and to_bf16 of dS. */
typedef void (*fa__cpu_ds_pairs_fn)(const float *p, const float *pd, const float *dp, ptrdiff_t ld, int rows, int np,
                                    const float *di, uint32_t *pp, uint32_t *sp, uint16_t *s16);

/* The row-statistics pass on bf16 products works on transposed tiles
 * (s[j*lds + i]: key j, query row i; np a multiple of FA_CPU_PANEL):
 *   exp_cols:  s[j][i] = exp(s[j][i] - lse[i]) for j < rows, i < np, as
 *              exp_rows does it element by element (0 where lse[i] = -inf);
 *   colsum2:   sp[i] += sum_j p[j][i],  spd[i] += sum_j p[j][i] dp[j][i], in
 *              double (each product exact), j < rows, i < np. */
typedef void (*fa__cpu_exp_cols_fn)(float *s, ptrdiff_t lds, int rows, int np, const float *lse);

/* The backward's P in log2 units (fa__cpu_bf16_log2_scale: s holds the
 * unscaled sums, c = scale * log2 e > 0; the row's LSE in log2 units is
 * given in two parts, off + off_lo), both passes with the same exponent:
 *   exp2_rows_off: s[r*lds + j] = 2^(fma(s, c, -off[r]) - off_lo[r]),  r < rows, j < n
 *                  (n a multiple of FA_CPU_PANEL; 0 where off[r] = -inf);
 *   exp2_cols:     s[j*lds + i] = 2^(fma(s, c, -off[i])),  j < rows, i < np
 *                  (0 where off[i] = -inf),
 * 2^x as softmax_pairs computes it (an ulp; -inf scores give 0). NULL
 * where a table lacks them. */
typedef void (*fa__cpu_exp2_rows_off_fn)(float *s, ptrdiff_t lds, int rows, int n, float c, const float *off,
                                         const float *off_lo);
typedef void (*fa__cpu_exp2_cols_fn)(float *s, ptrdiff_t lds, int rows, int np, float c, const float *off);
typedef void (*fa__cpu_colsum2_fn)(const float *p, const float *dp, ptrdiff_t ld, int rows, int np, double *sp,
                                   double *spd);

typedef struct fa__cpu_kernels {
  fa_cpu_isa isa;
  int vl; /* floats per vector of gemm's nv */
  int mr; /* most rows of a micro-tile */
  int nv; /* most vectors of a micro-tile */
  fa__cpu_gemm_fn gemm;
  /* NULL, or a micro-kernel of mr4 rows x 4 vectors: gemm's contract with
   * nv = 4 and 1 <= mr <= mr4 (the same sums in the same order, so the same
   * bits); fa__cpu_gemm takes it for panels of a multiple of 4 vectors */
  fa__cpu_gemm4_fn gemm4;
  int mr4;
  fa__cpu_softmax_fn softmax;
  fa__cpu_scale_cols_fn scale_cols;
  fa__cpu_exp_rows_fn exp_rows;
  fa__cpu_ds_rows_fn ds_rows;
  fa__cpu_exp_fn exp;
  fa__cpu_softcap_fn softcap;
  fa__cpu_cvt_fn f16_to_f32;
  fa__cpu_cvt_fn bf16_to_f32;
  fa__cpu_dropout_fn dropout;
  fa__cpu_dec_scores_fn dec_scores;
  fa__cpu_dec_softmax_fn dec_softmax;
  fa__cpu_dec_pv_fn dec_pv;
  unsigned dec_dtypes; /* bit 1 << dtype: dec_scores and dec_pv read it directly */
  /* NULL but on avx512bf16: dec_scores and dec_pv with both products on
   * vdpbf16ps for a bf16 cache (q and P rounded to bf16; other dtypes as
   * dec_scores / dec_pv), which cpu_decode.c takes for items of more than
   * DEC_NT_ROWS rows, where the arithmetic, not the memory, sets the pace */
  fa__cpu_dec_scores_fn dec_scores_pairs;
  fa__cpu_dec_pv_fn dec_pv_pairs;
  fa__cpu_gemm_bf16_fn gemm_bf16; /* NULL: no bf16 products (the kernels below NULL too) */
  fa__cpu_pair_pack_f32_fn pair_pack_f32;
  fa__cpu_pair_pack_bf16_fn pair_pack_bf16;
  fa__cpu_to_bf16_fn to_bf16;
  fa__cpu_exp_cols_fn exp_cols;
  fa__cpu_colsum2_fn colsum2;
  fa__cpu_softmax_pairs_fn softmax_pairs;
  fa__cpu_ds_pairs_fn ds_pairs;
  fa__cpu_exp_rows_off_fn exp_rows_off;
  fa__cpu_exp2_rows_off_fn exp2_rows_off;
  fa__cpu_exp2_cols_fn exp2_cols;
  fa__cpu_gemm_bf16_block_fn gemm_bf16_block; /* NULL but on amx */
  /* pair_pack_bf16 transposed, NULL but on amx: dst[c*ldd + k] = pair(x(2k, c),
   * x(2k+1, c)) for c < cols, k < ceil(rows/2) (x(rows, c) = 0), nothing
   * else written: V (forward) and dO, Q (backward) as rows of pairs, the
   * A operand gemm_bf16_block reads straight into tiles (csa = 2). */
  fa__cpu_pair_pack_bf16_fn pair_pack_bf16_t;
  /* NULL but on amx. tiles_hold(1) ... tiles_hold(0) around a work item's
   * products on one thread: gemm_bf16_block then finds the tile
   * configuration loaded instead of loading and releasing it per call
   * (microcoded, a few hundred cycles a pair); nothing else on the thread
   * may use AMX in between. Nesting is not counted. */
  void (*tiles_hold)(int on);
} fa__cpu_kernels;

/* Fill a table: the portable kernels first, then each ISA overrides what it
 * has. The x86 fillers exist only when FA_CPU_X86 is defined. */
void fa__cpu_kernels_generic(fa__cpu_kernels *kt);
#ifdef FA_CPU_X86
void fa__cpu_kernels_avx2(fa__cpu_kernels *kt);
void fa__cpu_kernels_avx512(fa__cpu_kernels *kt);
/* That table's decode kernels, for the tables built over it to fall back on. */
void fa__cpu_dec_scores_avx512(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                               ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf, ptrdiff_t ldpf,
                               int npf, int pf_keep);
void fa__cpu_dec_pv_avx512(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                           const void *v, ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf, ptrdiff_t ldpf,
                           int npf, int pf_keep);
/* Over an AVX-512 table: the bf16 products (kernels_avx512bf16.c, built
 * when the compiler targets AVX512-BF16: FA_CPU_AVX512BF16). */
void fa__cpu_kernels_avx512bf16(fa__cpu_kernels *kt);
/* Its decode kernels (kernels_decode_avx512bf16.c): bf16 caches on
 * vdpbf16ps (q and P rounded to bf16), other dtypes on avx512's. */
void fa__cpu_dec_scores_avx512bf16(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k,
                                   ptrdiff_t ldk, int bc, int D, float scale, fa_dtype kdt, const void *pf,
                                   ptrdiff_t ldpf, int npf, int pf_keep);
void fa__cpu_dec_pv_avx512bf16(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                               const void *v, ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf,
                               ptrdiff_t ldpf, int npf, int pf_keep);
/* vdpbf16ps's FLOP rate over vfmadd231ps's on this core, timed once per call
 * (well under a millisecond): ~2 where the bf16 products have their own throughput (Zen
 * 4 and 5), ~1 where they share the FMA ports' rate (Sapphire Rapids), and
 * there the bf16 path's pair packing makes it slower than converting to f32. */
double fa__cpu_bf16_rate_ratio(void);
/* Over an avx512bf16 table: the bf16 products on AMX tiles (kernels_amx.c,
 * built when the compiler targets AMX-BF16: FA_CPU_AMX). */
void fa__cpu_kernels_amx(fa__cpu_kernels *kt);
/* Has Linux let this process use the AMX tile data? Asks once
 * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; Linux >= 5.16),
 * thread-safe. Only meaningful where the CPU has AMX. */
int fa__cpu_amx_usable(void);
#endif

#endif
