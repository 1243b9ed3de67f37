// The two questions the dispatch layer asks the CUDA runtime. Both must be
// harmless on a machine with no driver or no GPU (CI, laptops): every failure
// becomes "not device memory" or FA_ERR_DEVICE, and the runtime's sticky
// last-error is cleared so it cannot leak into a later call.
#include <cuda_runtime.h>

#include "cuda_hooks.h"
#include "launch.cuh"

extern "C" int fa__cuda_is_device_pointer(const void *p) {
  if (!p) return 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

extern "C" fa_status fa__cuda_copy_to_host(void *dst, const void *src, size_t bytes, fa__err *err) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fa__cuda_fail(e, "copying sequence lengths to the host", err);
  }
  return FA_OK;
}
