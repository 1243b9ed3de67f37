/* GPU-side check of the cuda backend against ref, on the shapes the shared
 * suite keeps small: many tiles, every head-dim bucket, both 16-bit dtypes,
 * the fast and the generic path, every option on a multi-tile problem, the
 * deterministic backward (bitwise repeat) and the fused one.
 *
 * Inputs are drawn in f32, rounded to the dtype; ref gets the rounded values
 * in f32 (exact), so its f64 result is the oracle of the very inputs the GPU
 * saw. Errors are max|x - ref| / max|ref| per tensor; LSE by max abs diff,
 * with -inf required at the same places. Prints one line per case and a
 * summary; exit status 1 if any case fails.
 *
 * Build (scripts/gpu/run.sh does): cc -O2 check_cuda.c -I include
 *   -I $CUDA/include -L build -lflashattn -L $CUDA/lib64 -lcudart -lm */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

/* ---- numbers ------------------------------------------------------------ */

static uint64_t g_rng = 88172645463325252ull;
static double urand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float nrand(void) {
  const double u1 = urand() + 1e-12, u2 = urand();
  return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f) { /* normal range only: the checks stay in it */
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a < 0x38800000u) return (uint16_t)sign; /* flush tiny to zero */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}
static float h2f(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0)
    u = sign; /* we never produce subnormals */
  else if (e == 31)
    u = sign | 0x7f800000u | (m << 13);
  else
    u = sign | ((e + 112u) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- a tensor on both sides -------------------------------------------- */

typedef struct buf {
  int64_t shape[4], stride[4], n; /* n elements of storage */
  fa_dtype dt;
  float *h;     /* host f32 values (exact for the dtype) */
  void *d;      /* device allocation */
  size_t shift; /* bytes from d to element 0 (1 element: an unaligned view) */
} buf;
#define DPTR(t) ((void *)((char *)(t)->d + (t)->shift))

static size_t dsize(fa_dtype t) {
  return t == FA_F32 ? 4 : t == FA_F64 ? 8 : t == FA_BOOL ? 1 : 2;
}

/* [B, H, L, D] logical; blhd: stored as [B, L, H, D] */
static buf mk(fa_dtype dt, int64_t B, int64_t H, int64_t L, int64_t D, int blhd) {
  buf t;
  memset(&t, 0, sizeof t);
  t.dt = dt;
  t.shape[0] = B, t.shape[1] = H, t.shape[2] = L, t.shape[3] = D;
  if (blhd) {
    t.stride[3] = 1, t.stride[1] = D, t.stride[2] = H * D, t.stride[0] = L * H * D;
  } else {
    t.stride[3] = 1, t.stride[2] = D, t.stride[1] = L * D, t.stride[0] = H * L * D;
  }
  t.n = B * H * L * D;
  t.h = calloc((size_t)t.n, sizeof(float));
  CK(cudaMalloc(&t.d, (size_t)t.n * dsize(dt) + 64));
  return t;
}

static void upload(buf *t) {
  void *tmp = malloc((size_t)t->n * dsize(t->dt));
  for (int64_t e = 0; e < t->n; ++e) {
    if (t->dt == FA_BF16) {
      ((uint16_t *)tmp)[e] = f2bf(t->h[e]);
      t->h[e] = bf2f(((uint16_t *)tmp)[e]);
    } else if (t->dt == FA_F16) {
      ((uint16_t *)tmp)[e] = f2h(t->h[e]);
      t->h[e] = h2f(((uint16_t *)tmp)[e]);
    } else if (t->dt == FA_F32) {
      ((float *)tmp)[e] = t->h[e];
    } else if (t->dt == FA_BOOL) {
      ((uint8_t *)tmp)[e] = t->h[e] != 0;
    }
  }
  CK(cudaMemcpy(DPTR(t), tmp, (size_t)t->n * dsize(t->dt), cudaMemcpyHostToDevice));
  free(tmp);
}

static void randn(buf *t, float mag) {
  for (int64_t e = 0; e < t->n; ++e) t->h[e] = mag * nrand();
  upload(t);
}

/* NaN (Inf in f16) in the rows that no sequence covers: batch b's rows from
 * first[b] on (padded layout: its length; packed: one stored batch, the
 * rows past the last sequence). Nothing may read them: a NaN there that
 * reaches an output fails the case. */
static void nan_rows(buf *t, const int32_t *first, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < t->shape[1]; ++h)
      for (int64_t r = first[b]; r < t->shape[2]; ++r)
        for (int64_t d = 0; d < t->shape[3]; ++d)
          t->h[b * t->stride[0] + h * t->stride[1] + r * t->stride[2] + d] = NAN;
  upload(t);
}

