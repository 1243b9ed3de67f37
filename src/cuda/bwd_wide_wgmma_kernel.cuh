// Tensor-core backward for head-dim bucket 256 on Hopper (sm_90a): dK, dV
// and dQ (fused) on wgmma. A block owns kBN = 64 keys of one (sequence, kv
// head) and walks the query tiles of kBM = 64 rows that can see them, as
// bwd_wide_kernel.cuh (mma.sync) does. dK and dV of 64 keys x 256 columns
// are 128 f32 registers a thread over both warpgroups, so warpgroup wg keeps
// columns 128 wg .. + 127 of both. Per tile:
//   warpgroup 0: S^T = K Q^T    warpgroup 1: dP^T = V dO^T
//                               (64 keys x 64 queries over 256 each: the
//                               two products split without repeating one)
//   the halves cross through shared memory in fragment order (f32; thread i
//   of one warpgroup reads what thread i of the other held): warpgroup 0
//   gets dP^T of queries 0 .. 31, warpgroup 1 S^T of 32 .. 63, and each
//   makes P^T and dS^T of its 32 queries with bwd_tile.cuh's arithmetic,
//   exactly as the other kernels do, then stores them as [key][query]
//   both: dV += P^T dO, dK += dS^T Q   (their column half; A fragments by
//         ldmatrix, dO and Q N-major from shared memory)
//         dQ = dS K    (their column half in two 64 x 64 blocks: dS^T
//         M-major, K N-major, f32 reductions into dq_acc)
// Three block barriers a tile. Without fuse_dq (the default in both modes
// since 2026-12-07: backend.cu's wide_dq_apart) dQ is left to a dQ kernel
// run after this one (launch_bwd_wide_wgmma). kFull: every per-element
// option (bwd_p_ds); kArith (not with kFull): softcap and ALiBi only,
// p.arith_only (bwd_p_ds_arith), and with kTile those and one bias or mask
// (p.bwd_tile), read from global memory (score_global.cuh: no shared
// memory is left for a tile); kDrop, with or without kTile: dropout too
// (p.arith_drop, or p.bwd_tile with p.has_dropout: dropout_tile.cuh's keep
// bits, made while the products run).
#ifndef FA_CUDA_BWD_WIDE_WGMMA_KERNEL_CUH
#define FA_CUDA_BWD_WIDE_WGMMA_KERNEL_CUH

#include "bwd_tile.cuh"
#include "bwd_wgmma_step.cuh"
#include "score_global.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

struct bwd_wide_wgmma_cfg {
  static constexpr int kD = 256, kBN = 64, kBM = 64, kThreads = 256;
  // K, V; two stages of Q and dO; P^T and dS^T (16-bit); dP^T (f32); two
  // stages of LSE and dsum; 1 KiB to align the swizzled tiles to 1024 bytes
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(2 * kBN * kD + 4 * kBM * kD + 2 * kBN * kBM) +
                                       sizeof(float) * (size_t)(kBN * kBM + 4 * kBM) + 1024;
  static_assert(smem_bytes <= 227 * 1024, "an sm_90 block's shared memory");
};

// A 16 x 16 A fragment at (m0, k0) of a tile in swz_atoms layout with kRows
// rows (the m dimension), as lds_a reads a swz tile.
template <int kRows, typename T>
__device__ __forceinline__ void lds_a_atoms(uint32_t (&a)[4], const T *s, int m0, int k0, int lane) {
  ldmatrix_x4(a, smem_addr(s + swz_atoms<kRows>(m0 + (lane & 15), k0 + ((lane >> 4) << 3))));
}

