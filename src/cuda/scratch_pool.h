// The memory pool the cuda backend's per-call scratch comes from (the
// backward's row sums, padded statistics and f32 dQ accumulator): one per
// device, owned by the library, that keeps up to a bound of freed memory
// for the next call instead of returning it to the driver at every
// synchronization. Host code (scratch_pool.cu).
#pragma once

#include <cuda_runtime.h>

namespace fa_cuda {

// The pool for a scratch allocation on stream s of the current device, or
// nullptr where the call should take the device's default pool
// (cudaMallocAsync): FLASHATTN_CUDA_SCRATCH_KEEP=0, s being captured into a
// CUDA graph (the graph's allocations are its own), a device or driver
// without memory pools, or the pool failing to come up.
cudaMemPool_t scratch_pool(cudaStream_t s);

}  // namespace fa_cuda