/* poison the device copy so unwritten outputs show as NaN */
static void poison(buf *t) {
  CK(cudaMemset(DPTR(t), 0xff, (size_t)t->n * dsize(t->dt)));
}

static void download(buf *t) {
  void *tmp = malloc((size_t)t->n * dsize(t->dt));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(tmp, DPTR(t), (size_t)t->n * dsize(t->dt), cudaMemcpyDeviceToHost));
  for (int64_t e = 0; e < t->n; ++e)
    t->h[e] = t->dt == FA_BF16  ? bf2f(((uint16_t *)tmp)[e])
              : t->dt == FA_F16 ? h2f(((uint16_t *)tmp)[e])
                                : ((float *)tmp)[e];
  free(tmp);
}

static void bfree(buf *t) {
  free(t->h);
  if (t->d) cudaFree(t->d);
  memset(t, 0, sizeof *t);
}

static fa_tensor devt(const buf *t) {
  fa_tensor x;
  memset(&x, 0, sizeof x);
  x.data = DPTR(t);
  x.dtype = t->dt;
  memcpy(x.shape, t->shape, sizeof x.shape);
  memcpy(x.stride, t->stride, sizeof x.stride);
  x.memory = FA_MEMORY_CUDA;
  return x;
}
static fa_tensor host_t(const buf *t) {
  fa_tensor x = devt(t);
  x.data = t->h;
  x.dtype = t->dt == FA_BOOL ? FA_BOOL : FA_F32;
  x.memory = FA_MEMORY_HOST;
  return x;
}

/* ---- comparisons --------------------------------------------------------- */

