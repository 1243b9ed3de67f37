/* The decode kernels (few query rows against many keys), written once in
 * plain C and included by each kernels_*.c, whose ISA flags (-mavx2 -mfma,
 * -mavx512f) let the compiler vectorize the fixed-width inner loops: the
 * 16-float partial sums and the row updates are shaped for that. Each ISA's
 * table gets its own compiled copy. */
#ifndef FA_CPU_KERNELS_DECODE_H
#define FA_CPU_KERNELS_DECODE_H

#include <stddef.h>

#define FA_DEC_W 16

/* The 16 partial sums of a dot product added as a fixed tree (vector adds
 * of halves): the same order on every ISA, and no serial chain. */
static inline float fa__dec_hsum(float *a) {
  for (int t = 0; t < 8; ++t) a[t] += a[t + 8];
  for (int t = 0; t < 4; ++t) a[t] += a[t + 4];
  for (int t = 0; t < 2; ++t) a[t] += a[t + 2];
  return a[0] + a[1];
}

/* q_r . k_j for one row and nk <= 4 keys at once: independent accumulator
 * chains, each key row read from L1 once per query row. */
static inline void fa__dec_dot4(float *out, ptrdiff_t lds, const float *q, const float *k, ptrdiff_t ldk, int nk,
                                int D) {
  const int D16 = D - D % FA_DEC_W;
  float a[4][FA_DEC_W] = {{0}};
  const float *k0 = k, *k1 = nk > 1 ? k + ldk : k, *k2 = nk > 2 ? k + 2 * ldk : k, *k3 = nk > 3 ? k + 3 * ldk : k;
  for (int d = 0; d < D16; d += FA_DEC_W)
    for (int t = 0; t < FA_DEC_W; ++t) {
      const float x = q[d + t];
      a[0][t] += x * k0[d + t];
      a[1][t] += x * k1[d + t];
      a[2][t] += x * k2[d + t];
      a[3][t] += x * k3[d + t];
    }
  const float *ks[4] = {k0, k1, k2, k3};
  for (int jj = 0; jj < nk; ++jj) {
    float v = fa__dec_hsum(a[jj]);
    for (int d = D16; d < D; ++d) v += q[d] * ks[jj][d];
    out[jj * lds] = v;
  }
}

/* s[j*lds + r] = sum_d q[r*ldq + d] * k[j*ldk + d] for r < nr, j < bc:
 * each key tile is read from memory once for all nr query rows (GQA heads,
 * new tokens). */
static void fa__dec_dot_rows(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const float *k,
                             ptrdiff_t ldk, int bc, int D) {
  for (int j = 0; j < bc; j += 4) {
    const int nk = bc - j < 4 ? bc - j : 4;
    for (int r = 0; r < nr; ++r) fa__dec_dot4(s + j * lds + r, lds, q + r * ldq, k + j * ldk, ldk, nk, D);
  }
}

/* o[r*ldo + e] += sum_j p[j*lds + r] * v[j*ldv + e] for r < nr, e < Dv,
 * j < bc, the keys taken four at a time (each o row is read and written
 * once per four keys). */
static void fa__dec_axpy_rows(float *o, ptrdiff_t ldo, int nr, const float *p, ptrdiff_t lds, const float *v,
                              ptrdiff_t ldv, int bc, int Dv) {
  int j = 0;
  for (; j + 4 <= bc; j += 4) {
    const float *v0 = v + j * ldv, *v1 = v0 + ldv, *v2 = v1 + ldv, *v3 = v2 + ldv;
    for (int r = 0; r < nr; ++r) {
      const float p0 = p[j * lds + r], p1 = p[(j + 1) * lds + r], p2 = p[(j + 2) * lds + r], p3 = p[(j + 3) * lds + r];
      float *orow = o + r * ldo;
      for (int e = 0; e < Dv; ++e) orow[e] += p0 * v0[e] + p1 * v1[e] + p2 * v2[e] + p3 * v3[e];
    }
  }
  for (; j < bc; ++j) {
    const float *v0 = v + j * ldv;
    for (int r = 0; r < nr; ++r) {
      const float p0 = p[j * lds + r];
      float *orow = o + r * ldo;
      for (int e = 0; e < Dv; ++e) orow[e] += p0 * v0[e];
    }
  }
}

#endif
