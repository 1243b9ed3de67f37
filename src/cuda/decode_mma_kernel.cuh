// The split-KV decode kernel on tensor cores, for grouped queries (R = g *
// Lq >= 2 rows per kv head) in f16 / bf16 with head dims up to 128.
//
// Why a second kernel: on CUDA cores (decode_kernel.cuh) every key costs R
// dot products of D multiply-adds plus shuffle reductions, so with 4..8 rows
// per kv head the block issues instructions faster than it gets bytes and
// streams K/V at half the copy rate. Here the block's 16 rows form one
// m16 tile of mma.sync m16n8k16 (rows past R are zeros, never stored), so a
// key costs the same few instructions whatever R is:
//   - 4 warps; each tile of 64 keys is shared, warp w takes keys 16w..16w+15:
//     S (16 x 16) = Q Kᵀ from K with ldmatrix, P = exp2(S - m) kept in
//     registers as the A operand of O += P V (V through ldmatrix.trans), the
//     FlashAttention 2 register layout (mma.cuh);
//   - each warp runs its own online softmax over its keys; the 4 states merge
//     once at the end (store_merged), as the CUDA-core kernel's key groups do;
//   - tiles stream through a 3-stage cp.async ring (32 KiB per stage at D =
//     128: ~100 KiB per block, two blocks per multiprocessor) with mma.cuh's
//     swizzle, so ldmatrix reads are free of bank conflicts.
// Q is rounded to the dtype once (after rotary, the rotation's product is
// rounded as FlashAttention's rotary kernel rounds it) and the scale is
// applied to S in f32; P is rounded to the dtype for P V, as in the tiled
// kernels; l sums the unrounded P.
#ifndef FA_CUDA_DECODE_MMA_KERNEL_CUH
#define FA_CUDA_DECODE_MMA_KERNEL_CUH

#include "../rules/score.h"
#include "decode_parts.cuh"
#include "decode_trace.cuh"

namespace fa_dec {

template <typename T>
struct mma_tag;
template <>
struct mma_tag<__nv_bfloat16> {
  using type = fa_cuda::bf16_t;
};
template <>
struct mma_tag<__half> {
  using type = fa_cuda::f16_t;
};

template <typename T, int KD>
struct mma_cfg {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int RB = 16;           // rows per block: one m16 tile
  static constexpr int BK = 16 * kWarps;  // keys per tile: 16 per warp
  static constexpr int STAGES = KD <= 64 ? 6 : 3;
  using stream = kv_stream<T, KD, BK, STAGES, true>;
  static constexpr size_t merge_bytes = (size_t)kWarps * RB * (KD + 2) * sizeof(float);
  static constexpr size_t big = stream::bytes > merge_bytes ? stream::bytes : merge_bytes;
  static constexpr size_t q_bytes = (size_t)RB * KD * sizeof(T);
  static constexpr size_t smem = big + q_bytes;
  static_assert(KD == 64 || KD == 128, "the register tiles hold D <= 128");
  static_assert(smem >= merge_splits_min_smem(RB, KD), "the split merge fits in the ring");
};

template <typename T, int KD>
__global__ void __launch_bounds__(kThreads, 2) decode_mma_kernel(const fa__dec_params p) {
  using C = mma_cfg<T, KD>;
  using Tag = typename mma_tag<T>::type;
  constexpr int BK = C::BK, STAGES = C::STAGES, RB = C::RB, KS = KD / 16, NT = KD / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T *pipe = reinterpret_cast<T *>(smem);
  T *qs = reinterpret_cast<T *>(smem + C::big);

  trace_start();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // the block's keys and where its first rows lie (cache_seqlens, the block
  // table: nothing the append kernel writes) found while that kernel may
  // still run (launched as its programmatic dependent); the cache only after
  const block_work w = block_work_of(p, BK);
  typename C::stream kv;
  kv.init(p, w, pipe, tid);
  fa_cuda::pdl_wait();     // the kernel before (the call's append) is done: the cache is written
  fa_cuda::pdl_trigger();  // the split combine may launch; it waits for our end
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) kv.issue(t);

  // the block's 16 query rows, rotated, in the dtype, swizzled for ldmatrix
  // (every chunk of the thread loaded before any is stored: query_chunk)
  {
    query_chunks<T, RB, KD> qc;
    qc.load(p, w, tid);
    qc.each(tid, [&](int e, const float(&x)[8]) {
      alignas(16) T y[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) y[k] = from_f32<T>(x[k]);
      *reinterpret_cast<uint4 *>(qs + fa_cuda::swz<KD>(e / (KD / 8), e % (KD / 8) * 8)) =
          *reinterpret_cast<const uint4 *>(y);
    });
  }
  __syncthreads();
  uint32_t qa[KS][4];
#pragma unroll
  for (int k = 0; k < KS; ++k) fa_cuda::lds_a<KD>(qa[k], qs, 0, k * 16, lane);

