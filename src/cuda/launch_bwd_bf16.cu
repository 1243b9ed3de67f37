// bf16 backward kernels.
#include "launch_bwd.cuh"

fa_status fa__cuda_fast_bwd_bf16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_bwd<fa_cuda::bf16_t>(p, kd, deterministic, s, err);
}

fa_status fa__cuda_fast_bwd_dq_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_bwd_dq_only<fa_cuda::bf16_t>(p, kd, s, err);
}
