// f16 forward kernels (one file per dtype so the two compile in parallel).
#include "launch_fwd.cuh"

fa_status fa__cuda_fast_fwd_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  return fa_cuda::launch_fwd<fa_cuda::f16_t>(p, kd, s, err);
}
