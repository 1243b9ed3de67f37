// Thread block clusters (compute capability 9.0 and later): the blocks of a
// cluster run at the same time on one GPC and read each other's shared
// memory (distributed shared memory). The decode kernels merge the splits
// of a row block this way (decode_parts.cuh's cluster_merge), with no
// second kernel and no trip through global memory. Everything here is for
// sm_90 code; before it the functions are empty and the host never
// launches a cluster.
#ifndef FA_CUDA_CLUSTER_CUH
#define FA_CUDA_CLUSTER_CUH

#include <stdint.h>

namespace fa_cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FA_CUDA_HAS_CLUSTERS 1
#endif

// This block's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#ifdef FA_CUDA_HAS_CLUSTERS
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

// Every thread of every block of the cluster arrives, then waits for all:
// the shared-memory stores before it (release) are visible to the loads of
// any block of the cluster after it (acquire).
__device__ __forceinline__ void cluster_sync() {
#ifdef FA_CUDA_HAS_CLUSTERS
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
#endif
}

// The f32 at shared address `addr` (this block's layout) in the shared
// memory of the cluster's block `rank`.
__device__ __forceinline__ float ld_peer_f32(uint32_t addr, uint32_t rank) {
  float v = 0.f;
#ifdef FA_CUDA_HAS_CLUSTERS
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
#endif
  return v;
}

}  // namespace fa_cuda

#endif
