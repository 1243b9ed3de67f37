// Forward launch for one element type: picks the tile configuration of the
// head-dim bucket and the kFull variant, raises the shared-memory limit and
// launches. Included by launch_fwd_<dtype>.cu, one instantiation per file.
#ifndef FA_CUDA_LAUNCH_FWD_CUH
#define FA_CUDA_LAUNCH_FWD_CUH

#include "fwd_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <typename E, int kD, int kWarps, int kMT, int kBN, bool kQRegs, bool kFull>
fa_status launch_fwd_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = fwd_cfg<kD, kWarps, kMT, kBN>;
  auto kernel = fwd_kernel<E, kD, kWarps, kMT, kBN, kQRegs, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward: shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, cfg::kBM, "forward");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward kernel launch");
  return FA_OK;
}

// Tile shapes per head-dim bucket (warps x m-tiles of 16 rows x keys per tile):
//   64, 128: 4 warps x 2 m-tiles (128 rows) x 64 keys, as FlashAttention-2 on
//            sm80/sm90 (48 / 96 KiB of shared memory, two blocks per SM)
//   256:     4 warps x 1 m-tile x 32 keys (96 KiB; the registers hold O)
// Measured on an H200 (bf16, 2026-11-29): 8 warps x 1 m-tile with Q in
// registers was 4-20% slower for 64 and 128 (bench/results).
template <typename E, bool kFull>
fa_status launch_fwd_full(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_fwd_cfg<E, 64, 4, 2, 64, false, kFull>(p, s, err);
    case 128: return launch_fwd_cfg<E, 128, 4, 2, 32, false, kFull>(p, s, err);
    case 256: return launch_fwd_cfg<E, 256, 4, 1, 32, false, kFull>(p, s, err);
    default: fa__err_set(err, "cuda: no forward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_fwd(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_fwd_full<E, true>(p, kd, s, err) : launch_fwd_full<E, false>(p, kd, s, err);
}

}  // namespace fa_cuda

#endif
