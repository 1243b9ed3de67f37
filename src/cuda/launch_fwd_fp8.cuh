// FP8 forward launch on Hopper (sm_90a) for one o element type; the
// launch_fwd_fp8_<dtype>.cu files instantiate it and are compiled for
// sm_90a only (src/cuda/CMakeLists.txt). backend.cu calls it for e4m3 q, k,
// v on a compute capability 9.0 device.
#ifndef FA_CUDA_LAUNCH_FWD_FP8_CUH
#define FA_CUDA_LAUNCH_FWD_FP8_CUH

#include <stdlib.h>
#include <string.h>

#include "fwd_fp8_kernel.cuh"
#include "fwd_fp8_ws_kernel.cuh"
#include "launch.cuh"
#include "tma_map.cuh"

namespace fa_cuda {

template <typename E, int kD, bool kFull, int kPipe, bool kSkip>
fa_status launch_fwd_fp8_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  // 2 warpgroups x 64 rows, 128 keys a tile (the rule's block), K and V one
  // tile ahead: D = 128 97 KiB of shared memory (113 pipelined), D = 256 193 KiB.
  using cfg = fwd_fp8_cfg<kD, 2, FA__FP8_BLOCK_K, 2, kPipe>;
  auto kernel = fwd_fp8_kernel<E, kD, 2, FA__FP8_BLOCK_K, 2, kFull, kPipe, kSkip>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (fp8): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, cfg::kBM, "forward (fp8)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward (fp8) kernel launch");
  return FA_OK;
}

