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
