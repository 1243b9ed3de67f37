// Host-side helpers of the cuda backend's calls (backend.cu, decode.cu):
// the device the tensors live on made current for a call, stream-ordered
// scratch memory, and the environment's on/off switches.
#pragma once

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "launch.cuh"
#include "scratch_pool.h"

namespace fa_cuda {

// An on/off switch of the environment, read at each call (no caching, so
// that A/B timing and tests may flip it in one process): "0" -> 0, "1" -> 1,
// unset or anything else -> dflt.
inline int env_switch(const char *name, int dflt) {
  const char *env = getenv(name);
  if (env && strcmp(env, "0") == 0) return 0;
  if (env && strcmp(env, "1") == 0) return 1;
  return dflt;
}

// The device the tensors live on becomes current for the call, and the
// caller's current device is restored afterwards.
struct device_guard {
  int prev = -1;
  bool switched = false;
  fa_status enter(const void *ptr, fa__err *err) {
    cudaPointerAttributes a;
    FA_CUDA_TRY(cudaPointerGetAttributes(&a, ptr), "cudaPointerGetAttributes");
    FA_CUDA_TRY(cudaGetDevice(&prev), "cudaGetDevice");
    if (a.type == cudaMemoryTypeDevice && a.device != prev) {
      FA_CUDA_TRY(cudaSetDevice(a.device), "cudaSetDevice");
      switched = true;
    }
    return FA_OK;
  }
  ~device_guard() {
    if (switched) (void)cudaSetDevice(prev);
  }
};

// Stream-ordered scratch from the library's pool (scratch_pool.h: freed
// memory stays for the next call) or the device's default one; plain
// cudaMalloc where memory pools are missing.
struct scratch {
  void *ptr = nullptr;
  cudaStream_t stream = nullptr;
  bool async = false;
  fa_status alloc(size_t bytes, cudaStream_t s, const char *what, fa__err *err) {
    stream = s;
    cudaMemPool_t pool = scratch_pool(s);
    cudaError_t e = pool ? cudaMallocFromPoolAsync(&ptr, bytes, pool, s) : cudaMallocAsync(&ptr, bytes, s);
    if (e == cudaSuccess) {
      async = true;
      return FA_OK;
    }
    (void)cudaGetLastError();
    e = cudaMalloc(&ptr, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      ptr = nullptr;
      fa__err_set(err, "cuda: cannot allocate %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
      return e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY : FA_ERR_DEVICE;
    }
    return FA_OK;
  }
  ~scratch() {
    if (!ptr) return;
    if (async) {
      (void)cudaFreeAsync(ptr, stream);
    } else {
      (void)cudaStreamSynchronize(stream);  // kernels may still read it
      (void)cudaFree(ptr);
    }
  }
};

}  // namespace fa_cuda
