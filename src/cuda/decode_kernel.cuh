// The split-KV decode kernel on CUDA cores (see decode.cuh for the design):
// every row count, every dtype, every head dim; decode_mma_kernel.cuh takes
// grouped queries in f16 / bf16. Launched by decode_launch.cuh.
#ifndef FA_CUDA_DECODE_KERNEL_CUH
#define FA_CUDA_DECODE_KERNEL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "../rules/score.h"
#include "decode_parts.cuh"

namespace fa_dec {

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
  using stream = kv_stream<T, KD, BK, STAGES, false>;
  static constexpr size_t pipe_bytes = stream::bytes;
  static constexpr size_t merge_bytes = (size_t)NG * RB * (KD + 2) * sizeof(float);
  static constexpr size_t q_bytes = (size_t)RB * KD * sizeof(float);
  static constexpr int NV = KPG * RB;  // scores a key group makes per tile
  static constexpr size_t red_bytes = (size_t)NG * NV * sizeof(float);
  static constexpr size_t big = pipe_bytes > merge_bytes ? pipe_bytes : merge_bytes;
  static constexpr size_t smem = big + q_bytes + red_bytes;
  static_assert(smem >= merge_splits_min_smem(RB, KD), "the split merge fits in the block's shared memory");
};

template <typename T, int KD, int RB>
__global__ void __launch_bounds__(kThreads) decode_kernel(const fa__dec_params p) {
  using C = cfg<T, KD, RB>;
  constexpr int LG = C::LG, BK = C::BK, STAGES = C::STAGES, kKeysPerGroup = C::KPG;
  extern __shared__ __align__(128) unsigned char smem[];  // (as decode_mma_kernel declares it: one declaration a file)
  T *pipe = reinterpret_cast<T *>(smem);
  float *qs = reinterpret_cast<float *>(smem + C::big);
  float *red = qs + RB * KD;  // [NG][NV]: each key group's reduced scores of the tile

  const int tid = threadIdx.x;
  const block_work w = block_work_of(p, BK);  // as decode_mma_kernel: before the wait, nothing the append writes
  const int64_t j1 = w.j1;
  const int ntiles = w.ntiles;
  typename C::stream kv;
  kv.init(p, w, pipe, tid);
  fa_cuda::pdl_wait();     // the cache is written
  fa_cuda::pdl_trigger();  // the split combine (two-kernel merge) may launch
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) kv.issue(t);

  // query rows r = rb * RB + rr, rotated, scaled, f32 in shared memory
  // (every chunk of the thread loaded before any is stored: query_chunk)
  {
    query_chunks<T, RB, KD> qc;
    qc.load(p, w, tid);
    qc.each(tid, [&](int e, const float(&x)[8]) {
#pragma unroll
      for (int k = 0; k < 8; ++k) qs[e * 8 + k] = x[k] * p.qscale;
    });
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
    const int r = w.rb * RB + rr;
    irow[rr] = r % p.Lq;
    slope[rr] = p.alibi && r < p.R ? p.alibi[w.kvh * p.group + r / p.Lq] : 0.f;
  }
  const fa__band bd = w.bd;

  for (int t = 0; t < ntiles; ++t) {
    fa_cuda::cp_async_wait<STAGES - 2>();
    __syncthreads();
    kv.issue(t + STAGES - 1);
    const T *ks = kv.k_tile(pipe, t);
    const T *vs = kv.v_tile(pipe, t);
    const int64_t jt = w.j0 + static_cast<int64_t>(t) * w.step;
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
  store_merged<T, C::NG, RB, KD>(p, w, ms, ls, as, tid);
  finish_splits<T, RB, KD>(p, w, smem, C::smem, tid);  // splits: the last one merges them
}

}  // namespace fa_dec

#endif
