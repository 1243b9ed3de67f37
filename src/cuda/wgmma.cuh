// The rest of wgmma (sm_90a) besides the mma itself (wgmma_ops.cuh): the
// fences and group waits around it, and the shared-memory matrix descriptor
// for tiles stored in swz_atoms layout (mma.cuh).
//
// Order of one asynchronous product, as the PTX ISA requires:
//   wgmma_fence()        registers written by ordinary code (A fragments,
//                        a rescaled accumulator) are ready for the mma
//   wgmma<...>::ss/rs    issued, asynchronous
//   wgmma_commit()       closes a group
//   wgmma_wait<0>()      the group's results are in the accumulators
//   fence_regs(acc)      tells the compiler so: no read of acc moves above
// and shared memory written through the generic proxy (cp.async) is fenced
// with fence_proxy_async() before the barrier that publishes it to wgmma.
#ifndef FA_CUDA_WGMMA_CUH
#define FA_CUDA_WGMMA_CUH

#include <stdint.h>

#include "wgmma_ops.cuh"

namespace fa_cuda {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// Low word of the descriptor of a matrix in swz_atoms layout at shared
// address addr (the first row / column the instruction reads; 16-byte
// aligned, inside a 1024-byte aligned tile); the high word is kDescHi
// (wgmma_ops.cuh). lbo: bytes from one 64-column atom to the next, read
// only for an N-major B wider than 64 (K-major operands ignore it).
__device__ __forceinline__ uint32_t sw128_desc_lo(uint32_t addr, uint32_t lbo) {
  return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16);
}

}  // namespace fa_cuda

#endif
