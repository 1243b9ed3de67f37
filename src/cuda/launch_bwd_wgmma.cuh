// Backward launch on Hopper (sm_90a wgmma dK/dV kernel, dQ fused or, in
// deterministic mode, the wgmma dQ kernel after it) for one
// element type; launch_bwd_wgmma_<dtype>.cu instantiate it for sm_90a only.
// Preconditions as launch_bwd: dsum filled, dq_acc zero when fused.
#ifndef FA_CUDA_LAUNCH_BWD_WGMMA_CUH
#define FA_CUDA_LAUNCH_BWD_WGMMA_CUH

#include "bwd_dq_wgmma_kernel.cuh"
#include "bwd_wgmma_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <typename E, int kD, int kBM, bool kFull>
fa_status launch_bwd_wgmma_cfg(const fa__cuda_params &p, int deterministic, cudaStream_t s, fa__err *err) {
  using cfg = bwd_wgmma_cfg<kD, kBM>;
  auto kernel = deterministic ? bwd_wgmma_kernel<E, kD, kBM, kFull, false> : bwd_wgmma_kernel<E, kD, kBM, kFull, true>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward (wgmma): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, cfg::kBN, "backward dK/dV (wgmma)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("backward (wgmma) dk/dv kernel launch");
  if (!deterministic) return FA_OK;
  // dQ in its own kernel: 2 warpgroups x 64 query rows, key tiles of 128
  // (D = 64) or 64 (D = 128)
  constexpr int kDqBN = kD == 64 ? 128 : 64;
  using dcfg = dq_wgmma_cfg<kD, kDqBN>;
  auto dq_kernel = bwd_dq_wgmma_kernel<E, kD, kDqBN, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(dq_kernel, dcfg::smem_bytes), "backward dq (wgmma): shared memory limit");
  FA_CUDA_ROWS_GRID(dgrid, p.B * p.Hq, p.Lq, dcfg::kBM, "backward dQ (wgmma)");
  dq_kernel<<<dgrid, dcfg::kThreads, dcfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("backward dq (wgmma) kernel launch");
  return FA_OK;
}

// Tiles: 2 warpgroups x 64 keys; query tiles of 128 (D = 64) or 64
// (D = 128), so that dQ splits into one 64 x 64 block per warpgroup.
template <typename E, bool kFull>
fa_status launch_bwd_wgmma_full(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_bwd_wgmma_cfg<E, 64, 128, kFull>(p, det, s, err);
    case 128: return launch_bwd_wgmma_cfg<E, 128, 64, kFull>(p, det, s, err);
    default: fa__err_set(err, "cuda: no wgmma backward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_bwd_wgmma(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_bwd_wgmma_full<E, true>(p, kd, det, s, err)
                      : launch_bwd_wgmma_full<E, false>(p, kd, det, s, err);
}

}  // namespace fa_cuda

#endif
