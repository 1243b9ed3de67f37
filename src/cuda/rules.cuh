// The shared rules (src/rules/*.h, compiled __host__ __device__ here) put in
// the shape the kernels use them in: one sequence's context, the score of one
// element with every option, the dropout keep bits of a column pair. Nothing
// here decides a rule; it only calls the headers that do.
#ifndef FA_CUDA_RULES_CUH
#define FA_CUDA_RULES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "../rules/dropout.h"
#include "../rules/layout.h"
#include "../rules/score.h"
#include "../rules/visibility.h"
#include "flashattn.h"
#include "params.cuh"

namespace fa_cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A band cut down to one tile, for the per-element test on tiles the band
// cuts: [v0, v1) are the visible columns of one row (fa__band_cols of it, or
// the visible rows of one column, fa__band_rows), x0 the tile's first column
// as the thread counts it, n its width. [*lo, *hi) are the visible offsets
// from x0, clamped to [0, n], so that each element's test is two 32-bit
// compares against an offset known at compile time instead of 64-bit band
// arithmetic.
__device__ __forceinline__ void band_offsets(int64_t v0, int64_t v1, int64_t x0, int n, int *lo, int *hi) {
  const int64_t a = v0 - x0, b = v1 - x0;
  *lo = static_cast<int>(a < 0 ? 0 : a > n ? n : a);
  *hi = static_cast<int>(b < 0 ? 0 : b > n ? n : b);
}

// An element of each float dtype as f32 (load_any, bias_tile).
__device__ __forceinline__ float as_f32(float x) {
  return x;
}
__device__ __forceinline__ float as_f32(double x) {
  return static_cast<float>(x);
}
__device__ __forceinline__ float as_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float as_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// A tensor element of any float dtype as f32 (bias, the generic path).
__device__ __forceinline__ float load_any(const void *p, int64_t idx, int dtype) {
  switch (dtype) {
    case FA_F32: return as_f32(static_cast<const float *>(p)[idx]);
    case FA_F64: return as_f32(static_cast<const double *>(p)[idx]);
    case FA_F16: return as_f32(static_cast<const __half *>(p)[idx]);
    default: return as_f32(static_cast<const __nv_bfloat16 *>(p)[idx]);
  }
}

__device__ __forceinline__ void store_any(void *p, int64_t idx, int dtype, float x) {
  switch (dtype) {
    case FA_F32: static_cast<float *>(p)[idx] = x; break;
    case FA_F64: static_cast<double *>(p)[idx] = x; break;
    case FA_F16: static_cast<__half *>(p)[idx] = __float2half_rn(x); break;
    default: static_cast<__nv_bfloat16 *>(p)[idx] = __float2bfloat16_rn(x); break;
  }
}

// ALiBi slope of query head h (0 without ALiBi).
__device__ __forceinline__ float alibi_slope(const fa__cuda_params &p, int64_t h) {
  return p.alibi ? p.alibi[h] : 0.f;
}

// One (sequence, query head): where it lives and its band.
struct seq_ctx {
  fa__seq seq;
  fa__band bd;
  int64_t b, h, bh;  // bh = b * Hq + h: the dropout counter word
  float slope;       // ALiBi slope of head h (0 if none)
};

