/* The vector products of the eager baseline, written once with GCC/Clang
 * vector types and compiled three times (generic, AVX2+FMA, AVX-512F) with
 * EAGER_ISA set, so that each build gets the widest registers its flags
 * allow. -ffp-contract=fast (set by CMake for this file) turns a*b + c on
 * vectors into FMA instructions. */
#include <stdint.h>
#include <string.h>

#include "eager.h"

#if EAGER_ISA == 2
#define VL 16
#define FN(name) name##_avx512
#elif EAGER_ISA == 1
#define VL 8
#define FN(name) name##_avx2
#else
#define VL 4
#define FN(name) name##_generic
#endif

typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));

#define MR 4        /* rows of C per micro-tile */
#define NB (2 * VL) /* columns of C per micro-tile: two vectors */

static inline vf load(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void store(float *p, vf v) {
  memcpy(p, &v, sizeof v);
}
static inline vf splat(float x) {
  return (vf){0} + x;
}

/* C[MR x NB] (+)= alpha * A[MR x K] * B[K x NB]; 8 accumulators in registers. */
static void tile_4(int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs, const float *B, int64_t ldb,
                   float *C, int64_t ldc, int accumulate) {
  vf c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  for (int64_t k = 0; k < K; ++k) {
    const vf b0 = load(B + k * ldb), b1 = load(B + k * ldb + VL);
    const float *a = A + k * a_cs;
    const vf a0 = splat(a[0]), a1 = splat(a[a_rs]), a2 = splat(a[2 * a_rs]), a3 = splat(a[3 * a_rs]);
    c00 += a0 * b0, c01 += a0 * b1;
    c10 += a1 * b0, c11 += a1 * b1;
    c20 += a2 * b0, c21 += a2 * b1;
    c30 += a3 * b0, c31 += a3 * b1;
  }
  vf *acc[MR][2] = {{&c00, &c01}, {&c10, &c11}, {&c20, &c21}, {&c30, &c31}};
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      float *c = C + r * ldc + h * VL;
      const vf v = *acc[r][h] * alpha;
      store(c, accumulate ? load(c) + v : v);
    }
}

/* One row of C, NB columns. */
static void tile_1(int64_t K, float alpha, const float *A, int64_t a_cs, const float *B, int64_t ldb, float *C,
                   int accumulate) {
  vf c0 = {0}, c1 = {0};
  for (int64_t k = 0; k < K; ++k) {
    const vf a = splat(A[k * a_cs]);
    c0 += a * load(B + k * ldb), c1 += a * load(B + k * ldb + VL);
  }
  c0 *= alpha, c1 *= alpha;
  store(C, accumulate ? load(C) + c0 : c0);
  store(C + VL, accumulate ? load(C + VL) + c1 : c1);
}

/* Columns past the last full tile: plain loops. */
static void edge(int64_t M, int64_t j0, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = j0; j < N; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[i * a_rs + k * a_cs] * B[k * ldb + j];
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + alpha * s : alpha * s;
    }
}

void FN(fa_eager_gemm)(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs,
                       const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
  const int64_t nfull = N / NB * NB;
  /* column blocks outside, rows inside: the K x NB panel of B stays in L1
   * while every row of A passes over it */
  for (int64_t j = 0; j < nfull; j += NB) {
    int64_t i = 0;
    for (; i + MR <= M; i += MR)
      tile_4(K, alpha, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j, ldc, accumulate);
    for (; i < M; ++i) tile_1(K, alpha, A + i * a_rs, a_cs, B + j, ldb, C + i * ldc + j, accumulate);
  }
  if (nfull < N) edge(M, nfull, N, K, alpha, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

/* exp on a vector: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial (rel. error ~2e-7), 2^n built in the exponent bits. Inputs
 * below -87.3 give ~1e-38, not 0: callers zero masked entries themselves. */
static inline vf vexp(vf x) {
  const vf lo = splat(-87.3f), hi = splat(88.3f);
  vi m = x < lo;
  x = (vf)(((vi)x & ~m) | ((vi)lo & m));
  m = x > hi;
  x = (vf)(((vi)x & ~m) | ((vi)hi & m));
  const vf magic = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
  const vf n = (x * 1.44269504f + magic) - magic;
  const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
  vf p = splat(1.0f / 720.0f);
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * (vf)e;
}

static inline float hmax(vf v) {
  float m = v[0];
  for (int l = 1; l < VL; ++l) m = v[l] > m ? v[l] : m;
  return m;
}
static inline float hsum(vf v) {
  float s = 0;
  for (int l = 0; l < VL; ++l) s += v[l];
  return s;
}

void FN(fa_eager_softmax_row)(const float *s, float *p, int64_t nvis, int64_t n) {
  /* pass 1: max; pass 2: p = exp(s - max) and its sum; pass 3: scale. The
   * textbook's three trips over a row of the materialized S and P. */
  const int64_t nv = nvis / VL * VL;
  float mx = -3.4e38f;
  if (nv) {
    vf vm = load(s);
    for (int64_t j = VL; j < nv; j += VL) {
      const vf x = load(s + j);
      const vi gt = x > vm;
      vm = (vf)(((vi)x & gt) | ((vi)vm & ~gt));
    }
    mx = hmax(vm);
  }
  for (int64_t j = nv; j < nvis; ++j) mx = s[j] > mx ? s[j] : mx;
  vf vs = {0};
  for (int64_t j = 0; j < nv; j += VL) {
    const vf e = vexp(load(s + j) - mx);
    store(p + j, e);
    vs += e;
  }
  float sum = hsum(vs);
  for (int64_t j = nv; j < nvis; ++j) {
    vf x = {0};
    x[0] = s[j] - mx;
    p[j] = vexp(x)[0];
    sum += p[j];
  }
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
  for (int64_t j = 0; j < nv; j += VL) store(p + j, load(p + j) * inv);
  for (int64_t j = nv; j < nvis; ++j) p[j] *= inv;
  for (int64_t j = nvis; j < n; ++j) p[j] = 0.0f;
}
