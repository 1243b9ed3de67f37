// Tensor-core backward for Hopper (sm_90a): the structure of bwd_kernel.cuh
// with every product on wgmma. A block owns kBN = 128 keys of one
// (sequence, kv head), 64 per warpgroup, keeps their dK and dV in registers
// and walks every query tile of kBM rows (and every query head of the group)
// that can see them:
//   S^T  = K Q^T,  dP^T = V dO^T   wgmma ss (K, V slice and Q, dO tiles
//                                  from shared memory, all K-major)
//   P^T, dS^T                      bwd_tile.cuh, in registers
//   dV += P^T dO,  dK += dS^T Q    wgmma rs (P^T, dS^T as A fragments;
//                                  dO, Q N-major from shared memory)
//   dQ += dS K     (fuse_dq)       dS^T through shared memory as an M-major
//                                  A, K as N-major B; each warpgroup one
//                                  64 x 64 block of the tile's dQ, added to
//                                  dq_acc with f32 reductions
// The products of a tile go out as separate groups so that the element-wise
// work hides under them (band-only case; with bias, mask, dropout or
// softcap P^T needs dP^T too and waits for both):
//   issue S^T, dP^T | wait S^T, P^T | issue dV | wait dP^T, dS^T | issue dK
// Without fuse_dq (deterministic mode) the dQ kernel of
// bwd_dq_wgmma_kernel.cuh runs after this one. (A run-time flag, not a
// template one: the two forms were 4 more of these kernels to compile in
// each element type's file, the build's longest.)
#ifndef FA_CUDA_BWD_WGMMA_KERNEL_CUH
#define FA_CUDA_BWD_WGMMA_KERNEL_CUH

#include "bwd_tile.cuh"
#include "bwd_wgmma_step.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kBM>
struct bwd_wgmma_cfg {
  static constexpr int kBN = 128, kThreads = 256;
  // K, V, two stages of Q and dO, dS^T; two stages of LSE and dsum; 1 KiB
  // to align the swizzled tiles to 1024 bytes
  static constexpr size_t smem_bytes =
      sizeof(uint16_t) * (size_t)(2 * kBN * kD + 4 * kBM * kD + kBN * kBM) + sizeof(float) * 4 * kBM + 1024;
};

template <typename E, int kD, int kBM, bool kFull>
__global__ void __launch_bounds__(256, 1) bwd_wgmma_kernel(const fa__cuda_params p, const int fuse_dq) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = bwd_wgmma_cfg<kD, kBM>;
  constexpr int kBN = cfg::kBN, kThreads = cfg::kThreads;
  constexpr int kMB = kBM / 8;  // 8-query column blocks of S^T
  constexpr int kDB = kD / 8;
  // dQ's 64 x 64 blocks: the tile's two row halves (kBM = 128, kD = 64) or
  // its two column halves (kBM = 64, kD = 128), one per warpgroup
  static_assert((kBM == 128 && kD == 64) || (kBM == 64 && kD == 128), "tile shapes with a 64 x 64 dQ block each");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  T *sK = reinterpret_cast<T *>(smem);                     // [kD / 64][kBN][64]
  T *sV = sK + kBN * kD;                                   // [kD / 64][kBN][64]
  T *sQ = sV + kBN * kD;                                   // [2][kD / 64][kBM][64]
  T *sdO = sQ + 2 * kBM * kD;                              // [2][kD / 64][kBM][64]
  T *sdS = sdO + 2 * kBM * kD;                             // [kBM / 64][kBN][64]: dS^T [key][query]
  float *sL = reinterpret_cast<float *>(sdS + kBN * kBM);  // [2][kBM] lse (raw; rows past lq: 0)
  float *sDs = sL + 2 * kBM;                               // [2][kBM] dsum

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
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

  float dk[kDB][4], dv[kDB][4];
  bwd_zero_dkdv(dk, dv);
  const int wkey = warp * 16;  // = 64 wg + 16 (warp % 4): this warp's keys in the block

  // Byte addresses; an atom of 64 columns is rows x 128 bytes.
  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  const uint32_t q_base = smem_addr(sQ), do_base = smem_addr(sdO), ds_base = smem_addr(sdS);
  constexpr uint32_t kQStage = kBM * kD * 2;
  // this warpgroup's dQ block: query rows dq_r0.., head-dim columns dq_c0..
  const int dq_r0 = kBM == 128 ? wg * 64 : 0, dq_c0 = kBM == 64 ? wg * 64 : 0;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    // Tile it has landed; past this barrier every warp is done with tile
    // it - 1 (its Q/dO stage, dS^T), so tile it + 1 may load over it.
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

    // S^T = K Q^T and dP^T = V dO^T (this warpgroup's 64 keys x kBM
    // queries) as two groups, so that P^T is computed while dP^T runs
    float st[kMB][4], dpt[kMB][4];
    bwd_wgmma_kt<E, kD, kBM, kBN>(st, k_base, q_st, wg);
    bwd_wgmma_kt<E, kD, kBM, kBN>(dpt, v_base, do_st, wg);
    wgmma_wait<1>();
    fence_regs(st);

    // P^T, then dV += P^T dO (k = the kBM queries, 16 rows of 128 bytes a
    // step) while dS^T is computed
    uint32_t ap[kBM / 16][4], as[kBM / 16][4];
    if (kFull) {
      // dropout and the softcap derivative need dP^T with P^T
      wgmma_wait<0>();
      fence_regs(dpt);
      bwd_p_ds<kFull, kD == 64>(p, blk.bd, blk.b, h, st, dpt, l_s, ds_s, m0, blk.n0 + wkey, g, t);
    } else {
      bwd_p_band(blk.bd, st, l_s, p.scale_log2, m0, blk.n0 + wkey, g, t);
    }
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) c_to_a_frag<E>(ap[kk], st[2 * kk], st[2 * kk + 1]);
    bwd_wgmma_acc<E, kD, kBM>(dv, ap, do_st);
    if (!kFull) {
      wgmma_wait<1>();
      fence_regs(dpt);
      bwd_ds_band(st, dpt, ds_s, t);
    }
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) c_to_a_frag<E>(as[kk], dpt[2 * kk], dpt[2 * kk + 1]);
    if (fuse_dq) {
      bwd_store_ds_t<kBM, kBN>(ds_base, as, wkey, g, t);  // the A of dQ
      fence_proxy_async();
    }

    // dK += dS^T Q
    bwd_wgmma_acc<E, kD, kBM>(dk, as, q_st);

    if (fuse_dq) {
      __syncthreads();  // all of dS^T is in shared memory
      // dQ block = dS K over the block's kBN keys, 16 keys (rows of dS^T
      // and of K) a step
      float dq[8][4];
      bwd_wgmma_dq<E, kBN>(dq, ds_base, k_base, dq_r0, dq_c0);
      wgmma_wait<0>();
      fence_regs(dq);
      fence_regs(dv);
      fence_regs(dk);
      bwd_red_dq(p, seq, h, m0, dq, dq_r0 + (warp & 3) * 16, dq_c0, g, t);
    } else {
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
    }
  }
  cp_async_wait<0>();

  bwd_store_dkdv<E, kDB, true>(p, blk, blk.n0 + wkey + g, dk, dv, t);
#endif
}

}  // namespace fa_cuda

#endif
