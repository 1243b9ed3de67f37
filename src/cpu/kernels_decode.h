/* The decode kernels (few query rows against many keys), written once in
 * plain C and included by each kernels_*.c, whose ISA flags (-mavx2 -mfma,
 * -mavx512f) let the compiler vectorize the fixed-width inner loops: the
 * 16-float partial sums and the row updates are shaped for that. Each ISA's
 * table gets its own compiled copy. */
#ifndef FA_CPU_KERNELS_DECODE_H
#define FA_CPU_KERNELS_DECODE_H

#include <stddef.h>

#define FA_DEC_W 16

static inline float fa__dec_hsum(const float *a) {
  float t = 0.0f;
  for (int i = 0; i < FA_DEC_W; ++i) t += a[i];
  return t;
}

/* s[j*lds + r] = sum_d q[r*ldq + d] * k[j*ldk + d] for r < nr, j < bc:
 * each key row is read once for all nr query rows (GQA heads, new tokens). */
static void fa__dec_dot_rows(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const float *k,
                             ptrdiff_t ldk, int bc, int D) {
  const int D16 = D - D % FA_DEC_W;
  for (int j = 0; j < bc; ++j) {
    const float *kj = k + j * ldk;
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
      const float *q0 = q + r * ldq, *q1 = q0 + ldq;
      float a0[FA_DEC_W] = {0}, a1[FA_DEC_W] = {0};
      for (int d = 0; d < D16; d += FA_DEC_W)
        for (int t = 0; t < FA_DEC_W; ++t) {
          a0[t] += q0[d + t] * kj[d + t];
          a1[t] += q1[d + t] * kj[d + t];
        }
      float s0 = fa__dec_hsum(a0), s1 = fa__dec_hsum(a1);
      for (int d = D16; d < D; ++d) {
        s0 += q0[d] * kj[d];
        s1 += q1[d] * kj[d];
      }
      s[j * lds + r] = s0;
      s[j * lds + r + 1] = s1;
    }
    for (; r < nr; ++r) {
      const float *q0 = q + r * ldq;
      float a0[FA_DEC_W] = {0};
      for (int d = 0; d < D16; d += FA_DEC_W)
        for (int t = 0; t < FA_DEC_W; ++t) a0[t] += q0[d + t] * kj[d + t];
      float s0 = fa__dec_hsum(a0);
      for (int d = D16; d < D; ++d) s0 += q0[d] * kj[d];
      s[j * lds + r] = s0;
    }
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
