/* The loops and packing around the bf16 micro-kernels (kernels.h,
 * gemm_bf16): which problems take them, the macro-kernel, and the pair
 * panels vdpbf16ps needs. The forward, the backward and its passes use
 * them for bf16 inputs; f32 and f16 keep the f32 kernels. */
#ifndef FA_CPU_BF16_H
#define FA_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "cpu_io.h"
#include "kernels.h"

/* Does the forward of p run its products on kt's bf16 kernels? (bf16
 * inputs and a table that has them; f32 and f16 never do.) */
int fa__cpu_bf16_products(const fa__problem *p, const fa__cpu_kernels *kt);

/* The factor c = scale * log2 e by which the f32 sums of the score
 * product become scores in log2 units, when p's bf16 products may leave
 * the scale out of that product (nothing but masks acts on the scores:
 * no softcap, ALiBi, bias or boolean mask; c finite and > 0; a table
 * with the log2 kernels); else 0. The forward's softmax and the backward's
 * P (both passes, so that they stay the same P~) then take it in their FMA
 * and the products run at alpha 1 (kernels.h: softmax_pairs,
 * exp2_rows_off, exp2_cols). */
float fa__cpu_bf16_log2_scale(const fa__problem *p, const fa__cpu_kernels *kt);

/* A row's LSE in log2 units, as both backward passes take it (the same
 * bits in both: P~ stays the same); non-finite values as they are. */
static inline float fa__cpu_lse_log2(float lse) {
  return lse - lse == 0.0f ? (float)((double)lse * 1.44269504088896341) : lse;
}

/* C[i*ldc + x] (+)= alpha * sum_{k < kp} pair products of A(i, k) and
 * b[k*ldb + x] (kt->gemm_bf16's contract), i < m, x < n; n a multiple of
 * FA_CPU_PANEL. Cut into strips and micro-tiles as fa__cpu_gemm does. */
void fa__cpu_gemm_bf16(const fa__cpu_kernels *kt, int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                       const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate);
/* The same product raising column maxima cmax[x] (x < n) to those of C
 * (kt->gemm_bf16's cmax). */
void fa__cpu_gemm_bf16_max(const fa__cpu_kernels *kt, int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa,
                           ptrdiff_t csa, const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc,
                           int accumulate, float *cmax);

/* Pairs along columns, transposed (the stationary Q^T panel): for
 * k < ceil(cols/2), r < rpad,
 *   dst[k*ld + r] = pair(x(r, 2k), x(r, 2k+1)),  x(r, cols) = 0, rows r >= rows zero.
 * x is bf16 (bits copied). */
void fa__cpu_pack_pairs_t(uint32_t *dst, ptrdiff_t ld, int rpad, const fa__cpu_mat *x, int rows, int cols);

/* The broadcast operand of gemm_bf16 for rows x cols of x (bf16), pairs
 * along columns: A(r, k) at a + r*rs + 2k. x itself when its columns are
 * contiguous and cols is even, else a copy in buf (rows x (cols rounded up
 * to even) elements, the odd column's partner 0). */
typedef struct fa__cpu_bf16_aop {
  const uint16_t *a;
  ptrdiff_t rs;
} fa__cpu_bf16_aop;
fa__cpu_bf16_aop fa__cpu_bf16_operand(const fa__cpu_mat *x, int rows, int cols, uint16_t *buf);

/* Pairs along rows (the streaming V tile): for k < ceil(rows/2), c < cols,
 *   dst[k*ld + c] = pair(x(2k, c), x(2k+1, c)),  x(rows, c) = 0.
 * x is bf16; kt->pair_pack_bf16 when its columns are contiguous. */
void fa__cpu_pack_pairs_rows(const fa__cpu_kernels *kt, uint32_t *dst, ptrdiff_t ld, const fa__cpu_mat *x, int rows,
                             int cols);

/* The same pairs transposed: for c < cols, k < ceil(rows/2),
 *   dst[c*ld + k] = pair(x(2k, c), x(2k+1, c)),  x(rows, c) = 0.
 * Only where kt->pair_pack_bf16_t is set (amx): there the products take
 * it with csa = 2, rsa = 2*ld, whole 16-pair steps straight into tiles;
 * ld = fa__cpu_pairs_ld_t(rows) keeps the rows 64-byte multiples. */
void fa__cpu_pack_pairs_rows_t(const fa__cpu_kernels *kt, uint32_t *dst, ptrdiff_t ld, const fa__cpu_mat *x, int rows,
                               int cols);
static inline int fa__cpu_pairs_ld_t(int rows) {
  return ((rows + 1) / 2 + 15) / 16 * 16;
}

/* x (rows x cols) as the A operand of fa__cpu_gemm_bf16 with m = cols and
 * k = pairs of rows (V^T in P V, dO^T and Q^T in dV^T and dK^T), packed
 * into dst (room for fa__cpu_pairs_ld_t(rows_max) * cols words) in the
 * layout the kernel table loads best: rows of pairs where it has
 * pair_pack_bf16_t (amx), else a pair panel. `a` gives the strides for
 * the product. */
typedef struct fa__cpu_pairs_a {
  const uint16_t *a;
  ptrdiff_t rsa, csa;
} fa__cpu_pairs_a;
fa__cpu_pairs_a fa__cpu_pack_pairs_a(const fa__cpu_kernels *kt, uint32_t *dst, int rows_max, const fa__cpu_mat *x,
                                     int rows, int cols);

#endif
