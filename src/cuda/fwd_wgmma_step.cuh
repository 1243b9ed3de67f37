// One key tile of the wgmma forwards (fwd_wgmma_kernel.cuh, fwd_fp8_kernel.cuh)
// in their one-tile-at-a-time loops: S = Q K^T, its softmax and P's
// fragments, O rescaled, then O += P V, each product waited for before the
// next step reads its result. The kernels pass their own steps (bf16 or
// e4m3 operands, their shared-memory layouts) as callables of the tile.
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

}  // namespace fa_cuda

#endif
