// The backward's row kernels around its main kernels, memory-bound both:
//   dsum_kernel        dsum = rowsum(dO * O) (the D of the paper), the
//                      warp-specialized kernel's padded copy of LSE and dsum,
//                      and zeros in the f32 dQ accumulator where the call has
//                      one (instead of a separate memset: one pass less);
//   dq_convert_kernel  dq = scale * dq_acc in q's dtype.
// Each warp takes 32 / g rows at once, g lanes a row (the row's 8-element
// chunks rounded up to a power of two, at most 32), and a lane moves 16
// bytes per access where the rows allow it (bf16 / f16, 16-byte aligned
// rows): a warp instruction then moves 512 bytes instead of the 64 of a
// 2-byte element per lane, which left these kernels at a fifth to a half
// of the memory bandwidth (measured on an H100 at D = 128, L = 2048:
// 193 us dsum + 40 us memset + 127 us convert against 1293 us of the main
// kernel; bench/results/2026-12-06-h100-bwd-rows.txt). Other dtypes and
// strides take the same loops one element at a time.
#include "launch.cuh"
#include "rules.cuh"

namespace fa_cuda {
namespace {

constexpr int kT = 128, kWarps = kT / 32;

// Lanes per row (g, a power of two <= 32) for rows of n elements taken
// 8 at a time, and rows per warp step.
struct row_lanes {
  int g, rows;
};
__host__ __device__ inline row_lanes row_lanes_of(int64_t n) {
  int g = 1;
  while (g < 32 && g * 8 < n) g *= 2;
  return {g, 32 / g};
}

// Whether a [b, h, rows, n] tensor of 16-bit elements has 16-byte aligned
// rows of whole 16-byte chunks.
__device__ __forceinline__ bool vec16_ok(const void *x, const fa__cuda_strides &s, int dtype, int64_t n) {
  return (dtype == FA_BF16 || dtype == FA_F16) && n % 8 == 0 && !(reinterpret_cast<uintptr_t>(x) & 15) && !(s.b & 7) &&
         !(s.h & 7) && !(s.r & 7);
}

// 8 consecutive 16-bit elements at x + idx (16-byte aligned) as f32.
__device__ __forceinline__ void load8(const void *x, int64_t idx, int dtype, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(x) + idx);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (dtype == FA_BF16) {
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      __half2 h;
      memcpy(&h, &w[k], 4);
      const float2 v = __half22float2(h);
      f[2 * k] = v.x;
      f[2 * k + 1] = v.y;
    }
  }
}

// A sequence-head's rows, blocks striding over them (the grid's y is capped
// at 65535 by rows_blocks): the first row of this warp's first step, and the
// step.
__device__ __forceinline__ int64_t first_row(int rows_per_warp) {
  return (static_cast<int64_t>(blockIdx.y) * kWarps + (threadIdx.x >> 5)) * rows_per_warp;
}
__device__ __forceinline__ int64_t row_step(int rows_per_warp) {
  return static_cast<int64_t>(gridDim.y) * kWarps * rows_per_warp;
}

