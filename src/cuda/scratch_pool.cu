// The library's scratch memory pool (scratch_pool.h).
//
// Why: cudaMallocAsync takes memory from the device's default pool, whose
// release threshold is 0 unless the program sets it: at every stream, event
// or device synchronization the pool hands its free memory back, and the
// next call maps it again. A backward call's scratch is O(L) (the f32 dQ
// accumulator alone is 2/3 of q + k + v: 134 MB at B = 8, H = 16, L = 2048,
// D = 128), and mapping it took ~160 us of the host's time a call on an
// H100 host, while the GPU waited: a call timed from an empty queue went
// from 1663 to 1482 us when that memory stayed
// (bench/results/2026-12-06-h100-bwd-rows.txt). The library does not change
// the default pool, which belongs to the program; it keeps its own, per
// device, with a release threshold of FLASHATTN_CUDA_SCRATCH_KEEP MiB
// (default 512; read at each call): up to that much freed scratch stays
// mapped between calls, what is beyond it goes back at the next
// synchronization. 0 gives the default pool back its role (the behaviour
// before, and what bench/gpu/anchors.py's memory high-water mark reads).
// The pools live as long as the process (a process that calls
// cudaDeviceReset must not make backward calls afterwards).
#include <stdint.h>
#include <stdlib.h>

#include <mutex>

#include "scratch_pool.h"

namespace fa_cuda {
namespace {

constexpr int kDevices = 64;
constexpr uint64_t kDefaultKeepMiB = 512;

struct pool_slot {
  cudaMemPool_t pool;
  uint64_t threshold;  // bytes, as last set
  bool failed;         // creation failed once: do not retry every call
};
std::mutex pools_mu;
pool_slot pools[kDevices];

// FLASHATTN_CUDA_SCRATCH_KEEP in MiB: unset or not a number -> the default.
uint64_t keep_bytes() {
  const char *env = getenv("FLASHATTN_CUDA_SCRATCH_KEEP");
  uint64_t mib = kDefaultKeepMiB;
  if (env && *env) {
    char *end = nullptr;
    const unsigned long long v = strtoull(env, &end, 10);
    if (end && *end == '\0') mib = v;
  }
  return mib > (UINT64_MAX >> 20) ? UINT64_MAX : mib << 20;
}

}  // namespace

cudaMemPool_t scratch_pool(cudaStream_t s) {
  const uint64_t keep = keep_bytes();
  if (keep == 0) return nullptr;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (cap != cudaStreamCaptureStatusNone) return nullptr;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices) {
    (void)cudaGetLastError();
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(pools_mu);
  pool_slot &slot = pools[dev];
  if (!slot.pool && !slot.failed) {
    int supported = 0;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess || !supported ||
        cudaMemPoolCreate(&slot.pool, &props) != cudaSuccess) {
      (void)cudaGetLastError();
      slot.pool = nullptr;
      slot.failed = true;
    }
  }
  if (!slot.pool) return nullptr;
  if (slot.threshold != keep) {
    uint64_t v = keep;
    if (cudaMemPoolSetAttribute(slot.pool, cudaMemPoolAttrReleaseThreshold, &v) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    slot.threshold = keep;
  }
  return slot.pool;
}

}  // namespace fa_cuda
