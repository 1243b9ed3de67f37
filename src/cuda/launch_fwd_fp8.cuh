// FP8 forward launch on Hopper (sm_90a) for one o element type; the
// launch_fwd_fp8_<dtype>.cu files instantiate it and are compiled for
// sm_90a only (src/cuda/CMakeLists.txt). backend.cu calls it for e4m3 q, k,
// v on a compute capability 9.0 device.
#ifndef FA_CUDA_LAUNCH_FWD_FP8_CUH
#define FA_CUDA_LAUNCH_FWD_FP8_CUH

#include "fwd_fp8_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <typename E, int kD, bool kFull, int kPipe, bool kSkip>
fa_status launch_fwd_fp8_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  // 2 warpgroups x 64 rows, 128 keys a tile (the rule's block), K and V one
  // tile ahead: D = 128 97 KiB of shared memory (113 pipelined), D = 256 193 KiB.
  using cfg = fwd_fp8_cfg<kD, 2, FA__FP8_BLOCK_K, 2, kPipe>;
  auto kernel = fwd_fp8_kernel<E, kD, 2, FA__FP8_BLOCK_K, 2, kFull, kPipe, kSkip>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (fp8): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, cfg::kBM, "forward (fp8)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward (fp8) kernel launch");
  return FA_OK;
}

// kd: the head-dim bucket of max(D, Dv), 128 (D <= 128: Q and K rows are
// whole 128-byte swizzle atoms, so D = 64 is zero-padded) or 256. Variants:
//   128, the band only: the pipeline (S of the next tile beside P V of
//       this one into a temporary; S, P, the temporary and O: 64 + 16 +
//       64 + 64 registers), P V's add under S (kPipe 1);
//       FLASHATTN_CUDA_VARIANT=1: one tile at a time, =2: the softmax
//       under P V instead (kPipe 2; A/B timing)
//   256, the band only: one tile at a time (O alone is 128 registers;
//       P V in two halves of 128 dims through one temporary),
//       warpgroups skipping the tiles outside their band
//   per-element scoring (softcap, ALiBi): one tile at a time, both buckets
// The two-level P V (fwd_fp8_kernel.cuh) is not yet timed on a GPU.
template <typename E>
fa_status launch_fwd_fp8(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  if (kd != 128 && kd != 256) {
    fa__err_set(err, "cuda: no fp8 forward kernel for head-dim bucket %d", kd);
    return FA_ERR_INTERNAL;
  }
  if (p.has_extras)
    return kd == 128 ? launch_fwd_fp8_cfg<E, 128, true, 0, true>(p, s, err)
                     : launch_fwd_fp8_cfg<E, 256, true, 0, true>(p, s, err);
  if (kd == 128) {
    if (p.variant == 1) return launch_fwd_fp8_cfg<E, 128, false, 0, true>(p, s, err);
    if (p.variant == 2) return launch_fwd_fp8_cfg<E, 128, false, 2, false>(p, s, err);
    return launch_fwd_fp8_cfg<E, 128, false, 1, false>(p, s, err);
  }
  return launch_fwd_fp8_cfg<E, 256, false, 0, true>(p, s, err);
}

}  // namespace fa_cuda

#endif
