// Forward launch on Hopper (sm_90a wgmma kernel) for one element type; the
// launch_fwd_wgmma_<dtype>.cu files instantiate it and are compiled for
// sm_90a only (src/cuda/CMakeLists.txt). backend.cu calls it for head-dim
// buckets 64 and 128 on a compute capability 9.0 device.
#ifndef FA_CUDA_LAUNCH_FWD_WGMMA_CUH
#define FA_CUDA_LAUNCH_FWD_WGMMA_CUH

#include "fwd_wgmma_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <typename E, int kD, int kWG, int kBN, bool kFull>
fa_status launch_fwd_wgmma_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = fwd_wgmma_cfg<kD, kWG, kBN>;
  auto kernel = fwd_wgmma_kernel<E, kD, kWG, kBN, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (wgmma): shared memory limit");
  const dim3 grid(static_cast<unsigned>(p.B * p.Hq), static_cast<unsigned>((p.Lq + cfg::kBM - 1) / cfg::kBM));
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward (wgmma) kernel launch");
  return FA_OK;
}

// Tile shapes (warpgroups of 64 query rows x keys per tile):
//   64:  3 x 128 (192 rows; 80 KiB of shared memory)
//   128: 2 x 128 (128 rows; 161 KiB)
// variant 1 (FLASHATTN_CUDA_VARIANT=1, for A/B timing): 64: 2 x 128; 128: 3 x 64.
template <typename E, bool kFull>
fa_status launch_fwd_wgmma_full(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64:
      return p.variant == 1 ? launch_fwd_wgmma_cfg<E, 64, 2, 128, kFull>(p, s, err)
                            : launch_fwd_wgmma_cfg<E, 64, 3, 128, kFull>(p, s, err);
    case 128:
      return p.variant == 1 ? launch_fwd_wgmma_cfg<E, 128, 3, 64, kFull>(p, s, err)
                            : launch_fwd_wgmma_cfg<E, 128, 2, 128, kFull>(p, s, err);
    default: fa__err_set(err, "cuda: no wgmma forward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_fwd_wgmma(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_fwd_wgmma_full<E, true>(p, kd, s, err) : launch_fwd_wgmma_full<E, false>(p, kd, s, err);
}

}  // namespace fa_cuda

#endif
