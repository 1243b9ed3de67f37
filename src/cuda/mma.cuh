// The few PTX instructions the tensor-core kernels are made of (sm_80+):
// cp.async (global -> shared without registers, zero-fill for edges),
// ldmatrix (shared -> mma fragments), mma.sync m16n8k16 with f32 accumulators.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row-major)  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8,  "col")      b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16x8, f32)         c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
// so a C tile of scores converts into an A tile of probabilities in
// registers, which is what lets P stay out of shared memory.
#ifndef FA_CUDA_MMA_CUH
#define FA_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fa_cuda {

// 16-bit element tags: the storage type and the matching mma flavour.
struct bf16_t {
  using storage = __nv_bfloat16;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static __device__ __forceinline__ storage from_float(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float to_float(storage x) { return __bfloat162float(x); }
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

struct f16_t {
  using storage = __half;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static __device__ __forceinline__ storage from_float(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float to_float(storage x) { return __half2float(x); }
  static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// The 8-bit tag of the FP8 forward (fwd_fp8_kernel.cuh): OCP E4M3FN bytes.
struct e4m3_t {
  using storage = uint8_t;
  // Four floats as four e4m3 bytes of one register, x0 in the lowest byte,
  // rounded to nearest even (saturating at +-448, NaN kept).
  static __device__ __forceinline__ uint32_t pack4(float x0, float x1, float x2, float x3) {
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}\n"
        : "=r"(r)
        : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
    return r;
  }
};

// 2^x on the special-function unit (ex2.approx.ftz: 2 ulp, -inf -> 0, NaN ->
// NaN); exp2f() adds a denormal-range fix-up the softmax does not need.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 32-bit words per thread of a quad (the 4 lanes that share a row of
// a C fragment), w[j] = the thread's pair of columns 8 j + 2 t, + 1 of four
// consecutive 8-column blocks, exchanged so that thread t holds the whole
// 8 columns of block t in order (a 4 x 4 transpose over the quad): one
// 16-byte store instead of four 4-byte ones. XOR-permuting the words by t
// first and after lets every round send and receive a fixed register.
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int t) {
  auto swap_if = [](bool c, uint32_t &a, uint32_t &b) {
    const uint32_t x = c ? b : a, y = c ? a : b;
    a = x;
    b = y;
  };
  // u[i] = w[i ^ t]
  swap_if(t & 1, w[0], w[1]);
  swap_if(t & 1, w[2], w[3]);
  swap_if(t & 2, w[0], w[2]);
  swap_if(t & 2, w[1], w[3]);
  // round k: send u[k] (= w[t ^ k], what lane t ^ k needs), receive lane t ^ k's w[t]
#pragma unroll
  for (int k = 1; k < 4; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], k);
  // out[i] = got[i ^ t]
  swap_if(t & 1, w[0], w[1]);
  swap_if(t & 1, w[2], w[3]);
  swap_if(t & 2, w[0], w[2]);
  swap_if(t & 2, w[1], w[3]);
}

// 16 bytes global -> shared; src_bytes = 0 writes zeros and reads nothing
// (tile edges, padded head dims), so no garbage ever reaches the mma.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// cp_async16 with an L2 cache policy (createpolicy's 64-bit encoding, e.g.
// kL2EvictFirst): for data read once, so that it leaves L2 before what the
// rest of the call reads again (decode_parts.cuh's K/V stream). Hopper only:
// ptxas 13.0 miscompiles this form where it folds a uniform shared-memory
// offset into the copy ([R + UR] addressing): the SASS then reads its cache
// descriptor from a uniform register nothing writes, and the GPU stops with
// "illegal instruction" (seen 2026-12-01 and 2026-12-05 on the decode
// kernels; as IST-DASLab/marlin#44 reports; triton-lang/triton#11848 says
// ptxas 13.4.59 fixed it). The callers keep the offset out of the uniform
// datapath (decode_parts.cuh), which ctest cuda_ldgsts_policy checks
// (tests/check_ldgsts.sh); sm_80's code, which no GPU of ours runs, takes
// the plain copy.
__device__ __forceinline__ void cp_async16_policy(uint32_t dst, const void *src, int src_bytes, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy));
#else
  (void)policy;
  cp_async16(dst, src, src_bytes);
