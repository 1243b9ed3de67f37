#include "cpu_gemm.h"

void fa__cpu_gemm(const fa__cpu_kernels *kt, int m, int n, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
                  const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  const int vecs = n / kt->vl;
  if (kt->gemm4 && vecs > 0 && vecs % 4 == 0) { /* strips of 4 vectors on the wide micro-tile */
    if (m <= 0) return;
    for (int x = 0; x < vecs; x += 4) {
      const float *bs = b + (ptrdiff_t)x * kt->vl;
      float *cs = c + (ptrdiff_t)x * kt->vl;
      for (int i = 0; i < m; i += kt->mr4) {
        const int mr = m - i < kt->mr4 ? m - i : kt->mr4;
        kt->gemm4(mr, kc, a + (ptrdiff_t)i * rsa, rsa, csa, bs, ldb, cs + (ptrdiff_t)i * ldc, ldc, accumulate);
      }
    }
    return;
  }
  const int strips = (vecs + kt->nv - 1) / kt->nv;
  if (m <= 0 || strips == 0) return;
  const int base = vecs / strips, extra = vecs % strips;
  int x = 0; /* first vector of the strip */
  for (int s = 0; s < strips; ++s) {
    const int nv = base + (s < extra);
    const float *bs = b + (ptrdiff_t)x * kt->vl;
    float *cs = c + (ptrdiff_t)x * kt->vl;
    for (int i = 0; i < m; i += kt->mr) {
      const int mr = m - i < kt->mr ? m - i : kt->mr;
      kt->gemm(mr, nv, kc, a + (ptrdiff_t)i * rsa, rsa, csa, bs, ldb, cs + (ptrdiff_t)i * ldc, ldc, accumulate);
    }
    x += nv;
  }
}
