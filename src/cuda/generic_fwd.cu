// Generic forward (SIMT, f32 arithmetic): every dtype, any strides, any
// option. The f32 path of the library and the fallback for f16/bf16 tensors
// whose rows are not 16-byte aligned. Tiles: 16 query rows x 32 keys per
// block, K/V tiles staged in shared memory as f32; within a warp a lane is a
// key when scores are computed and a head-dim column when O is accumulated.
#include <math.h>

#include "launch.cuh"
#include "rules.cuh"

namespace fa_cuda {
namespace {

constexpr int kGThreads = 128;
constexpr int kGRows = 16;  // query rows per block, 4 per warp
constexpr int kGKeys = 32;  // keys per tile = lanes
constexpr int kGMaxD = 256;
constexpr int kGDPerLane = kGMaxD / 32;

__global__ void __launch_bounds__(kGThreads) generic_fwd_kernel(const fa__cuda_params p) {
  extern __shared__ float gsm[];
  const int D = p.D, Dv = p.Dv;
  float *sQ = gsm;                    // [kGRows][D]
  float *sK = sQ + kGRows * D;        // [kGKeys][D + 1]: lane-per-key reads stay conflict-free
  float *sV = sK + kGKeys * (D + 1);  // [kGKeys][Dv]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t bh = blockIdx.x, b = bh / p.Hq, h = bh % p.Hq, kvh = h / p.group;
  const seq_ctx c = make_seq_ctx(p, b, h);
  const int64_t rows = p.varlen ? c.seq.lq : p.Lq;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kGRows;
  if (m0 >= rows) return;

  const int64_t qb = c.seq.bidx * p.qs.b + h * p.qs.h + c.seq.q_row0 * p.qs.r;
  const int64_t kb = c.seq.bidx * p.ks.b + kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const int64_t vb = c.seq.bidx * p.vs.b + kvh * p.vs.h + c.seq.k_row0 * p.vs.r;

  for (int e = tid; e < kGRows * D; e += kGThreads) {
    const int r = e / D, d = e % D;
    const int64_t i = m0 + r;
    sQ[e] = i < c.seq.lq ? load_any(p.q, qb + i * p.qs.r + d, p.dtype) : 0.f;
  }

  float m[4], l[4], acc[4][kGDPerLane];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int k = 0; k < kGDPerLane; ++k) acc[r][k] = 0.f;
  }

  int64_t j0, j1;
  fa__band_cols(&c.bd, m0, m0 + kGRows, &j0, &j1);
  for (int64_t n0 = j0 - (j0 % kGKeys); n0 < j1; n0 += kGKeys) {
    __syncthreads();  // previous tile fully consumed (and sQ written, first time)
    for (int e = tid; e < kGKeys * D; e += kGThreads) {
      const int r = e / D, d = e % D;
      const int64_t j = n0 + r;
      sK[r * (D + 1) + d] = j < c.seq.lk ? load_any(p.k, kb + j * p.ks.r + d, p.dtype) : 0.f;
    }
    for (int e = tid; e < kGKeys * Dv; e += kGThreads) {
      const int r = e / Dv, d = e % Dv;
      const int64_t j = n0 + r;
      sV[e] = j < c.seq.lk ? load_any(p.v, vb + j * p.vs.r + d, p.dtype) : 0.f;
    }
    __syncthreads();

    const int64_t j = n0 + lane;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int rl = warp * 4 + r;
      const int64_t i = m0 + rl;
      float dot = 0.f;
      for (int d = 0; d < D; ++d) dot = fmaf(sQ[rl * D + d], sK[lane * (D + 1) + d], dot);
      float capped;
      const float x = score_full(p, c, dot, i, j, &capped);
      float mx = x;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mnew = fmaxf(m[r], mx);
      const float muse = mnew == -INFINITY ? 0.f : mnew;
      const float alpha = exp2f(m[r] - muse);
      const float pe = x == -INFINITY ? 0.f : exp2f(x - muse);
      float sum = pe;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l[r] = l[r] * alpha + sum;
      m[r] = mnew;
      float pv = pe;
      if (p.has_dropout && pe != 0.f && !keep_one(p, c, i, j)) pv = 0.f;
#pragma unroll
      for (int k = 0; k < kGDPerLane; ++k) acc[r][k] *= alpha;
      for (int jj = 0; jj < kGKeys; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, pv, jj);
#pragma unroll
        for (int k = 0; k < kGDPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < Dv) acc[r][k] = fmaf(pj, sV[jj * Dv + d], acc[r][k]);
        }
      }
    }
  }

  const int64_t ob = c.seq.bidx * p.os.b + h * p.os.h + c.seq.q_row0 * p.os.r;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = m0 + warp * 4 + r;
    if (i >= rows) continue;
    const float inv = l[r] == 0.f ? 0.f : p.dscale / l[r];  // NaN scores: NaN stays NaN
#pragma unroll
    for (int k = 0; k < kGDPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < Dv) store_any(p.o, ob + i * p.os.r + d, p.dtype, acc[r][k] * inv);
    }
    if (p.lse && lane == 0) {
      const float lse = l[r] == 0.f ? -INFINITY : m[r] * kLn2 + logf(l[r]);
      p.lse[c.seq.bidx * p.lses.b + h * p.lses.h + (c.seq.q_row0 + i) * p.lses.r] = lse;
    }
  }
}

}  // namespace
}  // namespace fa_cuda

fa_status fa__cuda_generic_fwd(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using namespace fa_cuda;
  const size_t smem = sizeof(float) * (kGRows * p.D + kGKeys * (p.D + 1) + kGKeys * p.Dv);
  FA_CUDA_TRY(fa__cuda_smem_optin(generic_fwd_kernel, smem), "generic forward: shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, kGRows, "generic forward");
  generic_fwd_kernel<<<grid, kGThreads, smem, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("generic forward kernel launch");
  return FA_OK;
}
