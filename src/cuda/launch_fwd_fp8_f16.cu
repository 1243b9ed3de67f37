// FP8 forward kernels writing o in f16, for Hopper (wgmma; this file is
// compiled for sm_90a only).
#include "launch_fwd_fp8.cuh"

fa_status fa__cuda_fp8_fwd_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_fwd_fp8<fa_cuda::f16_t>(p, kd, s, err);
}