// The tensor map of an e4m3 [B, H, L, D] operand (one byte an element):
// boxes of 128 columns (one 128-byte swizzle atom: the whole row of the
// bucket-128 kernel; columns past D arrive as zeros) x `rows` rows, the
// layout fwd_fp8_kernel's cp.async loads make. false where the copy engine
// cannot address the tensor (tma_addressable's conditions, strides counted
// in bytes) or the driver refuses it.
inline bool fp8_tma_map_4d(CUtensorMap *map, const void *base, const fa__cuda_strides &s, int64_t B, int64_t H,
                           int64_t L, int D, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tma_encode_fn();
  if (!encode || !base || (reinterpret_cast<uintptr_t>(base) & 15) || L <= 0 || D <= 0) return false;
  const int64_t ext[3] = {L, H, B}, st[3] = {s.r, s.h, s.b};
  for (int i = 0; i < 3; ++i) {
    if (ext[i] >= (int64_t(1) << 31)) return false;
    if (ext[i] > 1 && (st[i] <= 0 || (st[i] & 15) || st[i] >= (int64_t(1) << 40))) return false;
  }
  // Strides of extent-1 dims are never used; give the driver ones it accepts.
  const int64_t row_b = L > 1 ? s.r : 16 * ((D + 15) / 16);
  const int64_t head_b = H > 1 ? s.h : row_b * L;
  const int64_t batch_b = B > 1 ? s.b : head_b * H;
  const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)L, (cuuint64_t)H, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)row_b, (cuuint64_t)head_b, (cuuint64_t)batch_b};
  const cuuint32_t box[4] = {128, (cuuint32_t)rows, 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void *>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the call is one for the warp-specialized kernel
// (fwd_fp8_ws_kernel.cuh): bucket 128, band-only options (seqlens and
// packed sequences included), the old kernel's loop orders not asked for
// (FLASHATTN_CUDA_VARIANT 0, 3-8). 0 no; 1 yes (the default; read per
// call, as FLASHATTN_CUDA_WS is; FLASHATTN_CUDA_FP8_WS=0 keeps the cp.async
// kernel); 2 the same with FLASHATTN_CUDA_FP8_WS=2, which fails the call
// (rather than falling back to the cp.async kernel) when the tensor maps
// cannot be made, so that a test run shows the warp-specialized kernel took
// every call in its scope. On the H200 (2026-12-01) it gave the cp.async
// kernel's bits on every FP8 test case, 1.12-1.30x its speed.
inline int fp8_ws_mode(const fa__cuda_params &p, int kd) {
  const char *env = getenv("FLASHATTN_CUDA_FP8_WS");
  if (env && strcmp(env, "0") == 0) return 0;
  if (kd != 128 || p.has_extras || (p.variant != 0 && p.variant != 5 && p.variant != 6)) return 0;
  return env && strcmp(env, "2") == 0 ? 2 : 1;
}

// The warp-specialized kernel's tensor maps; false where the copy engine
// cannot address a tensor.
inline bool fp8_ws_maps(const fa__cuda_params &p, CUtensorMap (&maps)[3]) {
  constexpr int kBM = fwd_fp8_ws_cfg<128, FA__FP8_BLOCK_K, 2>::kBM;
  const int64_t B = fa__cuda_stored_batch(p);
  return fp8_tma_map_4d(&maps[0], p.q, p.qs, B, p.Hq, p.Lq_rows, p.D, kBM) &&
         fp8_tma_map_4d(&maps[1], p.k, p.ks, B, p.Hkv, p.Lk_rows, p.D, FA__FP8_BLOCK_K) &&
         fp8_tma_map_4d(&maps[2], p.v, p.vs, B, p.Hkv, p.Lk_rows, p.Dv, FA__FP8_BLOCK_K);
}

template <typename E, int kStages, int kTv = 0, bool kTurns = true>
fa_status launch_fwd_fp8_ws_cfg(const fa__cuda_params &p, const CUtensorMap (&maps)[3], cudaStream_t s, fa__err *err) {
  using cfg = fwd_fp8_ws_cfg<128, FA__FP8_BLOCK_K, kStages>;
  auto kernel = fwd_fp8_ws_kernel<E, 128, FA__FP8_BLOCK_K, kStages, kTv, kTurns>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (fp8, warp-specialized): shared memory limit");
  fa__cuda_ws_grid g;  // bucket 128 only
  const fa_status st =
      fa__cuda_ws_grid_of(p, cfg::kBM, 128, "forward (fp8, warp-specialized): the device's multiprocessors", &g, err);
  if (st != FA_OK) return st;
  kernel<<<g.blocks, cfg::kThreads, cfg::smem_bytes, s>>>(p, maps[0], maps[1], maps[2], g.row_tiles, g.heads_inner);
  FA_CUDA_CHECK_LAUNCH("forward (fp8, warp-specialized) kernel launch");
  return FA_OK;
}

// kd: the head-dim bucket of max(D, Dv), 128 (D <= 128: Q and K rows are
// whole 128-byte swizzle atoms, so D = 64 is zero-padded) or 256. Variants:
//   128, the band only: the pipeline (S of the next tile beside P V of
//       this one into a temporary; S, P, the temporary and O: 64 + 16 +
//       64 + 64 registers), P V's add under S (kPipe 1);
//       FLASHATTN_CUDA_VARIANT=1: one tile at a time, =2: the softmax
//       under P V instead (kPipe 2; A/B timing)
//   256, the band only: one tile at a time (O alone is 128 registers;
//       P V in two halves of 128 dims through one temporary),
//       warpgroups skipping the tiles outside their band
//   per-element scoring (softcap, ALiBi): one tile at a time, both buckets
// The warp-specialized kernel takes the band-only calls of bucket 128 unless
// FLASHATTN_CUDA_FP8_WS=0 (fp8_ws_mode): 3 stages, V transposed by
// ldmatrix.trans / stmatrix on producer warps 1-3 (kTv 1), P V first and its
// add under S, the two consumer warpgroups issuing as soon as
// their operands are in (kTurns false). On the H200 (2026-12-01,
// bench/results/2026-12-01-h200-fp8-ws.txt) that was the fastest of the
// variants timed, all with the same bits: 1.04-1.14x our bf16 forward at D =
// 128, where the first version (2 stages, byte-permute transposer on warps
// 2-3, turns) reached 0.86-0.96x. FLASHATTN_CUDA_VARIANT=5: that first
// version; =6: the default with the turn-taking (A/B timing).
template <typename E>
fa_status launch_fwd_fp8(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  if (kd != 128 && kd != 256) {
    fa__err_set(err, "cuda: no fp8 forward kernel for head-dim bucket %d", kd);
    return FA_ERR_INTERNAL;
  }
  if (p.has_extras)
    return kd == 128 ? launch_fwd_fp8_cfg<E, 128, true, 0, true>(p, s, err)
                     : launch_fwd_fp8_cfg<E, 256, true, 0, true>(p, s, err);
  if (kd == 128) {
    const int ws = fp8_ws_mode(p, kd);
    CUtensorMap maps[3];
    if (ws && fp8_ws_maps(p, maps)) switch (p.variant) {
        case 5: return launch_fwd_fp8_ws_cfg<E, 2>(p, maps, s, err);
        case 6: return launch_fwd_fp8_ws_cfg<E, 3, 1>(p, maps, s, err);
        default: return launch_fwd_fp8_ws_cfg<E, 3, 1, false>(p, maps, s, err);
      }
    if (ws == 2) {
      fa__err_set(err, "cuda: FLASHATTN_CUDA_FP8_WS=2: no tensor maps for the warp-specialized FP8 forward");
      return FA_ERR_INTERNAL;
    }
    if (p.variant == 1) return launch_fwd_fp8_cfg<E, 128, false, 0, true>(p, s, err);
    if (p.variant == 2) return launch_fwd_fp8_cfg<E, 128, false, 2, false>(p, s, err);
    return launch_fwd_fp8_cfg<E, 128, false, 1, false>(p, s, err);
  }
  return launch_fwd_fp8_cfg<E, 256, false, 0, true>(p, s, err);
}

}  // namespace fa_cuda

#endif
