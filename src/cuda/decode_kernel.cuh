// The split-KV decode kernel (see decode.cuh for the design) and its launch
// template, instantiated per dtype in decode_{bf16,f16,f32}.cu.
#ifndef FA_CUDA_DECODE_KERNEL_CUH
#define FA_CUDA_DECODE_KERNEL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "../rules/kv_address.h"
#include "../rules/score.h"
#include "../rules/visibility.h"
#include "decode.cuh"
#include "launch.cuh"
#include "mma.cuh"

namespace fa_dec {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 8 consecutive elements of the head dim as f32, from shared memory.
template <typename T>
struct chunk8;
template <>
struct chunk8<__nv_bfloat16> {
  static __device__ __forceinline__ void get(const __nv_bfloat16 *s, float f[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(s);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      f[2 * t] = __uint_as_float(w[t] << 16);
      f[2 * t + 1] = __uint_as_float(w[t] & 0xffff0000u);
    }
  }
};
template <>
struct chunk8<__half> {
  static __device__ __forceinline__ void get(const __half *s, float f[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(s);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      __half2 h;
      memcpy(&h, &w[t], 4);
      const float2 x = __half22float2(h);
      f[2 * t] = x.x;
      f[2 * t + 1] = x.y;
    }
  }
};
template <>
struct chunk8<float> {
  static __device__ __forceinline__ void get(const float *s, float f[8]) {
    const float4 a = *reinterpret_cast<const float4 *>(s), b = *reinterpret_cast<const float4 *>(s + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_f32(float x) {
  return x;
}
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float from_f32(float x) {
  return x;
}

// Sums C values held by each lane over the lanes li ^ OFF, li ^ OFF/2, ...,
// 1 (a group of 2 OFF lanes), halving: while C > 1 a lane keeps the upper
// half if its OFF bit is set (else the lower) and adds the partner's copy of
// that half; afterwards the remaining values are summed by plain butterfly
// steps. Indices are template constants so that v stays in registers.
template <int C, int OFF>
__device__ __forceinline__ void halving_sum(float *v, int li) {
  if constexpr (OFF > 0) {
    if constexpr (C > 1) {
      const bool up = (li & OFF) != 0;
#pragma unroll
      for (int i = 0; i < C / 2; ++i) {
        const float mine = up ? v[C / 2 + i] : v[i], theirs = up ? v[i] : v[C / 2 + i];
        v[i] = mine + __shfl_xor_sync(0xffffffffu, theirs, OFF);
      }
      halving_sum<C / 2, OFF / 2>(v, li);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], OFF);
      halving_sum<1, OFF / 2>(v, li);
    }
  }
}

template <typename T, int KD, int RB>
struct cfg {
  static constexpr int LG = KD / 8;                      // lanes of a key group
  static constexpr int NG = kThreads / LG;               // key groups per block
  static constexpr int KPG = RB >= 8 ? 2 : 4;            // keys each key group takes from a tile
  static constexpr int BK = NG * KPG;                    // keys per tile
  static constexpr int STAGES = sizeof(T) == 4 ? 2 : 4;  // 16 KiB (f32: 32 KiB) per stage
  static constexpr int UPR = KD * (int)sizeof(T) / 16;   // 16-byte units per row
  static constexpr int UPT = BK * UPR / kThreads;        // units per thread per K (or V) tile
  static constexpr size_t stage_bytes = 2ull * BK * KD * sizeof(T);
  static constexpr size_t pipe_bytes = STAGES * stage_bytes;
  static constexpr size_t merge_bytes = (size_t)NG * RB * (KD + 2) * sizeof(float);
  static constexpr size_t q_bytes = (size_t)RB * KD * sizeof(float);
  static constexpr int NV = KPG * RB;  // scores a key group makes per tile
  static constexpr size_t red_bytes = (size_t)NG * NV * sizeof(float);
  static constexpr size_t smem = (pipe_bytes > merge_bytes ? pipe_bytes : merge_bytes) + q_bytes + red_bytes;
  static_assert(kThreads % UPR == 0, "a thread's units share one column");
  static_assert(BK * UPR % kThreads == 0, "whole units per thread");
};

template <typename T, int KD, int RB>
__global__ void __launch_bounds__(kThreads) decode_kernel(const fa__dec_params p) {
  using C = cfg<T, KD, RB>;
  constexpr int LG = C::LG, BK = C::BK, STAGES = C::STAGES, UPR = C::UPR, UPT = C::UPT, kKeysPerGroup = C::KPG;
  extern __shared__ __align__(16) unsigned char smem[];
  T *pipe = reinterpret_cast<T *>(smem);
  float *qs = reinterpret_cast<float *>(smem + (C::pipe_bytes > C::merge_bytes ? C::pipe_bytes : C::merge_bytes));
  float *red = qs + RB * KD;  // [NG][NV]: each key group's reduced scores of the tile

  const int tid = threadIdx.x;
  int64_t x = blockIdx.x;
  const int rb = static_cast<int>(x % p.nrb);
  x /= p.nrb;
  const int sp = static_cast<int>(x % p.nsplit);
  x /= p.nsplit;
  const int64_t kvh = x % p.Hkv, b = x / p.Hkv;

  // this sequence's band and this split's keys
  const int64_t len = p.cache_seqlens ? fa__dec_clamp(p.cache_seqlens[b], p.bounds.max_len) : p.fixed_len;
  const int64_t lk = len + p.L_new;
  fa__band bd;
  bd.lq = p.Lq;
  bd.lk = lk;
  bd.left = p.wl;
  bd.right = p.wr;
  bd.diag_shift = p.top_left ? 0 : lk - p.Lq;
  int64_t jlo, jhi;
  fa__band_cols(&bd, 0, p.Lq, &jlo, &jhi);
  const int64_t span = jhi > jlo ? jhi - jlo : 0;
  int64_t chunk = (span + p.nsplit - 1) / p.nsplit;
  chunk = (chunk + BK - 1) / BK * BK;
  const int64_t j0 = jlo + sp * chunk < jhi ? jlo + sp * chunk : jhi;
  const int64_t j1 = j0 + chunk < jhi ? j0 + chunk : jhi;
  const int ntiles = static_cast<int>((j1 - j0 + BK - 1) / BK);

  // K/V tile loads: thread's units sit in column cu of rows r0 + i * (kThreads / UPR)
  const int cu = tid % UPR, r0 = tid / UPR;
  constexpr int EPU = 16 / static_cast<int>(sizeof(T));  // elements per unit
  const bool kcol = cu * EPU < p.D, vcol = cu * EPU < p.Dv;
  const T *kbase = static_cast<const T *>(p.k) + kvh * p.ks[1] + cu * EPU;
  const T *vbase = static_cast<const T *>(p.v) + kvh * p.vs[1] + cu * EPU;
  const uint32_t pipe_s = static_cast<uint32_t>(__cvta_generic_to_shared(pipe));
  // Where the thread's rows of the next tile to issue live (kv_address.h's
  // rule: page block_table[b][j / page_size], row j % page_size), found one
  // tile ahead so that the block-table reads are in flight during a tile's
  // arithmetic: one 32-bit division per tile, then whole pages stepped over.
  const bool paged = p.map.block_table != nullptr;
  const int32_t *bt_row = paged ? p.map.block_table + b * p.map.bt_stride : nullptr;
  const uint32_t psz = static_cast<uint32_t>(p.map.page_size);
  int32_t pg[UPT], rw[UPT];
  auto locate = [&](int t) {
    const int64_t jt = j0 + static_cast<int64_t>(t) * BK;
    if (!paged) {
#pragma unroll
      for (int i = 0; i < UPT; ++i) {
        pg[i] = static_cast<int32_t>(b);
        rw[i] = static_cast<int32_t>(jt + r0 + i * (kThreads / UPR));
      }
      return;
    }
    const uint32_t j = static_cast<uint32_t>(jt < j1 ? jt : 0);
    const uint32_t idx0 = j / psz, row0 = j - idx0 * psz;
#pragma unroll
    for (int i = 0; i < UPT; ++i) {
      uint32_t row = row0 + static_cast<uint32_t>(r0 + i * (kThreads / UPR)), idx = idx0;
      while (row >= psz) {
        row -= psz;
        ++idx;
      }
      const bool ok = jt + r0 + i * (kThreads / UPR) < j1;
      pg[i] = ok ? static_cast<int32_t>(fa__dec_clamp(__ldg(bt_row + idx), p.bounds.pages - 1)) : 0;
      rw[i] = static_cast<int32_t>(row);
    }
  };
  auto issue = [&](int t) {
    if (t < ntiles) {
      const int st = t % STAGES;
      const uint32_t ks = pipe_s + static_cast<uint32_t>(st * C::stage_bytes);
      const uint32_t vs = ks + static_cast<uint32_t>(BK * KD * sizeof(T));
      const int64_t jt = j0 + static_cast<int64_t>(t) * BK;
#pragma unroll
      for (int i = 0; i < UPT; ++i) {
        const int row = r0 + i * (kThreads / UPR);
        const bool ok = jt + row < j1;
        const int64_t ko = ok ? pg[i] * p.ks[0] + rw[i] * p.ks[2] : 0;
        const int64_t vo = ok ? pg[i] * p.vs[0] + rw[i] * p.vs[2] : 0;
        const uint32_t off = static_cast<uint32_t>((row * UPR + cu) * 16);
        fa_cuda::cp_async16(ks + off, kbase + ko, ok && kcol ? 16 : 0);
        fa_cuda::cp_async16(vs + off, vbase + vo, ok && vcol ? 16 : 0);
      }
      if (t + 1 < ntiles) locate(t + 1);
    }
    fa_cuda::cp_async_commit();
  };
  locate(0);
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) issue(t);

