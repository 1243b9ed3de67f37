// bf16 backward kernels for Hopper (wgmma; this file is compiled for sm_90a only).
#include "launch_bwd_wgmma.cuh"

fa_status fa__cuda_wgmma_bwd_bf16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_bwd_wgmma<fa_cuda::bf16_t>(p, kd, deterministic, s, err);
}

fa_status fa__cuda_wgmma_dbias_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_dbias_wgmma<fa_cuda::bf16_t>(p, kd, s, err);
}
