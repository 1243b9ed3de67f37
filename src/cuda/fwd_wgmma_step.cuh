// The steps of the bf16/f16 wgmma forward's loops (fwd_wgmma_kernel.cuh;
// fwd_fp8_kernel.cuh has its own, adding each tile's P V into O on the CUDA
// cores). One tile at a time: S = Q K^T, its softmax and P's fragments, O
// rescaled, then O += P V, each product waited for before the next step
// reads its result. The kernel passes its steps as callables of the tile.
#ifndef FA_CUDA_FWD_WGMMA_STEP_CUH
#define FA_CUDA_FWD_WGMMA_STEP_CUH

#include "fwd_tile.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

// The two products of a key tile, for one warpgroup's 64 query rows, on
// tiles in swz_atoms layout (64-column atoms of 128-byte rows). Each is one
// wgmma group, committed.
// S = Q K^T: Q's rows at q_base inside a tile of kBM rows, K's kBN rows at
// k_base; kD / 16 steps of k16, a step inside an atom 32 bytes on.
template <typename E, int kD, int kBM, int kBN>
__device__ __forceinline__ void wgmma_qk(float (&s)[kBN / 8][4], uint32_t q_base, uint32_t k_base) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t in_atom = (kk & 3) * 32;
    const uint32_t da = sw128_desc_lo(q_base + (kk >> 2) * (kBM * 128) + in_atom, 0);
    const uint32_t db = sw128_desc_lo(k_base + (kk >> 2) * (kBN * 128) + in_atom, 0);
    wgmma<E, kBN>::ss(s, da, db, kk > 0);
  }
  wgmma_commit();
}
// O += P V: P as A fragments in registers, V's kBN rows at v_base (N-major);
// kBN / 16 steps of 16 keys = 16 rows of 128 bytes.
template <typename E, int kD, int kBN>
__device__ __forceinline__ void wgmma_pv(float (&o)[kD / 8][4], const uint32_t (&pa)[kBN / 16][4], uint32_t v_base) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    const uint32_t db = sw128_desc_lo(v_base + kk * 16 * 128, kBN * 128);
    wgmma<E, kD>::template rs<1>(o, pa[kk], db, 1);
  }
  wgmma_commit();
}
// P (the softmax's f32 in the S accumulators) as the A fragments of P V.
template <typename E, int kBN>
__device__ __forceinline__ void wgmma_p_frags(uint32_t (&pa)[kBN / 16][4], const float (&s)[kBN / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) fwd_p_frag<E>(pa[kk], s, kk);
}

template <typename SIssue, typename SSoftmax, typename PFrags, typename PVIssue, int kDB>
__device__ __forceinline__ void wgmma_fwd_step(int it, SIssue &s_issue, SSoftmax &s_softmax, PFrags &p_to_frags,
                                               PVIssue &pv_issue, float (&o)[1][kDB][4], const float (&alpha)[1][2]) {
  wgmma_fence();
  s_issue(it);
  wgmma_wait<0>();
  s_softmax(it);
  fwd_rescale(o, alpha);
  p_to_frags();
  fence_regs(o[0]);
  wgmma_fence();
  pv_issue(it);
  wgmma_wait<0>();
  fence_regs(o[0]);
}

// One iteration of the pipelined loops (FlashAttention 3's intra-warpgroup
// overlap): S of tile it + 1 issued together with P V of tile it, `between`
// run while both are on the tensor cores, the softmax of it + 1 once S is in while P V still
// runs, then O rescaled and P of it + 1 made into fragments. Every wait is
// unconditional, so that ptxas can keep the wgmma asynchronous.
template <typename SIssue, typename PVIssue, typename Between, typename SSoftmax, typename PFrags, int kDB>
__device__ __forceinline__ void wgmma_fwd_pipe_step(int it, SIssue &s_issue, PVIssue &pv_issue, Between &&between,
                                                    SSoftmax &s_softmax, PFrags &p_to_frags, float (&o)[1][kDB][4],
                                                    const float (&alpha)[1][2]) {
  wgmma_fence();
  s_issue(it + 1);
  pv_issue(it);
  between();
  wgmma_wait<1>();  // S of it + 1 (the older group) is in; P V may still run
  s_softmax(it + 1);
  wgmma_wait<0>();
  fence_regs(o[0]);
  fwd_rescale(o, alpha);
  p_to_frags();
}

}  // namespace fa_cuda

#endif
