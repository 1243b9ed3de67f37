/* Device memory through the CUDA runtime's C API (tests of the cuda backend).
 * Compiled only when the build has CUDA. */
#include "device.h"

#include <cuda_runtime_api.h>

static cudaError_t g_last = cudaSuccess;

int tdev_available(void) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    g_last = e;
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return 0;
  }
  return n > 0;
}

void *tdev_alloc(size_t bytes) {
  void *p = NULL;
  g_last = cudaMalloc(&p, bytes ? bytes : 1);
  return g_last == cudaSuccess ? p : NULL;
}

void tdev_free(void *p) {
  if (p) cudaFree(p);
}

int tdev_to_device(void *dst, const void *src, size_t bytes) {
  g_last = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return g_last == cudaSuccess ? 0 : -1;
}

int tdev_to_host(void *dst, const void *src, size_t bytes) {
  /* cudaMemcpy on the legacy default stream waits for the library's kernels */
  g_last = cudaDeviceSynchronize();
  if (g_last != cudaSuccess) return -1;
  g_last = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  return g_last == cudaSuccess ? 0 : -1;
}

const char *tdev_last_error(void) {
  return cudaGetErrorString(g_last);
}
