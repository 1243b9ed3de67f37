// Forward launch for one element type: picks the tile configuration of the
// head-dim bucket and the kFull variant, raises the shared-memory limit and
// launches. Included by launch_fwd_<dtype>.cu, one instantiation per file.
#ifndef FA_CUDA_LAUNCH_FWD_CUH
#define FA_CUDA_LAUNCH_FWD_CUH

#include "fwd_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <typename E, int kD, int kWarps, int kBN, bool kQRegs, bool kFull>
fa_status launch_fwd_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = fwd_cfg<kD, kWarps, kBN>;
  auto kernel = fwd_kernel<E, kD, kWarps, kBN, kQRegs, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward: shared memory limit");
  const dim3 grid(static_cast<unsigned>(p.B * p.Hq), static_cast<unsigned>((p.Lq + cfg::kBM - 1) / cfg::kBM));
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward kernel launch");
  return FA_OK;
}

// Tile shapes per head-dim bucket (16 query rows per warp throughout):
//   64:  8 warps x 64 keys, Q fragments in registers   (48 KiB smem)
//   128: 8 warps x 64 keys, Q fragments in registers   (96 KiB)
//   256: 4 warps x 32 keys, Q re-read from shared mem  (96 KiB; registers hold O)
template <typename E, bool kFull>
fa_status launch_fwd_full(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_fwd_cfg<E, 64, 8, 64, true, kFull>(p, s, err);
    case 128: return launch_fwd_cfg<E, 128, 8, 64, true, kFull>(p, s, err);
    case 256: return launch_fwd_cfg<E, 256, 4, 32, false, kFull>(p, s, err);
    default: fa__err_set(err, "cuda: no forward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_fwd(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_fwd_full<E, true>(p, kd, s, err) : launch_fwd_full<E, false>(p, kd, s, err);
}

} // namespace fa_cuda

#endif
