// The Hopper backward's products, issued the same way by the cp.async
// kernel (bwd_wgmma_kernel.cuh) and the warp-specialized one
// (bwd_ws_kernel.cuh). Tiles are in swz_atoms layout (mma.cuh) at shared
// addresses: K and V [kD / 64][kBN][64], Q and dO [kD / 64][kBM][64], dS^T
// [kBM / 64][kBN][64]. A warpgroup wg owns keys 64 wg .. 64 wg + 63 of the
// block's kBN. Each call issues (and commits) one group; the caller waits.
#ifndef FA_CUDA_BWD_WGMMA_STEP_CUH
#define FA_CUDA_BWD_WGMMA_STEP_CUH

#include "bwd_tile.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

// acc = the warpgroup's 64 keys of `kv` (K or V) times the tile's rows of
// `rows` (Q or dO), transposed: S^T = K Q^T, dP^T = V dO^T.
template <typename E, int kD, int kBM, int kBN>
__device__ __forceinline__ void bwd_wgmma_kt(float (&acc)[kBM / 8][4], uint32_t kv, uint32_t rows, int wg) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t off_k = (kk >> 2) * (kBN * 128) + wg * 64 * 128 + (kk & 3) * 32;
    const uint32_t off_q = (kk >> 2) * (kBM * 128) + (kk & 3) * 32;
    wgmma<E, kBM>::ss(acc, sw128_desc_lo(kv + off_k, 0), sw128_desc_lo(rows + off_q, 0), kk > 0);
  }
  wgmma_commit();
}

// acc += A (P^T or dS^T as A fragments, 16 queries a step) times the tile's
// rows of `rows` (dO or Q), N-major: dV += P^T dO, dK += dS^T Q.
template <typename E, int kD, int kBM>
__device__ __forceinline__ void bwd_wgmma_acc(float (&acc)[kD / 8][4], const uint32_t (&a)[kBM / 16][4],
                                              uint32_t rows) {
  fence_regs(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBM / 16; ++kk)
    wgmma<E, kD>::template rs<1>(acc, a[kk], sw128_desc_lo(rows + kk * 16 * 128, kBM * 128), 1);
  wgmma_commit();
}

// The thread's dS^T fragments into shared memory at ds ([key][query]: the
// M-major A of dQ), its keys wkey + g and + 8 (wkey: the warp's first key).
template <int kBM, int kBN>
__device__ __forceinline__ void bwd_store_ds_t(uint32_t ds, const uint32_t (&a)[kBM / 16][4], int wkey, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < kBM / 16; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(
                       ds + 2 * swz_atoms<kBN>(wkey + g + (x & 1) * 8, kk * 16 + (x >> 1) * 8 + 2 * t)),
                   "r"(a[kk][x])
                   : "memory");
}

// dq = the 64 x 64 block (query rows dq_r0.., head-dim columns dq_c0..) of
// dS K over the block's kBN keys, 16 keys a step.
template <typename E, int kBN>
__device__ __forceinline__ void bwd_wgmma_dq(float (&dq)[8][4], uint32_t ds, uint32_t k, int dq_r0, int dq_c0) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    const uint32_t a = ds + (dq_r0 / 64) * (kBN * 128) + kk * 16 * 128;
    const uint32_t bk = k + (dq_c0 / 64) * (kBN * 128) + kk * 16 * 128;
    wgmma<E, 64>::ss_mn(dq, sw128_desc_lo(a, kBN * 128), sw128_desc_lo(bk, kBN * 128), kk > 0);
  }
  wgmma_commit();
}

}  // namespace fa_cuda

#endif