__global__ void __launch_bounds__(kT) dsum_kernel(const fa__cuda_params p) {
  const int lane = threadIdx.x & 31;
  const row_lanes rl = row_lanes_of(p.Dv > p.D ? p.Dv : p.D);
  const int sub = lane / rl.g, c0 = lane % rl.g;
  const int64_t bh = blockIdx.x, b = bh / p.Hq, h = bh % p.Hq;
  const fa__seq seq = fa__seq_get(b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
  const int64_t rows = p.varlen ? seq.lq : p.Lq;
  // with ws_stats the padded copy's rows past the sequence get zeros too:
  // padded layout up to its pitch; packed sequences share the rows, so each
  // writes its own up to the next one's (fa__cuda_ws_row0) and the last one
  // the rest of the pitch
  const int64_t ws0 = fa__cuda_ws_row0(p, b, seq.q_row0);
  const int64_t walk = !p.ws_stats ? rows
                       : p.cu_q    ? (b == p.B - 1 ? p.ws_pitch : fa__cuda_ws_row0(p, b + 1, seq.q_row0 + seq.lq)) - ws0
                                   : p.ws_pitch;
  const bool vec = vec16_ok(p.o, p.os, p.dtype, p.Dv) && vec16_ok(p.dout, p.dos, p.dtype, p.Dv);
  float *dq_acc = p.dq_acc ? p.dq_acc + ((seq.bidx * p.Hq + h) * p.Lq_rows + seq.q_row0) * p.D : nullptr;
  // the loop's bound is the same for the whole warp: the shuffles need every lane
  for (int64_t i0 = first_row(rl.rows); i0 < walk; i0 += row_step(rl.rows)) {
    const int64_t i = i0 + sub;
    float s = 0.f;
    if (i < seq.lq) {
      const int64_t ob = seq.bidx * p.os.b + h * p.os.h + (seq.q_row0 + i) * p.os.r;
      const int64_t db = seq.bidx * p.dos.b + h * p.dos.h + (seq.q_row0 + i) * p.dos.r;
      if (vec) {
        for (int c = c0; c * 8 < p.Dv; c += rl.g) {
          float o[8], d[8];
          load8(p.o, ob + c * 8, p.dtype, o);
          load8(p.dout, db + c * 8, p.dtype, d);
#pragma unroll
          for (int k = 0; k < 8; ++k) s += o[k] * d[k];
        }
      } else {
        for (int e = c0; e < p.Dv; e += rl.g) s += load_any(p.o, ob + e, p.dtype) * load_any(p.dout, db + e, p.dtype);
      }
    }
    if (dq_acc && i < rows) {
      float *z = dq_acc + i * p.D;
      if (p.D % 4 == 0)
        for (int c = c0; c * 4 < p.D; c += rl.g)
          *reinterpret_cast<float4 *>(z + c * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
      else
        for (int e = c0; e < p.D; e += rl.g) z[e] = 0.f;
    }
    for (int o = rl.g / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (c0 != 0 || i >= walk) continue;
    if (i < rows) p.dsum[(seq.bidx * p.Hq + h) * p.Lq_rows + seq.q_row0 + i] = s;
    if (p.ws_stats) {
      float *st = p.ws_stats + (seq.bidx * p.Hq + h) * 2 * p.ws_pitch + ws0;
      st[i] = i < seq.lq ? p.lse[seq.bidx * p.lses.b + h * p.lses.h + (seq.q_row0 + i) * p.lses.r] : 0.f;
      st[p.ws_pitch + i] = s;
    }
  }
}

// dq = scale * dq_acc for the rows of each sequence (rows past the last
// packed sequence are left alone; padded rows get the zeros they hold).
__global__ void __launch_bounds__(kT) dq_convert_kernel(const fa__cuda_params p) {
  const int lane = threadIdx.x & 31;
  const row_lanes rl = row_lanes_of(p.D);
  const int sub = lane / rl.g, c0 = lane % rl.g;
  const int64_t bh = blockIdx.x, b = bh / p.Hq, h = bh % p.Hq;
  const fa__seq seq = fa__seq_get(b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
  const int64_t rows = p.varlen ? seq.lq : p.Lq;
  const bool vec = vec16_ok(p.dq, p.dqs, p.dtype, p.D);
  for (int64_t i = first_row(rl.rows) + sub; i < rows; i += row_step(rl.rows)) {
    const int64_t row = seq.q_row0 + i;
    const float *acc = p.dq_acc + ((seq.bidx * p.Hq + h) * p.Lq_rows + row) * p.D;
    const int64_t dqb = seq.bidx * p.dqs.b + h * p.dqs.h + row * p.dqs.r;
    if (vec) {
      for (int c = c0; c * 8 < p.D; c += rl.g) {
        const float4 lo = *reinterpret_cast<const float4 *>(acc + c * 8);
        const float4 hi = *reinterpret_cast<const float4 *>(acc + c * 8 + 4);
        const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float a = f[2 * k] * p.scale, e = f[2 * k + 1] * p.scale;
          if (p.dtype == FA_BF16) {
            const __nv_bfloat162 v = __floats2bfloat162_rn(a, e);
            memcpy(&w[k], &v, 4);
          } else {
            const __half2 v = __floats2half2_rn(a, e);
            memcpy(&w[k], &v, 4);
          }
        }
        *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p.dq) + dqb + c * 8) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
      for (int e = c0; e < p.D; e += rl.g) store_any(p.dq, dqb + e, p.dtype, acc[e] * p.scale);
    }
  }
}

// A row kernel's grid: (sequences x heads, row blocks of kWarps warps of
// `rows_per_warp` rows), the row blocks capped at CUDA's 65535 (the kernels
// stride over the rest).
dim3 rows_blocks(const fa__cuda_params &p, int64_t rows, int rows_per_warp) {
  const int64_t per_block = static_cast<int64_t>(kWarps) * rows_per_warp;
  const int64_t blocks = (rows + per_block - 1) / per_block;
  return dim3(static_cast<unsigned>(p.B * p.Hq), static_cast<unsigned>(blocks < 1       ? 1
                                                                       : blocks < 65535 ? blocks
                                                                                        : 65535));
}

}  // namespace
}  // namespace fa_cuda

using namespace fa_cuda;

fa_status fa__cuda_dsum(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  // (packed sequences: the kernel strides over the last one's tail)
  const int64_t rows = p.ws_stats && !p.cu_q ? p.ws_pitch : p.Lq;
  dsum_kernel<<<rows_blocks(p, rows, row_lanes_of(p.Dv > p.D ? p.Dv : p.D).rows), kT, 0, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("dsum kernel launch");
  return FA_OK;
}

fa_status fa__cuda_dq_convert(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  dq_convert_kernel<<<rows_blocks(p, p.Lq, row_lanes_of(p.D).rows), kT, 0, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("dq convert kernel launch");
  return FA_OK;
}