template <typename E, bool kFull, bool kArith = false, int kTile = 0, bool kDrop = false>
__global__ void __launch_bounds__(256, 1) bwd_wide_wgmma_kernel(const fa__cuda_params p, const int fuse_dq) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = bwd_wide_wgmma_cfg;
  static_assert(!kDrop || kArith, "the keep bits go with the arithmetic form");
  constexpr int kD = cfg::kD, kBN = cfg::kBN, kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kMB = kBM / 8, kKS = kBM / 16;  // 8-query blocks of S^T; 16-query k steps
  constexpr int kMBh = kMB / 2;                 // a warpgroup's query half
  constexpr int kDh = kD / 2, kDBh = kDh / 8;   // a warpgroup's columns of dK, dV

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  T *sK = reinterpret_cast<T *>(smem);  // [kD / 64][kBN][64]
  T *sV = sK + kBN * kD;                // [kD / 64][kBN][64]
  T *sQ = sV + kBN * kD;                // [2][kD / 64][kBM][64]
  T *sdO = sQ + 2 * kBM * kD;           // [2][kD / 64][kBM][64]
  T *sP = sdO + 2 * kBM * kD;           // [kBN][64]: P^T [key][query]
  T *sdS = sP + kBN * kBM;              // [kBN][64]: dS^T [key][query]
  // [2][kMB / 2 * 4][128]: the halves of S^T and dP^T that cross, in fragment order
  float(*sX)[kBN * kBM / 2] = reinterpret_cast<float(*)[kBN * kBM / 2]>(sdS + kBN * kBM);
  float *sL = reinterpret_cast<float *>(sX + 2);  // [2][kBM] lse (raw; rows past lq: 0)
  float *sDs = sL + 2 * kBM;                      // [2][kBM] dsum

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wt = tid & 127;
  const int wkey = (warp & 3) * 16;  // this warp's keys in the block (both warpgroups)
  bwd_block blk;
  if (!bwd_block_init<kBN, kBM>(p, &blk)) return;
  const fa__seq &seq = blk.seq;
  const int total = blk.total;
  bwd_load_kv<kBN, kD, kThreads, true>(p, blk, sK, sV, tid);
  auto load_q = [&](int it, int stage) {
    bwd_load_q_stage<kBM, kD, kThreads, true>(p, blk, it, stage, sQ, sdO, sL, sDs, tid);
  };
  if (total > 0) load_q(0, 0);
  cp_async_commit();

  float dk[kDBh][4], dv[kDBh][4];
  bwd_zero_dkdv(dk, dv);

  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  const uint32_t q_base = smem_addr(sQ), do_base = smem_addr(sdO), ds_base = smem_addr(sdS);
  constexpr uint32_t kQStage = kBM * kD * 2;
  constexpr uint32_t kHalfAtoms = (kDh / 64) * kBM * 128;  // bytes from a Q/dO stage to its column half

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    // tile it has landed; every warp is done with tile it - 1
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < total) load_q(it + 1, stage ^ 1);
    cp_async_commit();
    int64_t h, m0;
    bwd_block_tile<kBM>(p, blk, it, &h, &m0);
    const float *l_s = sL + stage * kBM;
    const float *ds_s = sDs + stage * kBM;
    const uint32_t q_st = q_base + stage * kQStage, do_st = do_base + stage * kQStage;

    float s[kMB][4];  // warpgroup 0: S^T; warpgroup 1: dP^T
    bwd_wgmma_kt<E, kD, kBM, kBN>(s, wg == 0 ? k_base : v_base, wg == 0 ? q_st : do_st, 0);
    // the keep bits of the warpgroup's query half while the product runs
    const auto keep = [&] {
      if constexpr (kDrop)
        return bwd_keep_bits<kMBh>(p, blk.b * p.Hq + h, m0 + wg * (kBM / 2), blk.n0 + wkey, g, t);
      else
        return no_drop{};
    }();
    wgmma_wait<0>();
    fence_regs(s);
    // each warpgroup hands the other the half of its product that the
    // other's query half needs: warpgroup 0 takes queries 0 .. 31, 1 the rest
#pragma unroll
    for (int mb = 0; mb < kMBh; ++mb)
