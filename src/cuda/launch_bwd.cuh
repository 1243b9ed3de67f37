// Backward launch for one element type: the dK/dV kernel (with dQ fused
// through f32 atomics, or without it), and in deterministic mode the dQ
// kernel. dsum must already be in p.dsum, and for the fused mode p.dq_acc
// must be zero; the caller converts dq_acc afterwards.
#ifndef FA_CUDA_LAUNCH_BWD_CUH
#define FA_CUDA_LAUNCH_BWD_CUH

#include "bwd_dq_kernel.cuh"
#include "bwd_kernel.cuh"
#include "bwd_wide_kernel.cuh"
#include "launch.cuh"

namespace fa_cuda {

// The deterministic mode's dQ kernel (after a dK/dV kernel without dQ).
template <typename E, int kD, int kDqWarps, int kDqBN, bool kFull>
fa_status launch_bwd_dq(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = dq_cfg<kD, kDqWarps, kDqBN>;
  auto kernel = bwd_dq_kernel<E, kD, kDqWarps, kDqBN, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward dq: shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, cfg::kBM, "backward dQ");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("backward dq kernel launch");
  return FA_OK;
}

template <typename E, int kD, int kWarps, int kBM, int kDqWarps, int kDqBN, bool kFull>
fa_status launch_bwd_cfg(const fa__cuda_params &p, int deterministic, cudaStream_t s, fa__err *err) {
  {
    using cfg = bwd_cfg<kD, kWarps, kBM>;
    auto kernel = bwd_dkdv_kernel<E, kD, kWarps, kBM, kFull>;
    FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward: shared memory limit");
    FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, cfg::kBN, "backward dK/dV");
    kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p, deterministic ? 0 : 1);
    FA_CUDA_CHECK_LAUNCH("backward dk/dv kernel launch");
  }
  return deterministic ? launch_bwd_dq<E, kD, kDqWarps, kDqBN, kFull>(p, s, err) : FA_OK;
}

// Head-dim bucket 256 (bwd_wide_kernel.cuh): two stages of Q and dO where the
// device's shared memory holds them, else one; the deterministic mode's dQ
// kernel with 4 warps x 32 keys (128 KiB). backend.cu sends no call here on a
// device with less than the one-stage kernel's shared memory.
template <typename E, bool kFull>
fa_status launch_bwd_wide(const fa__cuda_params &p, int deterministic, cudaStream_t s, fa__err *err) {
  int dev = 0, optin = 0;
  FA_CUDA_TRY(cudaGetDevice(&dev), "backward (D = 256): device");
  FA_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
              "backward (D = 256): shared memory per block");
  const bool two = static_cast<size_t>(optin) >= fa__cuda_bwd_wide_smem(2);
  auto kernel = two ? bwd_wide_kernel<E, 2, kFull> : bwd_wide_kernel<E, 1, kFull>;
  const size_t bytes = fa__cuda_bwd_wide_smem(two ? 2 : 1);
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, bytes), "backward (D = 256): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, bwd_wide_cfg<1>::kBN, "backward dK/dV (D = 256)");
  kernel<<<grid, bwd_wide_cfg<1>::kThreads, bytes, s>>>(p, deterministic ? 0 : 1);
  FA_CUDA_CHECK_LAUNCH("backward (D = 256) dk/dv kernel launch");
  return deterministic ? launch_bwd_dq<E, 256, 4, 32, kFull>(p, s, err) : FA_OK;
}

// Tile shapes per head-dim bucket: dK/dV kernel with 16 keys per warp,
// 8 warps (128 keys) per block; the dQ kernel (deterministic mode) with
// 4 warps x 64 keys.
//   64:  128-query tiles      128: 64-query tiles
// These tall query tiles halve the barriers and fixed costs per flop against
// 64 / 32, at the price of ~100 bytes of register spills, and measured 2-10%
// faster on an H200 (bf16, 2026-11-29,
// bench/results/2026-11-29-h200-anchors-variants.txt; the 64 / 32 tiles were
// FLASHATTN_CUDA_VARIANT=1 until their build time went to the D = 256
// forward).
template <typename E, bool kFull>
fa_status launch_bwd_full(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_bwd_cfg<E, 64, 8, 128, 4, 64, kFull>(p, det, s, err);
    case 128: return launch_bwd_cfg<E, 128, 8, 64, 4, 64, kFull>(p, det, s, err);
    case 256: return launch_bwd_wide<E, kFull>(p, det, s, err);
    default: fa__err_set(err, "cuda: no backward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

// The dQ kernel alone, in each bucket's configuration above.
template <typename E, bool kFull>
fa_status launch_bwd_dq_full(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_bwd_dq<E, 64, 4, 64, kFull>(p, s, err);
    case 128: return launch_bwd_dq<E, 128, 4, 64, kFull>(p, s, err);
    case 256: return launch_bwd_dq<E, 256, 4, 32, kFull>(p, s, err);
    default: fa__err_set(err, "cuda: no dQ kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_bwd_dq_only(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_bwd_dq_full<E, true>(p, kd, s, err) : launch_bwd_dq_full<E, false>(p, kd, s, err);
}

template <typename E>
fa_status launch_bwd(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_bwd_full<E, true>(p, kd, det, s, err) : launch_bwd_full<E, false>(p, kd, det, s, err);
}

}  // namespace fa_cuda

#endif