  // query rows r = rb * RB + rr (head kvh * group + r / Lq, row r % Lq): rotated at
  // cache_seqlens[b] + i, scaled, f32 in shared memory
  const int64_t pos0 = len;
  for (int e = tid; e < RB * KD; e += kThreads) {
    const int rr = e / KD, d = e % KD, r = rb * RB + rr;
    float v = 0.f;
    if (r < p.R && d < p.D) {
      const int64_t h = kvh * p.group + r / p.Lq, i = r % p.Lq;
      const T *qrow = static_cast<const T *>(p.q) + b * p.qs[0] + h * p.qs[1] + i * p.qs[2];
      v = to_f32(qrow[d]);
      if (p.rot_cos && d < p.rot_dim) {
        const int half = p.rot_dim / 2;
        const int64_t at = fa__dec_clamp(pos0 + i, p.bounds.rot_len - 1);
        const float *cr = p.rot_cos + at * half, *sr = p.rot_sin + at * half;
        if (p.rot_interleaved) {
          const int t = d / 2;
          v = (d & 1) ? to_f32(qrow[d - 1]) * sr[t] + v * cr[t] : v * cr[t] - to_f32(qrow[d + 1]) * sr[t];
        } else if (d < half) {
          v = v * cr[d] - to_f32(qrow[d + half]) * sr[d];
        } else {
          v = to_f32(qrow[d - half]) * sr[d - half] + v * cr[d - half];
        }
      }
      v *= p.qscale;
    }
    qs[e] = v;
  }
  __syncthreads();
  const int li = tid % LG, g = tid / LG;
  float q[RB][8], acc[RB][8], m[RB], l[RB], slope[RB];
  int64_t irow[RB];
#pragma unroll
  for (int rr = 0; rr < RB; ++rr) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[rr][e] = qs[rr * KD + li * 8 + e];
      acc[rr][e] = 0.f;
    }
    m[rr] = -INFINITY;
    l[rr] = 0.f;
    const int r = rb * RB + rr;
    irow[rr] = r % p.Lq;
    slope[rr] = p.alibi && r < p.R ? p.alibi[kvh * p.group + r / p.Lq] : 0.f;
  }

  for (int t = 0; t < ntiles; ++t) {
    fa_cuda::cp_async_wait<STAGES - 2>();
    __syncthreads();
    issue(t + STAGES - 1);
    const T *ks = pipe + (t % STAGES) * (C::stage_bytes / sizeof(T));
    const T *vs = ks + BK * KD;
    const int64_t jt = j0 + static_cast<int64_t>(t) * BK;
    const bool full = jt + BK <= j1 && fa__band_tile_full(&bd, 0, p.Lq, jt, jt + BK);

    float s[kKeysPerGroup][RB];
#pragma unroll
    for (int k = 0; k < kKeysPerGroup; ++k) {
      float kf[8];
      chunk8<T>::get(ks + (g * kKeysPerGroup + k) * KD + li * 8, kf);
#pragma unroll
      for (int rr = 0; rr < RB; ++rr) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(q[rr][e], kf[e], d);
        s[k][rr] = d;
      }
    }
    // Sum the NV partial dot products over the group's LG lanes by halving:
    // at each step a lane keeps half of its values and adds its partner's
    // half, so the first steps move NV/2, NV/4, ... values (NV - 1 shuffles
    // in all where NV <= LG) instead of NV per step; then every lane reads
    // all NV sums back from shared memory (4 query rows x 4 keys: 15
    // shuffles instead of 64).
    {
      constexpr int NV = C::NV, W = NV < LG ? NV : LG, CV = NV / W;
      float v[NV];
#pragma unroll
      for (int k = 0; k < kKeysPerGroup; ++k)
#pragma unroll
        for (int rr = 0; rr < RB; ++rr) v[k * RB + rr] = s[k][rr];
      halving_sum<NV, LG / 2>(v, li);
      // lane li now holds the sums of values (li / (LG / W)) * CV + 0 .. CV - 1
      float *mine = red + g * NV + (li / (LG / W)) * CV;
#pragma unroll
      for (int i = 0; i < CV; ++i) mine[i] = v[i];
      __syncwarp();
      const float *all = red + g * NV;
#pragma unroll
      for (int k = 0; k < kKeysPerGroup; ++k)
#pragma unroll
        for (int rr = 0; rr < RB; ++rr) s[k][rr] = all[k * RB + rr];
    }

    if (!full || p.elementwise) {
#pragma unroll
      for (int k = 0; k < kKeysPerGroup; ++k) {
        const int64_t j = jt + g * kKeysPerGroup + k;
#pragma unroll
        for (int rr = 0; rr < RB; ++rr) {
          if (!full && !(j < j1 && fa__band_visible(&bd, irow[rr], j))) {
            s[k][rr] = -INFINITY;
          } else if (p.elementwise) {
            float x = fa__softcap_f(s[k][rr], p.softcap);
            if (p.alibi) x += fa__alibi_f(slope[rr], fa__band_diag(&bd, irow[rr]), j);
            s[k][rr] = x * kLog2e;
          }
        }
      }
    }

    float pr[kKeysPerGroup][RB];