#pragma unroll
      for (int e = 0; e < 4; ++e) sX[wg][(mb * 4 + e) * 128 + wt] = wg == 0 ? s[kMBh + mb][e] : s[mb][e];
    __syncthreads();  // both halves are in shared memory

    // P^T and dS^T of the warpgroup's queries qh .. qh + 31 (bwd_tile.cuh)
    const int qh = wg * (kBM / 2);
    float x[kMBh][4], y[kMBh][4];  // S^T, dP^T
#pragma unroll
    for (int mb = 0; mb < kMBh; ++mb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float other = sX[wg ^ 1][(mb * 4 + e) * 128 + wt];
        x[mb][e] = wg == 0 ? s[mb][e] : other;
        y[mb][e] = wg == 0 ? other : s[kMBh + mb][e];
      }
    if constexpr (kArith) {
      const arith_score a(p, alibi_slope(p, h));
      using X = std::conditional_t<kTile != 0, global_score_tile_of<T, kTile>, no_score_tile>;
      const X xt = [&] {
        if constexpr (kTile != 0)
          return X(p, seq, blk.b, h, m0 + qh, blk.n0 + wkey);
        else
          return X{};
      }();
      if (p.softcap > 0.f)
        bwd_p_ds_arith<true>(blk.bd, a, x, y, l_s + qh, ds_s + qh, m0 + qh, blk.n0 + wkey, g, t, xt, 0, keep);
      else
        bwd_p_ds_arith<false>(blk.bd, a, x, y, l_s + qh, ds_s + qh, m0 + qh, blk.n0 + wkey, g, t, xt, 0, keep);
    } else {
      bwd_p_ds<kFull>(p, blk.bd, blk.b, h, x, y, l_s + qh, ds_s + qh, m0 + qh, blk.n0 + wkey, g, t);
    }
    // both to shared memory as [key][query] (A fragments' rounding)
#pragma unroll
    for (int kk = 0; kk < kKS / 2; ++kk) {
      uint32_t a[4], b[4];
      c_to_a_frag<E>(a, x[2 * kk], x[2 * kk + 1]);
      c_to_a_frag<E>(b, y[2 * kk], y[2 * kk + 1]);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int off = swz_atoms<kBN>(wkey + g + (r & 1) * 8, qh + kk * 16 + (r >> 1) * 8 + 2 * t);
        *reinterpret_cast<uint32_t *>(sP + off) = a[r];
        *reinterpret_cast<uint32_t *>(sdS + off) = b[r];
      }
    }
    fence_proxy_async();  // dS^T is read by wgmma (dQ)
    __syncthreads();      // P^T and dS^T are in shared memory
    uint32_t ap[kKS][4], as[kKS][4];
#pragma unroll
    for (int kk = 0; kk < kKS; ++kk) {
      lds_a_atoms<kBN>(ap[kk], sP, wkey, kk * 16, lane);
      lds_a_atoms<kBN>(as[kk], sdS, wkey, kk * 16, lane);
    }

    // dV += P^T dO ; dK += dS^T Q over this warpgroup's column half
    bwd_wgmma_acc<E, kDh, kBM>(dv, ap, do_st + wg * kHalfAtoms);
    bwd_wgmma_acc<E, kDh, kBM>(dk, as, q_st + wg * kHalfAtoms);

    if (fuse_dq) {
      // dQ = dS K: this warpgroup's column half, 64 columns at a time
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c0 = wg * kDh + half * 64;
        float dq[8][4];
        bwd_wgmma_dq<E, kBN>(dq, ds_base, k_base, 0, c0);
        wgmma_wait<0>();
        fence_regs(dq);
        bwd_red_dq(p, seq, h, m0, dq, wkey, c0, g, t);
      }
    } else {
      wgmma_wait<0>();
    }
    fence_regs(dv);
    fence_regs(dk);
  }
  cp_async_wait<0>();

  bwd_store_dkdv<E>(p, blk, blk.n0 + wkey + g, dk, dv, t, wg * kDh);
#endif
}

}  // namespace fa_cuda

#endif