/* logical element (a, b, c, d) of t */
static int64_t off(const buf *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

/* max|x - r| / max|r| over the logical elements with dim-2 index < rows */
static double relerr(const buf *x, const buf *r, int ndim, int64_t rows, int *nan_out) {
  double num = 0, den = 0;
  int nan = 0;
  const int64_t D = ndim == 3 ? 1 : x->shape[3];
  for (int64_t a = 0; a < x->shape[0]; ++a)
    for (int64_t b = 0; b < x->shape[1]; ++b)
      for (int64_t c = 0; c < x->shape[2] && c < rows; ++c)
        for (int64_t d = 0; d < D; ++d) {
          const float xv = x->h[off(x, a, b, c, d)], rv = r->h[off(r, a, b, c, d)];
          if (isnan(xv) != isnan(rv)) nan = 1;
          if (isnan(xv) || isnan(rv)) continue;
          if (isinf(xv) || isinf(rv)) {
            if (xv != rv) nan = 1;
            continue;
          }
          const double e = fabs((double)xv - rv);
          if (e > num) num = e;
          if (fabs(rv) > den) den = fabs(rv);
        }
  *nan_out |= nan;
  return den > 0 ? num / den : num;
}

/* ---- cases -------------------------------------------------------------- */

typedef struct ccase {
  const char *name;
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  fa_dtype dt;
  int blhd, causal, br, use_window, wl, wr;
  int varlen; /* cu_seqlens from lens_q / lens_k */
  const int32_t *lens_q, *lens_k;
  int seqlens; /* padded layout with these lengths */
  int mask, bias, bias_bcast_bh, alibi, dbias;
  int bias_keys; /* the bias [B, 1, 1, Lk] (a key bias) */
  int bias16;    /* the bias in the case's dtype (else f32): the warp-specialized forward's tiles take it */
  double softcap, dropout;
  int bwd;
  int unaligned; /* offset q by one element: forces the generic path */
} ccase;

static const int32_t lq3[] = {300, 0, 129}, lk3[] = {257, 64, 1};
static const int32_t lq2[] = {200, 77}, lk2[] = {130, 256};
static const int32_t lq4[] = {300, 64, 129}, lk4[] = {256, 64, 200}; /* longest key length 256: rows 16-byte aligned */
static const int32_t lq5[] = {190, 65, 1, 260}, lk5[] = {310, 64, 129, 200};

static const ccase cases[] = {
    /* plain, every bucket, both dtypes */
    {"bf16_d64_L512", 2, 4, 4, 512, 512, 64, 64, FA_BF16, .bwd = 1},
    {"bf16_d128_L512", 2, 4, 4, 512, 512, 128, 128, FA_BF16, .bwd = 1},
    {"f16_d128_L333x517", 2, 3, 3, 333, 517, 128, 128, FA_F16, .bwd = 1},
    {"bf16_d256_L300", 1, 2, 2, 300, 300, 256, 256, FA_BF16, .bwd = 1},
    {"f16_d96_Dv40_L200", 1, 2, 2, 200, 260, 96, 40, FA_F16, .bwd = 1},
    {"bf16_d200_Dv136", 1, 2, 1, 150, 170, 200, 136, FA_BF16, .bwd = 1},
    {"bf16_d32_L1000", 1, 2, 2, 1000, 1000, 32, 32, FA_BF16, .bwd = 1},
    /* causal both alignments, windows */
    {"bf16_d128_causal_L700", 2, 2, 2, 700, 700, 128, 128, FA_BF16, .causal = 1, .bwd = 1},
    {"f16_d64_causal_br_q300_k900", 1, 4, 2, 300, 900, 64, 64, FA_F16, .causal = 1, .br = 1, .bwd = 1},
    {"bf16_d64_causal_tl_q900_k300", 1, 2, 2, 900, 300, 64, 64, FA_BF16, .causal = 1, .bwd = 1},
    {"bf16_d128_window_100_20", 1, 2, 2, 600, 600, 128, 128, FA_BF16, .use_window = 1, .wl = 100, .wr = 20, .bwd = 1},
    {"f16_d64_window_br_dead", 1, 2, 2, 500, 200, 64, 64, FA_F16, .use_window = 1, .wl = 3, .wr = 0, .br = 0, .bwd = 1},
    /* GQA / MQA, BLHD */
    {"bf16_d128_mqa_blhd", 2, 8, 1, 257, 383, 128, 128, FA_BF16, .blhd = 1, .bwd = 1},
    {"f16_d64_gqa_causal_blhd", 2, 8, 2, 400, 400, 64, 64, FA_F16, .blhd = 1, .causal = 1, .bwd = 1},
    /* lengths */
    {"bf16_d64_varlen_causal_br", 3, 2, 1, 0, 0, 64, 64, FA_BF16, .varlen = 1, .lens_q = lq3, .lens_k = lk3,
     .causal = 1, .br = 1, .bwd = 1},
    {"bf16_d128_seqlens", 2, 2, 2, 256, 300, 128, 128, FA_BF16, .seqlens = 1, .lens_q = lq2, .lens_k = lk2, .bwd = 1},
    /* every option, multi-tile */
    {"bf16_d64_mask_bias_dbias", 1, 2, 2, 200, 300, 64, 64, FA_BF16, .mask = 1, .bias = 1, .dbias = 1, .bwd = 1},
    {"f16_d128_bias_bcast_dbias", 2, 2, 1, 150, 150, 128, 128, FA_F16, .bias = 1, .bias_bcast_bh = 1, .dbias = 1,
     .bwd = 1},
    {"bf16_d64_alibi_softcap_causal", 1, 4, 2, 300, 300, 64, 64, FA_BF16, .alibi = 1, .softcap = 3.0, .causal = 1,
     .bwd = 1},
    /* softcap / ALiBi alone: the warp-specialized kernels' arithmetic options (score_arith.cuh);
     * with lengths the forward only (the backward's per-element kernel) */
    {"f16_d128_softcap_window_gqa", 2, 4, 2, 400, 520, 128, 128, FA_F16, .softcap = 5.0, .use_window = 1, .wl = 150,
     .wr = 40, .bwd = 1},
    {"bf16_d256_alibi_softcap_causal", 1, 2, 1, 300, 330, 256, 256, FA_BF16, .alibi = 1, .softcap = 4.0, .causal = 1,
     .br = 1, .bwd = 1},
    {"bf16_d128_alibi_seqlens", 2, 2, 2, 256, 300, 128, 128, FA_BF16, .seqlens = 1, .lens_q = lq2, .lens_k = lk2,
     .alibi = 1, .bwd = 1},
    {"bf16_d128_dropout", 2, 2, 2, 300, 300, 128, 128, FA_BF16, .dropout = 0.2, .bwd = 1},
    {"f16_d64_dropout_varlen_gqa", 3, 4, 2, 0, 0, 64, 64, FA_F16, .varlen = 1, .lens_q = lq3, .lens_k = lk3,
     .dropout = 0.3, .bwd = 1},
    /* dropout without a bias or mask: the warp-specialized kernels' keep bits (dropout_tile.cuh; at D = 256 the
     * backward's wide kernel and dQ kernel) */
    {"f16_d128_dropout_causal_br_gqa", 2, 4, 2, 400, 520, 128, 128, FA_F16, .dropout = 0.25, .causal = 1, .br = 1,
     .bwd = 1},
    {"bf16_d64_dropout_softcap_alibi_window", 1, 4, 4, 300, 400, 64, 64, FA_BF16, .dropout = 0.15, .softcap = 3.0,
     .alibi = 1, .use_window = 1, .wl = 120, .wr = 30, .bwd = 1},
    {"bf16_d128_dropout_seqlens", 2, 2, 2, 256, 300, 128, 128, FA_BF16, .seqlens = 1, .lens_q = lq2, .lens_k = lk2,
     .dropout = 0.3, .bwd = 1},
    {"bf16_d256_dropout_causal", 1, 2, 1, 300, 330, 256, 256, FA_BF16, .dropout = 0.2, .causal = 1, .bwd = 1},
    {"f16_d256_dropout_softcap_alibi_window", 1, 4, 2, 260, 330, 256, 256, FA_F16, .dropout = 0.3, .softcap = 4.0,
     .alibi = 1, .use_window = 1, .wl = 100, .wr = 20, .bwd = 1},
    /* a bias or mask with dropout: the tiles and the keep bits together (the D = 256 backward: the wide and dQ
     * kernels' arithmetic form, the tensor from global memory, with the keep bits) */
    {"bf16_d128_bias16_dropout_causal_gqa", 2, 4, 2, 400, 512, 128, 128, FA_BF16, .bias = 1, .bias16 = 1,
     .dropout = 0.2, .causal = 1, .bwd = 1},
    {"f16_d64_mask_dropout_window", 1, 4, 4, 300, 400, 64, 64, FA_F16, .mask = 1, .dropout = 0.25, .use_window = 1,
     .wl = 120, .wr = 30, .bwd = 1},
    {"bf16_d256_mask_dropout_causal", 1, 2, 1, 300, 336, 256, 256, FA_BF16, .mask = 1, .dropout = 0.2, .causal = 1,
     .bwd = 1},
    {"f16_d256_bias16_bcast_dropout_alibi_gqa", 2, 4, 2, 260, 400, 256, 256, FA_F16, .bias = 1, .bias16 = 1,
     .bias_bcast_bh = 1, .alibi = 1, .dropout = 0.3, .bwd = 1},
    {"bf16_d256_everything", 1, 2, 1, 130, 140, 256, 256, FA_BF16, .mask = 1, .bias = 1, .alibi = 1, .softcap = 4.0,
     .dropout = 0.1, .causal = 1, .br = 1, .dbias = 1, .bwd = 1},
    /* one bias (in the inputs' dtype) or mask: the warp-specialized kernels' tiles (score_tile.cuh) */
    {"bf16_d128_bias16_causal_br_gqa", 2, 4, 2, 400, 512, 128, 128, FA_BF16, .bias = 1, .bias16 = 1, .causal = 1,
     .br = 1, .bwd = 1},
    {"f16_d64_mask_window", 1, 4, 4, 300, 400, 64, 64, FA_F16, .mask = 1, .use_window = 1, .wl = 120, .wr = 30,
     .bwd = 1},
    {"f16_d64_bias16_causal_gqa", 2, 4, 2, 300, 384, 64, 64, FA_F16, .bias = 1, .bias16 = 1, .causal = 1, .bwd = 1},
    {"bf16_d128_bias16_dbias_causal_br", 2, 2, 1, 200, 264, 128, 128, FA_BF16, .bias = 1, .bias16 = 1, .dbias = 1,
     .causal = 1, .br = 1, .bwd = 1},
    {"f16_d256_bias16_dbias_softcap_alibi", 1, 2, 2, 150, 200, 256, 256, FA_F16, .bias = 1, .bias16 = 1, .dbias = 1,
     .softcap = 3.0, .alibi = 1, .bwd = 1},
    {"bf16_d256_bias16_bcast_softcap", 1, 2, 1, 300, 336, 256, 256, FA_BF16, .bias = 1, .bias16 = 1, .bias_bcast_bh = 1,
     .softcap = 4.0},
    /* dBias of a [1, 1, Lq, Lk] bias: the summing kernel (dbias_sum_wgmma_kernel.cuh), every bucket */
    {"bf16_d128_bias16_bcast_dbias_causal_br", 2, 4, 2, 300, 400, 128, 128, FA_BF16, .bias = 1, .bias16 = 1,
     .bias_bcast_bh = 1, .dbias = 1, .causal = 1, .br = 1, .bwd = 1},
    {"f16_d64_bias16_bcast_dbias_varlen_alibi", 3, 2, 2, 0, 0, 64, 64, FA_F16, .varlen = 1, .lens_q = lq4,
     .lens_k = lk4, .bias = 1, .bias16 = 1, .bias_bcast_bh = 1, .dbias = 1, .alibi = 1, .bwd = 1},
    {"bf16_d256_bias16_bcast_dbias_window", 2, 2, 1, 200, 264, 256, 256, FA_BF16, .bias = 1, .bias16 = 1,
     .bias_bcast_bh = 1, .dbias = 1, .use_window = 1, .wl = 90, .wr = 40, .bwd = 1},
    /* a key bias [B, 1, 1, Lk]: its dBias sums the rows too */
    {"f16_d128_bias16_keys_dbias_causal_gqa", 2, 4, 2, 300, 400, 128, 128, FA_F16, .bias = 1, .bias16 = 1,
     .bias_keys = 1, .dbias = 1, .causal = 1, .bwd = 1},
    {"bf16_d64_bias16_keys_dbias_varlen_softcap", 3, 2, 2, 0, 0, 64, 64, FA_BF16, .varlen = 1, .lens_q = lq4,
     .lens_k = lk4, .bias = 1, .bias16 = 1, .bias_keys = 1, .dbias = 1, .softcap = 3.0, .bwd = 1},
    {"bf16_d128_mask_varlen_alibi", 3, 2, 2, 0, 0, 128, 128, FA_BF16, .varlen = 1, .lens_q = lq4, .lens_k = lk4,
     .mask = 1, .alibi = 1, .bwd = 1},
    {"f16_d256_mask_varlen_window", 3, 2, 2, 0, 0, 256, 256, FA_F16, .varlen = 1, .lens_q = lq4, .lens_k = lk4,
     .mask = 1, .use_window = 1, .wl = 50, .wr = 20},
    /* lengths on the warp-specialized backward (its tiles past a sequence zeroed; packed LSE / dsum rows and dQ
     * turns per sequence) */
    {"f16_d128_varlen_gqa_causal_br", 4, 4, 2, 0, 0, 128, 128, FA_F16, .varlen = 1, .lens_q = lq5, .lens_k = lk5,
     .causal = 1, .br = 1, .bwd = 1},
    {"bf16_d64_varlen_window_softcap", 4, 2, 1, 0, 0, 64, 64, FA_BF16, .varlen = 1, .lens_q = lq5, .lens_k = lk5,
     .use_window = 1, .wl = 90, .wr = 20, .softcap = 5.0, .bwd = 1},
    {"f16_d64_seqlens_mask_gqa", 2, 4, 2, 256, 320, 64, 64, FA_F16, .seqlens = 1, .lens_q = lq2, .lens_k = lk2,
     .mask = 1, .bwd = 1},
    /* generic path */
    {"f32_d128_causal", 1, 2, 2, 300, 300, 128, 128, FA_F32, .causal = 1, .bwd = 1},
    {"f32_d64_everything", 2, 2, 1, 100, 130, 64, 48, FA_F32, .mask = 1, .bias = 1, .alibi = 1, .softcap = 4.0,
     .dropout = 0.1, .dbias = 1, .bwd = 1},
    {"bf16_unaligned_generic", 1, 2, 2, 100, 100, 64, 64, FA_BF16, .unaligned = 1, .causal = 1, .bwd = 1},
};

static int g_fail = 0;

static void report(const char *name, const char *what, double err, double tol, int nan) {
  const int bad = nan || !(err <= tol);
  if (bad) g_fail = 1;
  printf("  %-34s %-6s err %.3e (tol %.0e)%s%s\n", name, what, err, tol, nan ? " NaN/inf mismatch" : "",
         bad ? "  FAIL" : "");
}

static double tol_of(fa_dtype dt, int bwd) {
  if (dt == FA_F32) return bwd ? 1e-4 : 2e-5;
  if (dt == FA_F16) return bwd ? 1e-2 : 4e-3;
  return bwd ? 3e-2 : 2e-2;
}

/* lse [B, H, L] as a buf with shape[3] = 1 */
static buf mk_lse(int64_t B, int64_t H, int64_t L) {
  buf t = mk(FA_F32, B, H, L, 1, 0);
  return t;
}

/* host copy of a bool mask: the ref reads bytes */
static fa_tensor host_mask(const buf *t, uint8_t **keep) {
  *keep = malloc((size_t)(t->n > 0 ? t->n : 1));
  for (int64_t e = 0; e < t->n; ++e) (*keep)[e] = t->h[e] != 0;
  fa_tensor x = devt(t);
  x.data = *keep;
  x.memory = FA_MEMORY_HOST;
  return x;
}

static void *dev_copy(const void *h, size_t bytes) {
  void *d;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}

/* are the rows >= r0 of t (storage) still the 0xff poison? */
static int untouched_rows(buf *t, int64_t r0) {
  download(t);
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = r0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < t->shape[3]; ++d)
          if (!isnan(t->h[off(t, a, b, c, d)])) return 0;
  return 1;
}