#pragma unroll
    for (int rr = 0; rr < RB; ++rr) {
      float mt = m[rr];
#pragma unroll
      for (int k = 0; k < kKeysPerGroup; ++k) mt = fmaxf(mt, s[k][rr]);
      if (mt == -INFINITY) {
#pragma unroll
        for (int k = 0; k < kKeysPerGroup; ++k) pr[k][rr] = 0.f;
        continue;
      }
      const float f = m[rr] == -INFINITY ? 0.f : exp2f(m[rr] - mt);
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kKeysPerGroup; ++k) {
        pr[k][rr] = exp2f(s[k][rr] - mt);
        sum += pr[k][rr];
      }
      l[rr] = l[rr] * f + sum;
      m[rr] = mt;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[rr][e] *= f;
    }
#pragma unroll
    for (int k = 0; k < kKeysPerGroup; ++k) {
      float vf[8];
      chunk8<T>::get(vs + (g * kKeysPerGroup + k) * KD + li * 8, vf);
#pragma unroll
      for (int rr = 0; rr < RB; ++rr)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[rr][e] = fmaf(pr[k][rr], vf[e], acc[rr][e]);
    }
  }

  // the key groups' states merged in group order; o = acc / l, lse = m ln 2 + log l
  fa_cuda::cp_async_wait<0>();
  __syncthreads();
  float *ms = reinterpret_cast<float *>(smem);
  float *ls = ms + C::NG * RB;
  float *as = ls + C::NG * RB;