  // lane holds rows g and g + 8 (h = 0, 1) of the tile, keys / columns 2t, 2t + 1 of each 8
  const int gr = lane >> 2, tq = lane & 3;
  float o[NT][4], m[2], l[2], slope[2];
  int64_t irow[2];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = w.rb * RB + gr + 8 * h;
    m[h] = -INFINITY;
    l[h] = 0.f;
    irow[h] = r % static_cast<int>(p.Lq);  // Lq <= R: 32-bit divisions
    slope[h] = p.alibi && r < p.R ? p.alibi[w.kvh * p.group + r / static_cast<int>(p.Lq)] : 0.f;
  }
  const fa__band bd = w.bd;

  for (int t = 0; t < w.ntiles; ++t) {
    fa_cuda::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (t == 0) trace_mark(kMarkFirstTile);
    kv.issue(t + STAGES - 1);
    const T *ks = kv.k_tile(pipe, t);
    const T *vs = kv.v_tile(pipe, t);
    const int64_t jt = w.j0 + static_cast<int64_t>(t) * w.step;
    const bool full = jt + BK <= w.j1 && fa__band_tile_full(&bd, 0, p.Lq, jt, jt + BK);

    // S[n][e]: key jw + 8n + 2tq + (e & 1) of row gr + 8 (e >> 1); even and
    // odd k-steps in separate accumulators, two chains of dependent mma
    // instead of one (the loop is latency-bound at two warps per scheduler)
    float s[2][4], s2[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = s2[n][e] = 0.f;
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      uint32_t b[4];
      fa_cuda::lds_b_nk<KD>(b, ks, warp * 16, k * 16, lane);
      float(*acc)[4] = k & 1 ? s2 : s;
      Tag::mma(acc[0], qa[k], b[0], b[1]);
      Tag::mma(acc[1], qa[k], b[2], b[3]);
    }
    const int64_t jw = jt + warp * 16;
    if (full && !p.elementwise) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = (s[n][e] + s2[n][e]) * p.qscale;
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int64_t j = jw + 8 * n + 2 * tq + (e & 1);
          float x = (s[n][e] + s2[n][e]) * p.qscale;
          if (!full && !(j < w.j1 && fa__band_visible(&bd, irow[h], j))) {
            x = -INFINITY;
          } else if (p.elementwise) {
            x = fa__softcap_f(x, p.softcap);
            if (p.alibi) x += fa__alibi_f(slope[h], fa__band_diag(&bd, irow[h]), j);
            x *= kLog2e;
          }
          s[n][e] = x;
        }
    }

    // online softmax per row over the warp's 16 keys (the 4 lanes of a row
    // agree on the max; each keeps its own part of l until the end). Once
    // the running max has settled, as it soon does over a long cache, no row
    // of the warp needs O rescaled and the 2 * D / 8 multiplies are skipped.
    float f[2] = {1.f, 1.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mt = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
      mt = fmaxf(mt, m[h]);
      if (mt == -INFINITY) continue;  // nothing visible yet: s all -inf, P = 0 below
      f[h] = mt == m[h] ? 1.f : fa_cuda::fast_exp2(m[h] - mt);
      m[h] = mt;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[n][e] = fa_cuda::fast_exp2(s[n][e] - mt);
          sum += s[n][e];
        }
      l[h] = l[h] * f[h] + sum;
    }
    if (__any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f)) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= f[0];
        o[n][1] *= f[0];
        o[n][2] *= f[1];
        o[n][3] *= f[1];
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (m[h] == -INFINITY) s[0][2 * h] = s[0][2 * h + 1] = s[1][2 * h] = s[1][2 * h + 1] = 0.f;

    // O += P V over the warp's 16 keys: P's C layout is the A layout
    uint32_t a[4];
    a[0] = Tag::pack(s[0][0], s[0][1]);
    a[1] = Tag::pack(s[0][2], s[0][3]);
    a[2] = Tag::pack(s[1][0], s[1][1]);
    a[3] = Tag::pack(s[1][2], s[1][3]);
#pragma unroll
    for (int n = 0; n < KD / 16; ++n) {
      uint32_t b[4];
      fa_cuda::lds_b_kn<KD>(b, vs, warp * 16, n * 16, lane);
      Tag::mma(o[2 * n], a, b[0], b[1]);
      Tag::mma(o[2 * n + 1], a, b[2], b[3]);
    }
  }

  trace_mark(kMarkLoopEnd);
  // the warps' states merged in warp order (store_merged)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  fa_cuda::cp_async_wait<0>();
  __syncthreads();
  float *ms = reinterpret_cast<float *>(smem);
  float *ls = ms + C::kWarps * RB;
  float *as = ls + C::kWarps * RB;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = warp * RB + gr + 8 * h;
    if (tq == 0) {
      ms[rr] = m[h];
      ls[rr] = l[h];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      as[rr * KD + 8 * n + 2 * tq] = o[n][2 * h];
      as[rr * KD + 8 * n + 2 * tq + 1] = o[n][2 * h + 1];
    }
  }
  __syncthreads();
  trace_mark(kMarkStates);
  store_merged<T, C::kWarps, RB, KD>(p, w, ms, ls, as, tid);
  trace_mark(kMarkStored);
  finish_splits<T, RB, KD>(p, w, smem, C::smem, tid);  // splits: the last one merges them
  trace_mark(kMarkEnd);
}

}  // namespace fa_dec

#endif
