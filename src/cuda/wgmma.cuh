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

// The first k32 step of an e4m3 m64n128k32 chain (wgmma_ops.cuh's
// wgmma<e4m3_t, 128> with accumulate = 0): D = A B, the accumulators only
// written ("=f"), so that the compiler need not keep their previous values
// (the last tile's S or P V, already consumed) alive up to the issue; the
// fp8 warp-specialized forward (fwd_fp8_ws_kernel.cuh) holds O, S, P and a
// P V temporary in the same registers. Compiled only for sm_90a.
// clang-format off
struct wgmma_e4m3_128_first {
  static __device__ __forceinline__ void ss(float (&d)[16][4], uint32_t da, uint32_t db) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 da, db;\nsetp.ne.b32 p, %66, 0;\n"
        "mov.b32 hi, %67;\nmov.b64 da, {%64, hi};\nmov.b64 db, {%65, hi};\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3\n"
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
        "da, db, p, 1, 1;\n}\n"
        : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]),
          "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]),
          "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]),
          "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3]),
          "=f"(d[8][0]), "=f"(d[8][1]), "=f"(d[8][2]), "=f"(d[8][3]), "=f"(d[9][0]), "=f"(d[9][1]), "=f"(d[9][2]), "=f"(d[9][3]),
          "=f"(d[10][0]), "=f"(d[10][1]), "=f"(d[10][2]), "=f"(d[10][3]), "=f"(d[11][0]), "=f"(d[11][1]), "=f"(d[11][2]), "=f"(d[11][3]),
          "=f"(d[12][0]), "=f"(d[12][1]), "=f"(d[12][2]), "=f"(d[12][3]), "=f"(d[13][0]), "=f"(d[13][1]), "=f"(d[13][2]), "=f"(d[13][3]),
          "=f"(d[14][0]), "=f"(d[14][1]), "=f"(d[14][2]), "=f"(d[14][3]), "=f"(d[15][0]), "=f"(d[15][1]), "=f"(d[15][2]), "=f"(d[15][3])
        : "r"(da), "r"(db), "n"(0), "n"(kDescHi));
  }
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint32_t db) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 db;\nsetp.ne.b32 p, %69, 0;\n"
        "mov.b32 hi, %70;\nmov.b64 db, {%68, hi};\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3\n"
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
        "{%64, %65, %66, %67}, db, p, 1, 1;\n}\n"
        : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]),
          "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]),
          "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]),
          "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3]),
          "=f"(d[8][0]), "=f"(d[8][1]), "=f"(d[8][2]), "=f"(d[8][3]), "=f"(d[9][0]), "=f"(d[9][1]), "=f"(d[9][2]), "=f"(d[9][3]),
          "=f"(d[10][0]), "=f"(d[10][1]), "=f"(d[10][2]), "=f"(d[10][3]), "=f"(d[11][0]), "=f"(d[11][1]), "=f"(d[11][2]), "=f"(d[11][3]),
          "=f"(d[12][0]), "=f"(d[12][1]), "=f"(d[12][2]), "=f"(d[12][3]), "=f"(d[13][0]), "=f"(d[13][1]), "=f"(d[13][2]), "=f"(d[13][3]),
          "=f"(d[14][0]), "=f"(d[14][1]), "=f"(d[14][2]), "=f"(d[14][3]), "=f"(d[15][0]), "=f"(d[15][1]), "=f"(d[15][2]), "=f"(d[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(db), "n"(0), "n"(kDescHi));
  }
};
// clang-format on

}  // namespace fa_cuda

#endif
