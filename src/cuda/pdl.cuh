// Programmatic dependent launch (compute capability 9.0 and later): the
// decode step's kernels (append -> decode -> split combine, decode.cu) are
// each a few microseconds to tens of microseconds long, and a plain launch
// leaves the GPU idle between them for the next grid's launch and ramp-up.
// Launched with launch_pdl(true, ...), a kernel may start while the one
// before it on the stream is still running, once every block of that one
// has called pdl_trigger (or exited); it must call pdl_wait before it reads
// anything the earlier kernel writes: the wait returns when that kernel has
// finished and its memory is visible. Both are no-ops before sm_90 and in a
// kernel launched without the attribute, so a kernel can always call them.
#ifndef FA_CUDA_PDL_CUH
#define FA_CUDA_PDL_CUH

#include <cuda_runtime.h>

namespace fa_cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...), with the programmatic
// stream-serialization attribute when pdl (the caller asks only on devices
// of compute capability 9.0 and later).
template <typename... Params, typename... Args>
cudaError_t launch_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
  if (e != cudaSuccess) (void)cudaGetLastError();  // reported by the caller, not left pending for the next call
  return e;
}

}  // namespace fa_cuda

#endif