#pragma unroll
  for (int rr = 0; rr < RB; ++rr) {
    if (li == 0) {
      ms[g * RB + rr] = m[rr];
      ls[g * RB + rr] = l[rr];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) as[(g * RB + rr) * KD + li * 8 + e] = acc[rr][e];
  }
  __syncthreads();
  const int64_t item = b * p.Hkv + kvh;
  for (int e = tid; e < RB * p.Dv; e += kThreads) {
    const int rr = e / p.Dv, d = e % p.Dv, r = rb * RB + rr;
    if (r >= p.R) continue;
    float M = -INFINITY;
    for (int gg = 0; gg < C::NG; ++gg) M = fmaxf(M, ms[gg * RB + rr]);
    float L = 0.f, O = 0.f;
    if (M != -INFINITY)
      for (int gg = 0; gg < C::NG; ++gg) {
        const float mg = ms[gg * RB + rr];
        if (mg == -INFINITY) continue;
        const float w = exp2f(mg - M);
        L += w * ls[gg * RB + rr];
        O += w * as[(gg * RB + rr) * KD + d];
      }
    const float o = L > 0.f ? O / L : 0.f;
    const float lse = L > 0.f ? M * kLn2 + logf(L) : -INFINITY;
    if (p.nsplit == 1) {
      const int64_t h = kvh * p.group + r / p.Lq, i = r % p.Lq;
      static_cast<T *>(p.o)[b * p.os[0] + h * p.os[1] + i * p.os[2] + d] = from_f32<T>(o);
      if (d == 0 && p.lse) p.lse[b * p.lses[0] + h * p.lses[1] + i * p.lses[2]] = lse;
    } else {
      const int64_t row = (item * p.nsplit + sp) * p.R + r;
      p.part_o[row * p.Dv + d] = o;
      if (d == 0) p.part_lse[row] = lse;
    }
  }
}

