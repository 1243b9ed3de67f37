// Host side of the bulk tensor copies (tma.cuh): the tensor map of a
// [B, H, L, D] operand as the copy engine reads it, boxes of 64 columns (one
// 128-byte swizzle atom, the layout wgmma reads: mma.cuh swz_atoms) x `rows`
// rows of one head of one sequence. Built per call (a host function, no
// device work: about a microsecond) through the driver's entry point, so the
// library needs no link against libcuda.
#ifndef FA_CUDA_TMA_MAP_CUH
#define FA_CUDA_TMA_MAP_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "params.cuh"

namespace fa_cuda {

inline PFN_cuTensorMapEncodeTiled_v12000 tma_encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Whether the copy engine can address the tensor (base 16-byte aligned,
// strides of the dims it walks positive multiples of 16 bytes under 2^40,
// extents under 2^31); a dim of extent 1 is never stepped, so its stride
// does not matter. Else the kernels keep their cp.async loads.
inline bool tma_addressable(const void *base, const fa__cuda_strides &s, int64_t B, int64_t H, int64_t L, int D) {
  if (!base || (reinterpret_cast<uintptr_t>(base) & 15) || L <= 0 || D <= 0) return false;
  const int64_t ext[3] = {L, H, B}, st[3] = {s.r, s.h, s.b};
  for (int i = 0; i < 3; ++i) {
    if (ext[i] >= (int64_t(1) << 31)) return false;
    if (ext[i] == 1) continue;
    const int64_t bytes = st[i] * 2;
    if (bytes <= 0 || (bytes & 15) || bytes >= (int64_t(1) << 40)) return false;
  }
  return true;
}

// The map of a 16-bit operand; false where the driver refuses it.
inline bool tma_map_4d(CUtensorMap *map, const void *base, const fa__cuda_strides &s, int64_t B, int64_t H, int64_t L,
                       int D, int rows, bool bf16) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tma_encode_fn();
  if (!encode) return false;
  // Strides of extent-1 dims are never used; give the driver ones it accepts.
  const int64_t row_b = L > 1 ? s.r * 2 : 16 * ((D * 2 + 15) / 16);
  const int64_t head_b = H > 1 ? s.h * 2 : row_b * L;
  const int64_t batch_b = B > 1 ? s.b * 2 : head_b * H;
  const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)L, (cuuint64_t)H, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)row_b, (cuuint64_t)head_b, (cuuint64_t)batch_b};
  const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                const_cast<void *>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The map of a [B, Hq, Lq, Lk] additive bias (16-bit, `esize` 2) or boolean
// mask (bytes, `esize` 1) with element strides st, for the forward's score
// tiles (fwd_ws_kernel.cuh, kScoreTile): boxes of one 128-byte swizzle row
// of columns (64 bias or 128 mask elements) x `rows` rows. A dim broadcast
// with stride 0 gets extent 1 (the kernel's coordinate there is 0; rows
// broadcast take boxes of one row). False where the copy engine cannot
// address it (columns not contiguous, base or a stride not a multiple of 16
// bytes, extents past 2^31) or the driver refuses it.
inline bool tma_map_score_tile(CUtensorMap *map, const void *base, const int64_t (&st)[4], const int64_t (&ext)[4],
                               int esize, CUtensorMapDataType type, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tma_encode_fn();
  if (!encode || !base || (reinterpret_cast<uintptr_t>(base) & 15) || (st[3] != 1 && ext[3] > 1)) return false;
  cuuint64_t dims[4], strides[3];
  int64_t prev = 16 * ((ext[3] * esize + 15) / 16);  // a valid stride for an extent-1 dim above the columns
  dims[0] = static_cast<cuuint64_t>(ext[3]);
  for (int d = 2, k = 1; d >= 0; --d, ++k) {
    const int64_t e = st[d] == 0 ? 1 : ext[d], bytes = e > 1 ? st[d] * esize : prev;
    if (e >= (int64_t(1) << 31) || bytes <= 0 || (bytes & 15) || bytes >= (int64_t(1) << 40)) return false;
    dims[k] = static_cast<cuuint64_t>(e);
    strides[k - 1] = static_cast<cuuint64_t>(bytes);
    prev = bytes * e;
  }
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / esize), static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, type, 4, const_cast<void *>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The map of the call's bias or mask (p.fwd_tile, strides p.tile_s) for
// query tiles of kBM rows, one row where its rows broadcast.
inline bool tma_map_tile_of(const fa__cuda_params &p, int kBM, bool bf16, CUtensorMap *map) {
  const int64_t ext[4] = {p.B, p.Hq, p.Lq, p.Lk};
  const int rows = p.tile_s[2] == 0 ? 1 : kBM;
  if (p.fwd_tile == FA_CUDA_TILE_MASK)
    return tma_map_score_tile(map, p.mask, p.tile_s, ext, 1, CU_TENSOR_MAP_DATA_TYPE_UINT8, rows);
  return tma_map_score_tile(map, p.bias, p.tile_s, ext, 2,
                            bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rows);
}

// The map of an f32 [B, H, L, D] array with contiguous rows of D (the
// backward's dQ accumulator), boxes of 32 columns (128 bytes, one swizzle
// row) x `rows` rows in the 128-byte swizzle, for reductions into it.
inline bool tma_map_f32_rows(CUtensorMap *map, float *base, int64_t B, int64_t H, int64_t L, int D, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tma_encode_fn();
  if (!encode || (reinterpret_cast<uintptr_t>(base) & 15) || (D * 4) % 16 || L >= (int64_t(1) << 31) ||
      H >= (int64_t(1) << 31) || B >= (int64_t(1) << 31))
    return false;
  const int64_t row_b = int64_t(D) * 4, head_b = row_b * L, batch_b = head_b * H;
  if (batch_b >= (int64_t(1) << 40)) return false;
  const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)L, (cuuint64_t)H, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)row_b, (cuuint64_t)head_b, (cuuint64_t)batch_b};
  const cuuint32_t box[4] = {32, (cuuint32_t)rows, 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace fa_cuda

#endif
