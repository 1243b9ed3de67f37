/* Device memory through the CUDA runtime C API (only compiled with CUDA). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmem.h"
#include "tensor_io.h"

int cli_dev_usable(char *why, size_t n) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    snprintf(why, n, "CUDA runtime: %s", cudaGetErrorString(e));
    return 0;
  }
  if (count == 0) {
    snprintf(why, n, "no CUDA device on this machine");
    return 0;
  }
  return 1;
}

static void *dev_copy_of(const void *host, size_t bytes, char *why, size_t n) {
  void *d = NULL;
  cudaError_t e = cudaMalloc(&d, bytes ? bytes : 1);
  if (e == cudaSuccess && bytes) e = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    snprintf(why, n, "CUDA: %s (copying %zu bytes to the device)", cudaGetErrorString(e), bytes);
    cudaFree(d);
    return NULL;
  }
  return d;
}

int cli_dev_mirror(const cli_instance *host, cli_instance *dev, char *why, size_t n) {
  *dev = *host;
  dev->memory = FA_MEMORY_CUDA;
  /* null every pointer first so that a failure half-way frees only ours */
  cli_slot slots[16];
  const int ns = cli_instance_slots(dev, slots, 16);
  for (int i = 0; i < ns; ++i) slots[i].t->data = NULL;
  dev->alibi = NULL;
  dev->seqlens_q = dev->seqlens_k = dev->cu_seqlens_q = dev->cu_seqlens_k = NULL;

  cli_instance *h = (cli_instance *)host; /* slots() only reads through it here */
  cli_slot hs[16];
  const int nh = cli_instance_slots(h, hs, 16);
  for (int i = 0; i < nh; ++i) {
    slots[i].t->data = dev_copy_of(hs[i].t->data, cli_tensor_bytes(hs[i].t, hs[i].ndim), why, n);
    slots[i].t->memory = FA_MEMORY_CUDA;
    if (!slots[i].t->data) goto fail;
  }
#define COPY_ARRAY(field, count, type)                                                     \
  if (host->field) {                                                                       \
    dev->field = (type *)dev_copy_of(host->field, (size_t)(count) * sizeof(type), why, n); \
    if (!dev->field) goto fail;                                                            \
  }
  COPY_ARRAY(alibi, host->q.shape[1], float);
  {
    /* per-batch lengths: one per sequence of the padded layout */
    const int64_t nb = host->q.shape[0];
    COPY_ARRAY(seqlens_q, nb, int32_t);
    COPY_ARRAY(seqlens_k, nb, int32_t);
  }
  COPY_ARRAY(cu_seqlens_q, host->num_seqs + 1, int32_t);
  COPY_ARRAY(cu_seqlens_k, host->num_seqs + 1, int32_t);
#undef COPY_ARRAY
  dev->opt.alibi_slopes = dev->alibi;
  dev->opt.seqlens_q = dev->seqlens_q;
  dev->opt.seqlens_k = dev->seqlens_k;
  dev->opt.cu_seqlens_q = dev->cu_seqlens_q;
  dev->opt.cu_seqlens_k = dev->cu_seqlens_k;
  return 0;
fail:
  cli_dev_free(dev);
  return -1;
}

static int copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, char *why, size_t n) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
  if (e != cudaSuccess) {
    snprintf(why, n, "CUDA: %s (copying %zu bytes)", cudaGetErrorString(e), bytes);
    return -1;
  }
  return 0;
}

int cli_dev_download(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n) {
  return copy(dst->data, src->data, cli_tensor_bytes(src, ndim), cudaMemcpyDeviceToHost, why, n);
}

int cli_dev_upload(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n) {
  return copy(dst->data, src->data, cli_tensor_bytes(src, ndim), cudaMemcpyHostToDevice, why, n);
}

void cli_dev_free(cli_instance *dev) {
  cli_slot slots[16];
  const int ns = cli_instance_slots(dev, slots, 16);
  for (int i = 0; i < ns; ++i) cudaFree(slots[i].t->data), slots[i].t->data = NULL;
  cudaFree(dev->alibi);
  cudaFree(dev->seqlens_q);
  cudaFree(dev->seqlens_k);
  cudaFree(dev->cu_seqlens_q);
  cudaFree(dev->cu_seqlens_k);
  dev->alibi = NULL;
  dev->seqlens_q = dev->seqlens_k = dev->cu_seqlens_q = dev->cu_seqlens_k = NULL;
}

void cli_dev_sync(void) {
  cudaDeviceSynchronize();
}

struct cli_dev_timer {
  cudaEvent_t start, stop;
};

cli_dev_timer *cli_dev_timer_create(void) {
  cli_dev_timer *t = (cli_dev_timer *)calloc(1, sizeof *t);
  if (!t) return NULL;
  if (cudaEventCreate(&t->start) != cudaSuccess || cudaEventCreate(&t->stop) != cudaSuccess) {
    free(t);
    return NULL;
  }
  return t;
}

void cli_dev_timer_start(cli_dev_timer *t) {
  cudaDeviceSynchronize();
  cudaEventRecord(t->start, 0);
}

double cli_dev_timer_stop_ms(cli_dev_timer *t) {
  float ms = 0;
  cudaEventRecord(t->stop, 0);
  cudaEventSynchronize(t->stop);
  cudaEventElapsedTime(&ms, t->start, t->stop);
  return ms;
}

void cli_dev_timer_destroy(cli_dev_timer *t) {
  if (!t) return;
  cudaEventDestroy(t->start);
  cudaEventDestroy(t->stop);
  free(t);
}

size_t cli_dev_used_bytes(void) {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return total - free_b;
}