static void run_case(const ccase *c) {
  fa_context *ctx;
  fa_context_create(&ctx);
  const int64_t B = c->B;
  int64_t Bt = B, Lq = c->Lq, Lk = c->Lk, mq = c->Lq, mk_ = c->Lk, rows_q = c->Lq;
  int32_t cuq[16] = {0}, cuk[16] = {0};
  if (c->varlen) {
    for (int64_t b = 0; b < B; ++b) {
      cuq[b + 1] = cuq[b] + c->lens_q[b];
      cuk[b + 1] = cuk[b] + c->lens_k[b];
    }
    Bt = 1;
    rows_q = cuq[B];
    Lq = cuq[B] + 5; /* rows past the last sequence must stay untouched */
    Lk = cuk[B] + 3;
    mq = mk_ = 1;
    for (int64_t b = 0; b < B; ++b) {
      if (c->lens_q[b] > mq) mq = c->lens_q[b];
      if (c->lens_k[b] > mk_) mk_ = c->lens_k[b];
    }
  }
  const fa_dtype dt = c->dt;
  buf q = mk(dt, Bt, c->Hq, Lq, c->D, c->blhd), k = mk(dt, Bt, c->Hkv, Lk, c->D, c->blhd),
      v = mk(dt, Bt, c->Hkv, Lk, c->Dv, c->blhd), o = mk(dt, Bt, c->Hq, Lq, c->Dv, c->blhd);
  buf lse = mk_lse(Bt, c->Hq, Lq);
  buf o_ref = mk(FA_F32, Bt, c->Hq, Lq, c->Dv, 0), lse_ref = mk_lse(Bt, c->Hq, Lq);
  if (c->unaligned) {
    cudaFree(q.d);
    CK(cudaMalloc(&q.d, (size_t)q.n * dsize(dt) + 64));
    q.shift = dsize(dt);
  }
  randn(&q, 1.f);
  randn(&k, 1.f);
  randn(&v, 1.f);
  /* rows past the lengths hold NaN: the kernels must neither read them nor let their copies of them count
   * (the warp-specialized kernels' tiles bring them in and zero them) */
  const int32_t *pad_q = c->varlen ? &cuq[B] : c->seqlens ? c->lens_q : NULL;
  const int32_t *pad_k = c->varlen ? &cuk[B] : c->seqlens ? c->lens_k : NULL;
  const int64_t pad_b = c->varlen ? 1 : B;
  if (pad_q) {
    nan_rows(&q, pad_q, pad_b);
    nan_rows(&k, pad_k, pad_b);
    nan_rows(&v, pad_k, pad_b);
  }

  fa_options od, oh; /* device-side and host-side pointers */
  fa_options_init(&od);
  od.causal = c->causal;
  od.align = c->br ? FA_ALIGN_BOTTOM_RIGHT : FA_ALIGN_TOP_LEFT;
  od.use_window = c->use_window;
  od.window_left = c->wl;
  od.window_right = c->wr;
  od.softcap = c->softcap;
  od.dropout_p = c->dropout;
  od.dropout_seed = 0x1234567890abcdefull;
  od.dropout_offset = 77;
  oh = od;
  void *dev_ptrs[8] = {0};
  int ndev = 0;
  if (c->varlen) {
    od.cu_seqlens_q = dev_ptrs[ndev++] = dev_copy(cuq, sizeof(int32_t) * (B + 1));
    od.cu_seqlens_k = dev_ptrs[ndev++] = dev_copy(cuk, sizeof(int32_t) * (B + 1));
    oh.cu_seqlens_q = cuq;
    oh.cu_seqlens_k = cuk;
    od.num_seqs = oh.num_seqs = B;
  }
  if (c->seqlens) {
    od.seqlens_q = dev_ptrs[ndev++] = dev_copy(c->lens_q, sizeof(int32_t) * B);
    od.seqlens_k = dev_ptrs[ndev++] = dev_copy(c->lens_k, sizeof(int32_t) * B);
    oh.seqlens_q = c->lens_q;
    oh.seqlens_k = c->lens_k;
  }
  buf mask, bias, dbias, dbias_ref;
  memset(&mask, 0, sizeof mask);
  memset(&bias, 0, sizeof bias);
  memset(&dbias, 0, sizeof dbias);
  memset(&dbias_ref, 0, sizeof dbias_ref);
  uint8_t *mask_h = NULL;
  if (c->mask) {
    mask = mk(FA_BOOL, B, c->Hq, mq, mk_, 0);
    for (int64_t e = 0; e < mask.n; ++e) mask.h[e] = urand() < 0.7;
    for (int64_t e = 0; e < mask.n; ++e) /* fully masked rows: row i % 7 == 3 */
      if ((e / mk_) % mq % 7 == 3) mask.h[e] = 0;
    upload(&mask);
    od.mask = devt(&mask);
    oh.mask = host_mask(&mask, &mask_h);
  }
  if (c->bias) {
    const fa_dtype bdt = c->bias16 ? dt : FA_F32;
    bias = c->bias_bcast_bh ? mk(bdt, 1, 1, mq, mk_, 0)
           : c->bias_keys   ? mk(bdt, B, 1, 1, mk_, 0)
                            : mk(bdt, B, c->Hq, mq, mk_, 0);
    randn(&bias, 1.f);
    od.bias = devt(&bias);
    oh.bias = host_t(&bias);
    if (c->dbias) {
      dbias = mk(bdt, bias.shape[0], bias.shape[1], bias.shape[2], mk_, 0); /* bias16: the wgmma dBias kernel's */
      dbias_ref = mk(FA_F32, bias.shape[0], bias.shape[1], bias.shape[2], mk_, 0);
    }
  }
  float slopes[64];
  if (c->alibi) {
    for (int h = 0; h < c->Hq; ++h) slopes[h] = powf(2.f, -8.f * (h + 1) / (float)c->Hq);
    od.alibi_slopes = dev_ptrs[ndev++] = dev_copy(slopes, sizeof(float) * c->Hq);
    oh.alibi_slopes = slopes;
  }

  /* forward */
  fa_tensor tq = devt(&q), tk = devt(&k), tv = devt(&v), to = devt(&o), tl = devt(&lse);
  fa_tensor hq = host_t(&q), hk = host_t(&k), hv = host_t(&v), ho = host_t(&o_ref), hl = host_t(&lse_ref);
  poison(&o);
  poison(&lse);
  fa_status st = fa_forward(ctx, FA_BACKEND_REF, &hq, &hk, &hv, &oh, &ho, &hl);
  if (st != FA_OK) {
    printf("  %-34s ref forward: %s\n", c->name, fa_context_last_error(ctx));
    g_fail = 1;
    goto done;
  }
  st = fa_forward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &od, &to, &tl);
  if (st == FA_OK && cudaDeviceSynchronize() != cudaSuccess) st = FA_ERR_DEVICE;
  if (st != FA_OK) {
    printf("  %-34s cuda forward: %s %s\n", c->name, fa_status_name(st), fa_context_last_error(ctx));
    g_fail = 1;
    goto done;
  }
  {
    int nan = 0;
    if (c->varlen && !untouched_rows(&o, rows_q)) {
      printf("  %-34s O rows past the last sequence were written  FAIL\n", c->name);
      g_fail = 1;
    }
    download(&o);
    download(&lse);
    report(c->name, "O", relerr(&o, &o_ref, 4, rows_q, &nan), tol_of(dt, 0), nan);
    nan = 0;
    /* lse: absolute error (it is a log) */
    double e = 0;
    for (int64_t a = 0; a < lse.shape[0]; ++a)
      for (int64_t h = 0; h < lse.shape[1]; ++h)
        for (int64_t i = 0; i < rows_q; ++i) {
          const float x = lse.h[off(&lse, a, h, i, 0)], r = lse_ref.h[off(&lse_ref, a, h, i, 0)];
          if (isinf(x) || isinf(r) || isnan(x) || isnan(r)) {
            if (!(x == r)) nan = 1;
          } else if (fabs(x - r) > e) {
            e = fabs(x - r);
          }
        }
    report(c->name, "LSE", e, dt == FA_F32 ? 1e-4 : 2e-2, nan);
  }

  if (c->bwd) {
    buf dout = mk(dt, Bt, c->Hq, Lq, c->Dv, c->blhd);
    randn(&dout, 1.f);
    if (pad_q) nan_rows(&dout, pad_q, pad_b);
    buf dq = mk(dt, Bt, c->Hq, Lq, c->D, c->blhd), dk = mk(dt, Bt, c->Hkv, Lk, c->D, c->blhd),
        dv = mk(dt, Bt, c->Hkv, Lk, c->Dv, c->blhd);
    buf dq_ref = mk(FA_F32, Bt, c->Hq, Lq, c->D, 0), dk_ref = mk(FA_F32, Bt, c->Hkv, Lk, c->D, 0),
        dv_ref = mk(FA_F32, Bt, c->Hkv, Lk, c->Dv, 0);
    fa_tensor hdo = host_t(&dout), hdq = host_t(&dq_ref), hdk = host_t(&dk_ref), hdv = host_t(&dv_ref);
    fa_tensor hdb = host_t(&dbias_ref);
    st = fa_backward(ctx, FA_BACKEND_REF, &hq, &hk, &hv, &ho, &hdo, &hl, &oh, &hdq, &hdk, &hdv, c->dbias ? &hdb : NULL);
    if (st != FA_OK) {
      printf("  %-34s ref backward: %s\n", c->name, fa_context_last_error(ctx));
      g_fail = 1;
    } else {
      fa_tensor tdo = devt(&dout), tdq = devt(&dq), tdk = devt(&dk), tdv = devt(&dv), tdb = devt(&dbias);
      float *first = NULL;                   /* deterministic run 1: dq, dk, dv concatenated */
      for (int mode = 0; mode < 3; ++mode) { /* 0: default, 1 and 2: deterministic */
        od.deterministic = mode > 0;
        poison(&dq);
        poison(&dk);
        poison(&dv);
        if (c->dbias) poison(&dbias);
        st = fa_backward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &to, &tdo, &tl, &od, &tdq, &tdk, &tdv,
                         c->dbias ? &tdb : NULL);
        if (st == FA_OK && cudaDeviceSynchronize() != cudaSuccess) st = FA_ERR_DEVICE;
        if (st != FA_OK) {
          printf("  %-34s cuda backward: %s %s\n", c->name, fa_status_name(st), fa_context_last_error(ctx));
          g_fail = 1;
          break;
        }
        if (c->varlen &&
            (!untouched_rows(&dq, rows_q) || !untouched_rows(&dk, cuk[B]) || !untouched_rows(&dv, cuk[B]))) {
          printf("  %-34s gradient rows past the last sequence were written  FAIL\n", c->name);
          g_fail = 1;
        }
        download(&dq);
        download(&dk);
        download(&dv);
        if (mode < 2) {
          const char *tag[2][4] = {{"dQ", "dK", "dV", "dBias"}, {"dQdet", "dKdet", "dVdet", "dBdet"}};
          int nan = 0;
          report(c->name, tag[mode][0], relerr(&dq, &dq_ref, 4, rows_q, &nan), tol_of(dt, 1), nan);
          nan = 0;
          report(c->name, tag[mode][1], relerr(&dk, &dk_ref, 4, c->varlen ? cuk[B] : Lk, &nan), tol_of(dt, 1), nan);
          nan = 0;
          report(c->name, tag[mode][2], relerr(&dv, &dv_ref, 4, c->varlen ? cuk[B] : Lk, &nan), tol_of(dt, 1), nan);
          if (c->dbias) {
            download(&dbias);
            nan = 0;
            report(c->name, tag[mode][3], relerr(&dbias, &dbias_ref, 4, mq, &nan), tol_of(dt, 1), nan);
          }
        }
        const size_t n = (size_t)(dq.n + dk.n + dv.n);
        if (mode == 1) {
          first = malloc(n * sizeof(float));
          memcpy(first, dq.h, dq.n * sizeof(float));
          memcpy(first + dq.n, dk.h, dk.n * sizeof(float));
          memcpy(first + dq.n + dk.n, dv.h, dv.n * sizeof(float));
        } else if (mode == 2 && first) {
          const int same = !memcmp(first, dq.h, dq.n * sizeof(float)) &&
                           !memcmp(first + dq.n, dk.h, dk.n * sizeof(float)) &&
                           !memcmp(first + dq.n + dk.n, dv.h, dv.n * sizeof(float));
          printf("  %-34s deterministic repeat: %s\n", c->name, same ? "bitwise equal" : "DIFFERS  FAIL");
          if (!same) g_fail = 1;
        }
      }
      free(first);
    }
    bfree(&dout), bfree(&dq), bfree(&dk), bfree(&dv), bfree(&dq_ref), bfree(&dk_ref), bfree(&dv_ref);
  }
done:
  bfree(&q), bfree(&k), bfree(&v), bfree(&o), bfree(&lse), bfree(&o_ref), bfree(&lse_ref);
  if (c->mask) bfree(&mask);
  if (c->bias) bfree(&bias);
  if (c->dbias) bfree(&dbias), bfree(&dbias_ref);
  free(mask_h);
  for (int x = 0; x < ndev; ++x) cudaFree(dev_ptrs[x]);
  fa_context_destroy(ctx);
}

int main(int argc, char **argv) {
  char why[256];
  if (fa_backend_available(FA_BACKEND_CUDA, why, sizeof why) != FA_OK) {
    printf("cuda backend not available: %s\n", why);
    return 2;
  }
  const int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; ++i) {
    if (argc > 1 && !strstr(cases[i].name, argv[1])) continue;
    printf("%s\n", cases[i].name);
    fflush(stdout);
    run_case(&cases[i]);
    fflush(stdout);
  }
  printf("check_cuda: %s\n", g_fail ? "FAILURES" : "all cases pass");
  return g_fail;
}