template <typename T, int KD, int RB>
fa_status launch_one(const fa__dec_params &p, int64_t blocks, cudaStream_t s, fa__err *err) {
  using C = cfg<T, KD, RB>;
  auto kern = decode_kernel<T, KD, RB>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kern, C::smem), "raising the decode kernel's shared-memory limit");
  kern<<<static_cast<unsigned>(blocks), kThreads, C::smem, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("launching the decode kernel");
  return FA_OK;
}

template <typename T, int KD, int RB>
int occupancy_one() {
  using C = cfg<T, KD, RB>;
  auto kern = decode_kernel<T, KD, RB>;
  int n = 0;
  if (fa__cuda_smem_optin(kern, C::smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, kThreads, C::smem) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <typename T, int KD>
fa_status launch_kd(const fa__dec_params &p, int rb, int64_t blocks, cudaStream_t s, fa__err *err) {
  switch (rb) {
    case 1: return launch_one<T, KD, 1>(p, blocks, s, err);
    case 4: return launch_one<T, KD, 4>(p, blocks, s, err);
    default: return launch_one<T, KD, 8>(p, blocks, s, err);
  }
}

template <typename T>
fa_status launch(const fa__dec_params &p, int kd, int rb, int64_t blocks, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_kd<T, 64>(p, rb, blocks, s, err);
    case 128: return launch_kd<T, 128>(p, rb, blocks, s, err);
    default: return launch_kd<T, 256>(p, rb, blocks, s, err);
  }
}

template <typename T, int KD>
int occupancy_kd(int rb) {
  return rb == 1 ? occupancy_one<T, KD, 1>() : rb == 4 ? occupancy_one<T, KD, 4>() : occupancy_one<T, KD, 8>();
}

template <typename T>
int occupancy(int kd, int rb) {
  return kd == 64 ? occupancy_kd<T, 64>(rb) : kd == 128 ? occupancy_kd<T, 128>(rb) : occupancy_kd<T, 256>(rb);
}

}  // namespace fa_dec

#define FA_DECODE_INSTANTIATE(NAME, T)                                                                             \
  fa_status fa__cuda_decode_launch_##NAME(const fa__dec_params &p, int kd, int rb, int64_t blocks, cudaStream_t s, \
                                          fa__err *err) {                                                          \
    return fa_dec::launch<T>(p, kd, rb, blocks, s, err);                                                           \
  }                                                                                                                \
  int fa__cuda_decode_occupancy_##NAME(int kd, int rb) {                                                           \
    return fa_dec::occupancy<T>(kd, rb);                                                                           \
  }

#endif
