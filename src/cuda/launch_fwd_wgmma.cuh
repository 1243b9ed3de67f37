// Forward launch on Hopper (sm_90a wgmma kernel) for one element type; the
// launch_fwd_wgmma_<dtype>.cu files instantiate it and are compiled for
// sm_90a only (src/cuda/CMakeLists.txt). backend.cu calls it for head-dim
// buckets 64 and 128 on a compute capability 9.0 device.
#ifndef FA_CUDA_LAUNCH_FWD_WGMMA_CUH
#define FA_CUDA_LAUNCH_FWD_WGMMA_CUH

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "fwd_wgmma_kernel.cuh"
#include "fwd_ws_kernel.cuh"
#include "launch.cuh"
#include "tma_map.cuh"

namespace fa_cuda {

template <typename E, int kD, int kWG, int kBN, int kSlots, bool kPipe, bool kFull, bool kSkip = true>
fa_status launch_fwd_wgmma_cfg(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = fwd_wgmma_cfg<kD, kWG, kBN, kSlots>;
  auto kernel = fwd_wgmma_kernel<E, kD, kWG, kBN, kSlots, kPipe, kFull, kSkip>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (wgmma): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, cfg::kBM, "forward (wgmma)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("forward (wgmma) kernel launch");
  return FA_OK;
}

template <typename E, int kD, int kBN, int kStages, int kCWG, int kScore>
fa_status launch_fwd_ws_score(const fa__cuda_params &p, const CUtensorMap (&maps)[4], cudaStream_t s, fa__err *err) {
  using cfg = fwd_ws_cfg<kD, kBN, kStages, kCWG, kScore>;
  auto kernel = fwd_ws_kernel<E, kD, kBN, kStages, kCWG, kScore>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "forward (warp-specialized): shared memory limit");
  fa__cuda_ws_grid g;
  const fa_status st =
      fa__cuda_ws_grid_of(p, cfg::kBM, kD, "forward (warp-specialized): the device's multiprocessors", &g, err);
  if (st != FA_OK) return st;
  kernel<<<g.blocks, cfg::kThreads, cfg::smem_bytes, s>>>(p, maps[0], maps[1], maps[2], maps[3], g.row_tiles,
                                                          g.heads_inner);
  FA_CUDA_CHECK_LAUNCH("forward (warp-specialized) kernel launch");
  return FA_OK;
}

// kTile: the configuration takes a bias or mask (p.fwd_tile) and dropout
// (p.arith_drop) too
template <typename E, int kD, int kBN, int kStages, int kCWG, bool kTile>
fa_status launch_fwd_ws_cfg(const fa__cuda_params &p, const CUtensorMap (&maps)[4], cudaStream_t s, fa__err *err) {
  if constexpr (kTile) {
    if (p.fwd_tile && p.has_dropout)
      return launch_fwd_ws_score<E, kD, kBN, kStages, kCWG, kScoreTileDrop>(p, maps, s, err);
    if (p.fwd_tile) return launch_fwd_ws_score<E, kD, kBN, kStages, kCWG, kScoreTile>(p, maps, s, err);
    if (p.arith_drop) return launch_fwd_ws_score<E, kD, kBN, kStages, kCWG, kScoreDrop>(p, maps, s, err);
  }
  if (p.arith_only) return launch_fwd_ws_score<E, kD, kBN, kStages, kCWG, kScoreArith>(p, maps, s, err);
  return launch_fwd_ws_score<E, kD, kBN, kStages, kCWG, kScoreBand>(p, maps, s, err);
}

// Whether the warp-specialized kernel takes the call, and its tensor maps
// (boxes of kBM query rows, kBN keys): band-only options (seqlens and packed
// sequences included) and a positive scale (its softmax takes the row maxima
// unscaled: fwd_tile.cuh's kFold), or the arithmetic options (softcap,
// ALiBi: score_arith.cuh, any scale), or those and one bias or mask
// (p.fwd_tile; a mask's box is 128 keys, one 128-byte row: tiles of 128
// keys, or 64 in pairs); tensors
// the copy engine can address. FLASHATTN_CUDA_WS=0 keeps the cp.async
// kernels (FLASHATTN_CUDA_WS_ARITH=0 keeps them for the arithmetic options:
// p.arith_only; FLASHATTN_CUDA_WS_TILE=0 for a bias or mask: p.fwd_tile).
template <typename E>
bool fwd_ws_maps(const fa__cuda_params &p, int kBM, int kBN, CUtensorMap (&maps)[4]) {
  const char *env = getenv("FLASHATTN_CUDA_WS");
  if ((env && strcmp(env, "0") == 0) || p.variant != 0) return false;
  if (p.has_extras ? !(p.arith_only || p.fwd_tile || p.arith_drop) : !(p.scale_log2 > 0.f)) return false;
  const int64_t B = fa__cuda_stored_batch(p);
  if (!tma_addressable(p.q, p.qs, B, p.Hq, p.Lq_rows, p.D) || !tma_addressable(p.k, p.ks, B, p.Hkv, p.Lk_rows, p.D) ||
      !tma_addressable(p.v, p.vs, B, p.Hkv, p.Lk_rows, p.Dv))
    return false;
  constexpr bool bf = std::is_same<E, bf16_t>::value;
  if (!tma_map_4d(&maps[0], p.q, p.qs, B, p.Hq, p.Lq_rows, p.D, kBM, bf) ||
      !tma_map_4d(&maps[1], p.k, p.ks, B, p.Hkv, p.Lk_rows, p.D, kBN, bf) ||
      !tma_map_4d(&maps[2], p.v, p.vs, B, p.Hkv, p.Lk_rows, p.Dv, kBN, bf))
    return false;
  maps[3] = maps[2];  // (not read without p.fwd_tile)
  if (!p.fwd_tile) return true;
  // (a mask's box is 128 keys, one 128-byte row: a tile's or a pair's)
  return (p.fwd_tile != FA_CUDA_TILE_MASK || kBN % 64 == 0) && tma_map_tile_of(p, kBM, bf, &maps[3]);
}