__device__ __forceinline__ seq_ctx make_seq_ctx(const fa__cuda_params &p, int64_t b, int64_t h) {
  seq_ctx c;
  c.seq = fa__seq_get(b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
  c.bd = fa__seq_band_at(&c.seq, p.wl, p.wr, p.bottom_right, p.q_off - p.k_off);
  c.b = b;
  c.h = h;
  c.bh = b * p.Hq + h;
  c.slope = alibi_slope(p, h);
  return c;
}

// Where element (i, j) of the context's head is in the bias.
__device__ __forceinline__ int64_t bias_index(const fa__cuda_params &p, const seq_ctx &c, int64_t i, int64_t j) {
  return c.b * p.bias_s[0] + c.h * p.bias_s[1] + i * p.bias_s[2] + j * p.bias_s[3];
}

// The bias of the kN score elements a thread holds (element k at rows
// xy.row(k), columns xy.col(k) of the context's sequence) as f32 into b[],
// 0 outside the band (nothing is read there: rows or columns past the
// sequence). The dtype switch is taken once, each width's loads in a loop
// unrolled by 8 (b[] in local memory), for the kernels' element-wise code
// to add with score_full_at<true>: read per element inside that unrolled
// code, the four-way switch inlined 64 times at 255 registers was half of
// ptxas's time for the D = 64 Hopper backward with per-element options, the
// build's longest kernel, and that backward ran 5-20% slower than with the
// bias read first (bench/results/2026-12-06-build-time-xeon.txt,
// 2026-12-06-h100-bwd-bias-staging.txt).
template <typename T, typename Coords, int kN>
__device__ __forceinline__ void bias_tile_t(const fa__cuda_params &p, const seq_ctx &c, const Coords &xy,
                                            float (&b)[kN]) {
  const T *base = static_cast<const T *>(p.bias);
#pragma unroll 8
  for (int k = 0; k < kN; ++k) {
    const int64_t i = xy.row(k), j = xy.col(k);
    b[k] = fa__band_visible(&c.bd, i, j) ? as_f32(base[bias_index(p, c, i, j)]) : 0.f;
  }
}

template <typename Coords, int kN>
__device__ __forceinline__ void bias_tile(const fa__cuda_params &p, const seq_ctx &c, const Coords &xy,
                                          float (&b)[kN]) {
  switch (p.bias_dtype) {
    case FA_F32: bias_tile_t<float>(p, c, xy, b); break;
    case FA_F64: bias_tile_t<double>(p, c, xy, b); break;
    case FA_F16: bias_tile_t<__half>(p, c, xy, b); break;
    default: bias_tile_t<__nv_bfloat16>(p, c, xy, b); break;
  }
}

// Score of element (i, j) of the context's sequence after the dot product:
// returns it in log2 units (times log2 e), or -inf when (i, j) is not
// visible. *capped gets scale * dot after the softcap (its gradient needs it).
// kStaged: the caller read element (i, j)'s bias beforehand (bias_ij, used
// where p.bias is set); otherwise it is read here, only where the element
// is visible and not masked.
template <bool kStaged>
__device__ __forceinline__ float score_full_at(const fa__cuda_params &p, const seq_ctx &c, float dot, int64_t i,
                                               int64_t j, float bias_ij, float *capped) {
  *capped = 0.f;
  if (!fa__band_visible(&c.bd, i, j)) return -INFINITY;
  if (p.mask && !p.mask[c.b * p.mask_s[0] + c.h * p.mask_s[1] + i * p.mask_s[2] + j * p.mask_s[3]]) return -INFINITY;
  float s = fa__softcap_f(dot * p.scale, p.softcap);
  *capped = s;
  if (p.alibi) s += fa__alibi_f(c.slope, fa__band_diag(&c.bd, i), j);
  if (p.bias) s += kStaged ? bias_ij : load_any(p.bias, bias_index(p, c, i, j), p.bias_dtype);
  return s * kLog2e;
}

__device__ __forceinline__ float score_full(const fa__cuda_params &p, const seq_ctx &c, float dot, int64_t i, int64_t j,
                                            float *capped) {
  return score_full_at<false>(p, c, dot, i, j, 0.f, capped);
}

// Keep bit of element (i, j) of the call: the rule's element at positions
// (i + q_off, j + k_off) of the whole sequence.
__device__ __forceinline__ bool keep_one(const fa__cuda_params &p, const seq_ctx &c, int64_t i, int64_t j) {
  const int64_t jg = j + p.k_off;
  const fa__u32x4 r = fa__dropout_words(p.seed, p.offset, c.bh, i + p.q_off, jg);
  const int w = static_cast<int>(jg & 3);
  const uint32_t x = w == 0 ? r.v[0] : w == 1 ? r.v[1] : w == 2 ? r.v[2] : r.v[3];
  return x < p.threshold;
}

// Keep bits of columns j and j + 1 (j even) of row i: one Philox call
// serves four columns, and j, j + 1 share it when their positions do (an
// even k_off; the same for every thread of the launch).
__device__ __forceinline__ void keep_pair(const fa__cuda_params &p, const seq_ctx &c, int64_t i, int64_t j, bool *k0,
                                          bool *k1) {
  if (p.k_off & 1) {
    *k0 = keep_one(p, c, i, j);
    *k1 = keep_one(p, c, i, j + 1);
    return;
  }
  const int64_t jg = j + p.k_off;
  const fa__u32x4 r = fa__dropout_words(p.seed, p.offset, c.bh, i + p.q_off, jg);
  const bool hi = (jg & 2) != 0;
  *k0 = (hi ? r.v[2] : r.v[0]) < p.threshold;
  *k1 = (hi ? r.v[3] : r.v[1]) < p.threshold;
}

}  // namespace fa_cuda

#endif
