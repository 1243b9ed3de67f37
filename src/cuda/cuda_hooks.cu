// The questions the library asks the CUDA runtime outside the kernels. Both must be
// harmless on a machine with no driver or no GPU (CI, laptops): every failure
// becomes "not device memory" or FA_ERR_DEVICE, and the runtime's sticky
// last-error is cleared so it cannot leak into a later call.
#include <cuda_runtime.h>
#include <stdio.h>

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

// On the caller's stream, not the legacy one: a length written by a kernel
// queued on a non-blocking stream (PyTorch's side streams are) must be read
// after that kernel, as the call's own kernels would read it; a plain
// cudaMemcpy does not wait for such a stream.
extern "C" fa_status fa__cuda_read_back(void *dst, const void *src, size_t bytes, void *stream, const char *name,
                                        const char *hint, fa__err *err) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s, &cs);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // the legacy stream while another stream captures in global mode: a
    // copy there would invalidate that capture
    if (e != cudaErrorStreamCaptureImplicit) return fa__cuda_fail(e, "cudaStreamIsCapturing", err);
    cs = cudaStreamCaptureStatusActive;
  }
  if (cs != cudaStreamCaptureStatusNone) {
    fa__err_set(err,
                "%s is in device memory and is read back to check its values, which cannot happen while the stream "
                "is capturing a CUDA graph (the graph replays later, with whatever it then holds)%s%s",
                name, hint ? ": " : "", hint ? hint : "");
    return FA_ERR_UNSUPPORTED;
  }
  e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    char what[160];
    snprintf(what, sizeof what, "copying %s to the host", name);
    return fa__cuda_fail(e, what, err);
  }
  return FA_OK;
}

extern "C" FA_API fa_status fa_cuda_device_describe(char *out, size_t out_size) {
  if (!out || out_size == 0) return FA_ERR_NULL_POINTER;
  int dev = 0, count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    snprintf(out, out_size, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    (void)cudaGetLastError();
    return FA_ERR_NO_BACKEND;
  }
  cudaDeviceProp prop;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
    snprintf(out, out_size, "CUDA device query failed (%s)", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return FA_ERR_DEVICE;
  }
  snprintf(out, out_size, "device %d of %d: %s, sm_%d%d, %d multiprocessors, %.1f GiB, L2 %d MiB", dev, count,
           prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.l2CacheSize >> 20);
  return FA_OK;
}