// Tile shapes (warpgroups of 64 query rows x keys per tile, K/V slots),
// chosen on an H200 (bf16, 2026-11-29, bench/results/2026-11-29-h200-wgmma-*):
//   64:  3 x 128, 3 slots, one tile at a time (192 rows; 120 KiB of shared
//        memory); warpgroup tile skipping only under a band. Against it:
//        pipelined (-6%: spills at 168 registers), 2 x 128 (-10%), 2 x 192
//        (-10%), Q in registers (-4%, +3% causal at L = 16384), 2 slots (=).
//   128: 2 x 128, 2 slots, pipelined (128 rows; 161 KiB). Against it: one
//        tile at a time (-1..4%), 3 x 64 pipelined (-2..+3%).
//   per-element options (mask, bias, ALiBi, softcap, dropout): 2 x 128, 2
//   slots, one tile at a time (their scoring needs the pipeline's registers).
// The warp-specialized kernel (fwd_ws_kernel.cuh, the default for band-only
// calls) was measured the same way on 2026-12-01
// (bench/results/2026-12-01-h200-ws-fwd-d256.txt): at D = 64 its 3 x 128
// against 2 x 128 (0..-22%) and 2 x 192 (-2..-16%, 64 bytes of spills), at
// D = 128 2 slots against 3 (equal); at D = 256, 2 x 64 keys: 2.3-3.1x the
// mma.sync kernel, 1.7-2.2x FLASH. With softcap and ALiBi (kArith) D = 64
// keeps 3 x 128 (172 bytes of spills): 2 x 128 without spills ran ALiBi at
// 0.84-0.97x, softcap at 0.99-1.08x (bench/results/2026-12-06-h100-arith-options.txt).
// FLASHATTN_CUDA_VARIANT=1 (A/B timing in one process): 128 one tile at a time;
// 2: 128 pipelined on cp.async (the warp-specialized kernel's predecessor).
// The losing warp-specialized shapes (176-key tiles without a band, FA3's,
// 6-20% slower with 168 bytes of spills; D 64 on 2 warpgroups) were variants
// 4 and 5 until their compile time went to the D = 256 kernel.
template <typename E>
fa_status launch_fwd_wgmma(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  CUtensorMap maps[4];
  if (kd == 256) {
    // 2 x 64 rows against 64-key tiles, 2 slots (193 KiB of shared memory):
    // O is 128 registers a thread, S 32, P 16 under the consumers' 240
    // (FlashAttention 3 takes 128 x 80). Everything else at D = 256 (per-
    // element options other than softcap and ALiBi, tensors the copy engine
    // cannot address) stays on the mma.sync kernel.
    if (fwd_ws_maps<E>(p, 128, 64, maps)) return launch_fwd_ws_cfg<E, 256, 64, 2, 2, true>(p, maps, s, err);
    return std::is_same<E, bf16_t>::value ? fa__cuda_fast_fwd_bf16(p, kd, s, err)
                                          : fa__cuda_fast_fwd_f16(p, kd, s, err);
  }
  if (kd != 64 && kd != 128) {
    fa__err_set(err, "cuda: no wgmma forward kernel for head-dim bucket %d", kd);
    return FA_ERR_INTERNAL;
  }
  const bool band = p.wl >= 0 || p.wr >= 0;
  if (kd == 64) {
    // a bias or mask: 2 x 128 (the tile's reads on 3 x 128's 160 registers spilled 1.1 KiB)
    if (p.fwd_tile && fwd_ws_maps<E>(p, 128, 128, maps))
      return p.has_dropout ? launch_fwd_ws_score<E, 64, 128, 3, 2, kScoreTileDrop>(p, maps, s, err)
                           : launch_fwd_ws_score<E, 64, 128, 3, 2, kScoreTile>(p, maps, s, err);
    // dropout: 2 x 128 too (its keep bits on 3 x 128's 160 registers spilled 0.5 KiB)
    if (p.arith_drop && fwd_ws_maps<E>(p, 128, 128, maps))
      return launch_fwd_ws_score<E, 64, 128, 3, 2, kScoreDrop>(p, maps, s, err);
    if (!p.fwd_tile && !p.arith_drop && fwd_ws_maps<E>(p, 192, 128, maps))
      return launch_fwd_ws_cfg<E, 64, 128, 3, 3, false>(p, maps, s, err);
    if (p.has_extras) return launch_fwd_wgmma_cfg<E, 64, 2, 128, 2, false, true>(p, s, err);
    return band ? launch_fwd_wgmma_cfg<E, 64, 3, 128, 3, false, false, true>(p, s, err)
                : launch_fwd_wgmma_cfg<E, 64, 3, 128, 3, false, false, false>(p, s, err);
  }
  if (fwd_ws_maps<E>(p, 128, 128, maps)) return launch_fwd_ws_cfg<E, 128, 128, 2, 2, true>(p, maps, s, err);
  if (p.has_extras) return launch_fwd_wgmma_cfg<E, 128, 2, 128, 2, false, true>(p, s, err);
  if (p.variant == 1) return launch_fwd_wgmma_cfg<E, 128, 2, 128, 2, false, false>(p, s, err);
  return launch_fwd_wgmma_cfg<E, 128, 2, 128, 2, true, false>(p, s, err);
}

}  // namespace fa_cuda

#endif