#endif
}
// createpolicy.fractional.L2::evict_first / evict_normal (fraction 1.0), as
// constants: CUTLASS's CacheHintSm90 values
constexpr uint64_t kL2EvictNormal = 0x1000000000000000ull, kL2EvictFirst = 0x12F0000000000000ull;
// 4 bytes global -> shared (row statistics such as LSE, any stride).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// dst[0] += a, dst[1] += b in global memory, no return value (8-byte aligned).
// One vector reduction on sm_90, two scalar ones before.
__device__ __forceinline__ void red_add2(float *dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Shared-memory tiles are row-major with kCols 16-bit elements per row, and
// the 16-byte chunks of a row are XOR-swizzled: ldmatrix reads one chunk
// column of 8 consecutive rows at a time, and unswizzled rows of 64, 128 or
// 256 bytes would put those 8 reads in the same banks. With the swizzle the
// 8 chunks land in 8 distinct 16-byte bank groups.
//   kCols >= 64: chunk c of row r lives at c ^ (r & 7)
//   kCols == 32: two rows share 128 bytes; chunk c lives at c ^ ((r >> 1) & 3)
template <int kCols>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(kCols == 32 || (kCols >= 64 && kCols % 64 == 0), "unsupported tile width");
  const int ch = col >> 3;
  const int x = kCols >= 64 ? (row & 7) : ((row >> 1) & 3);
  return row * kCols + ((ch ^ x) << 3) + (col & 7);
}

// The layout wgmma reads with 128-byte swizzling (sm_90a): the tile is cut
// into atoms of 64 columns, each [kRows][64] with 128-byte rows and chunk c
// of row r at c ^ (r & 7); with the tile 1024-byte aligned every 8-row group
// is one 1024-byte swizzle pattern, as the matrix descriptor expects.
template <int kRows>
__device__ __forceinline__ int swz_atoms(int row, int col) {
  return (col >> 6) * (kRows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Loads a kRows x kCols tile into swizzled shared memory with cp.async
// (swz, or swz_atoms when kAtoms). Rows >= rows_valid and columns >=
// cols_valid (a multiple of 8) are zeros. `safe` is any valid global
// address: zero-fill copies still carry one.
template <int kRows, int kCols, int kThreads, bool kAtoms = false, typename T>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t row_stride, int rows_valid, int cols_valid,
                                          const void *safe, int tid) {
  constexpr int kChunks = kCols / 8;
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int c0 = 0; c0 < kTotal; c0 += kThreads) {
    const int c = c0 + tid;
    if (kTotal % kThreads == 0 || c < kTotal) {
      const int r = c / kChunks, ch = c % kChunks;
      const bool ok = r < rows_valid && ch * 8 < cols_valid;
      const void *src = ok ? static_cast<const void *>(g + r * row_stride + ch * 8) : safe;
      const int off = kAtoms ? swz_atoms<kRows>(r, ch * 8) : swz<kCols>(r, ch * 8);
      cp_async16(smem_addr(s + off), src, ok ? 16 : 0);
    }
  }
}

// mma operands from swizzled tiles (one ldmatrix.x4 each; lane = lane id).
// A 16x16 at (m0, k0) of a tile stored [m][k].
template <int kCols, typename T>
__device__ __forceinline__ void lds_a(uint32_t a[4], const T *s, int m0, int k0, int lane) {
  ldmatrix_x4(a, smem_addr(s + swz<kCols>(m0 + (lane & 15), k0 + ((lane >> 4) << 3))));
}
// A 16x16 at (m0, k0) of A = S^T, the tile stored [k][m].
template <int kCols, typename T>
__device__ __forceinline__ void lds_a_t(uint32_t a[4], const T *s, int m0, int k0, int lane) {
  ldmatrix_x4_trans(a, smem_addr(s + swz<kCols>(k0 + (lane & 7) + ((lane >> 4) << 3), m0 + (((lane >> 3) & 1) << 3))));
}
// B for two 8-column blocks n0, n0 + 8 and k0..k0+15, of B = S^T with the
// tile stored [n][k] (K in Q K^T): b[0], b[1] for n0; b[2], b[3] for n0 + 8.
template <int kCols, typename T>
__device__ __forceinline__ void lds_b_nk(uint32_t b[4], const T *s, int n0, int k0, int lane) {
  ldmatrix_x4(b, smem_addr(s + swz<kCols>(n0 + (lane & 7) + ((lane >> 4) << 3), k0 + (((lane >> 3) & 1) << 3))));
}
// The same for B stored [k][n] (V in P V): transposing load.
template <int kCols, typename T>
__device__ __forceinline__ void lds_b_kn(uint32_t b[4], const T *s, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, smem_addr(s + swz<kCols>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), n0 + ((lane >> 4) << 3))));
}

}  // namespace fa_cuda

#endif
