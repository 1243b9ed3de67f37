/* The portable loops around the micro-kernel (BLIS's macro-kernel): one
 * product C (+)= A * B of a tile, cut into micro-tiles of the table's
 * mr x nv*vl. */
#ifndef FA_CPU_GEMM_H
#define FA_CPU_GEMM_H

#include <stddef.h>

#include "kernels.h"

/* C[i*ldc + x] (+)= sum_{k < kc} a[i*rsa + k*csa] * b[k*ldb + x] for
 * i < m, x < n; n a multiple of FA_CPU_PANEL (panels are padded), m >= 0.
 * The columns of B are walked in vertical strips (a strip of B stays in L1
 * while all of A streams past it), each strip as wide as the kernel takes,
 * balanced so that no strip is much narrower than the others; where the
 * table has a wide micro-tile (gemm4: avx512's 6 x 64) and n is a whole
 * number of 4-vector strips, those instead. */
void fa__cpu_gemm(const fa__cpu_kernels *kt, int m, int n, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
                  const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);

static inline int fa__cpu_pad(int n) {
  return (n + FA_CPU_PANEL - 1) / FA_CPU_PANEL * FA_CPU_PANEL;
}

#endif
