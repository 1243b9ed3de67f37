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
// One box of shared memory at src added element-wise (f32) into a 4-d
// tensor map's box at (c0, c1, c2, c3), asynchronously: elements past the
// tensor's extent are not written. Tracked by bulk groups, not barriers:
// bulk_commit closes a group, bulk_wait_read<N> waits until all but N groups
// have read their shared memory (it may be written again), bulk_wait<N>
// until they are done. The writes to src must be fenced to the async proxy
// (fence_proxy_async) by every writing thread, then published by a barrier.
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2,
                                                  int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src
// into shared memory at dst, completing on the barrier bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}
// Rows [from, kRows) of a tile the copy engine filled, in swz_atoms layout
// (kAtoms atoms of kRows rows of 128 bytes), set to zero by kThreads
// threads, thread `id` of them: rows a box brought in from past a sequence
// (the next sequence's, or padding), which the products must see as zeros
// (0 x Inf or NaN is not 0). The writers then fence_proxy_async and meet on
// a barrier before wgmma reads the tile.
template <int kRows, int kAtoms, int kThreads>
__device__ __forceinline__ void zero_rows(uint32_t tile, int from, int id) {
  constexpr int kChunks = kAtoms * kRows * 8;  // 16 bytes each
#pragma unroll
  for (int c0 = 0; c0 < kChunks; c0 += kThreads) {
    const int c = c0 + id, row = (c / 8) % kRows;
    if ((kChunks % kThreads == 0 || c < kChunks) && row >= from)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + c * 16), "r"(0) : "memory");
  }
}

// Turns between blocks (the deterministic backward's dQ reductions, in a
// fixed order): a block waits until a counter in global memory reads its
// turn, does its bulk reduction, waits for it to complete and passes the
// turn on. The proxy fences order the copy engine's accesses (async proxy)
// against the counter's plain ones on either side.
__device__ __forceinline__ void turn_wait(const int *counter, int turn) {
  int v;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
  } while (v != turn);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void turn_pass(int *counter, int next) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(next) : "memory");
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
