// Hopper's asynchronous machinery besides wgmma (sm_90): the bulk tensor
// copy engine (TMA), the shared-memory transaction barriers (mbarrier) its
// copies complete on, named barriers between warpgroups, and register
// reallocation between warpgroups (setmaxnreg, sm_90a).
//
// A stage of a producer/consumer ring, as the kernels here use it:
//   producer  mbar_wait(empty, parity)       the consumers are done with the slot
//             mbar_expect_tx(full, bytes)    arms the slot's barrier with the bytes coming
//             tma_load_4d(..., full)         the copy engine fills the slot
//   consumer  mbar_wait(full, parity)        the bytes have landed (no fence: the
//                                            copy engine and wgmma are both the async proxy)
//             ... wgmma reads the slot, wgmma_wait ...
//             mbar_arrive(empty)             the slot may be refilled
// Parity: the n-th use of a slot (n = 0, 1, ...) waits for phase n of its
// full barrier, parity n & 1; the producer's n-th refill (n >= 1) waits for
// phase n - 1 of the empty barrier.
#ifndef FA_CUDA_TMA_CUH
#define FA_CUDA_TMA_CUH

#include <cuda.h>
#include <stdint.h>

namespace fa_cuda {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the copy engine (and to the
// other threads once a block barrier follows).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// One box of a 4-d tensor map (dims: column, row, head, batch) into shared
// memory at dst, completing on the barrier bar. Boxes past the tensor's
// extent arrive as zeros and still count their full bytes.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Named barriers 1..15 (0 is __syncthreads'): `threads` counts every thread
// that syncs or arrives on it; arrive does not wait.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation between warpgroups (sm_90a): the kernel's cap at
// entry (__launch_bounds__(threads, 1)) is shared out again, the producer
// giving up what the consumers take. Every warp of a warpgroup runs it.
template <int kRegs>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace fa_cuda

#endif
