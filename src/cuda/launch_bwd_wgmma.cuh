// Backward launch on Hopper (sm_90a wgmma dK/dV kernel, dQ fused or, in
// deterministic mode, the wgmma dQ kernel after it) for one
// element type; launch_bwd_wgmma_<dtype>.cu instantiate it for sm_90a only.
// Preconditions as launch_bwd: dsum filled, dq_acc zero when fused.
// Band-only calls, per-sequence lengths too (or with softcap and ALiBi as
// their only per-element options: p.arith_only; or those and one bias or
// one mask: p.bwd_tile; dBias comes after, backend.cu; or those and dropout:
// p.arith_drop) take the warp-specialized kernel
// (bwd_ws_kernel.cuh) where the copy engine can address the tensors;
// deterministic ones too where backend.cu gave them p.dq_turn (and a zeroed
// dq_acc), and then this launch also converts dq_acc into dq.
// FLASHATTN_CUDA_WS=0 or FLASHATTN_CUDA_WS_BWD=0 keep bwd_wgmma_kernel for
// them.
#ifndef FA_CUDA_LAUNCH_BWD_WGMMA_CUH
#define FA_CUDA_LAUNCH_BWD_WGMMA_CUH

#include <type_traits>

#include "bwd_dq_wgmma_kernel.cuh"
#include "bwd_wgmma_kernel.cuh"
#include "bwd_wide_wgmma_kernel.cuh"
#include "bwd_ws_kernel.cuh"
#include "dbias_sum_wgmma_kernel.cuh"
#include "launch.cuh"
#include "tma_map.cuh"

namespace fa_cuda {

template <typename E, int kD, int kBM, int kStages, bool kDet, int kScore>
fa_status launch_bwd_ws_score(const fa__cuda_params &p, const CUtensorMap (&m)[6], cudaStream_t s, fa__err *err) {
  using cfg = bwd_ws_cfg<kD, kBM, kStages, kDet, kScore>;
  auto kernel = bwd_ws_kernel<E, kD, kBM, kStages, kDet, kScore>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward (warp-specialized): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, cfg::kBN, "backward dK/dV (warp-specialized)");
  fa__cuda_params q = p;
  const int64_t heads = grid.x;
  if (kDet) {
    // as many heads interleaved as tile-major order has in flight (one block
    // per multiprocessor): a head's key tiles start that many blocks apart
    int dev = 0, sms = 0;
    FA_CUDA_TRY(cudaGetDevice(&dev), "backward (warp-specialized): device");
    FA_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "backward (warp-specialized): SMs");
    const int64_t per_sm = sms / static_cast<int64_t>(grid.y);
    q.head_group = per_sm < 1 ? 1 : per_sm < heads ? per_sm : heads;
  } else {
    // (A/B instrument: FLASHATTN_CUDA_BWD_GROUP=g interleaves g heads, 0 or
    // unset tile-major)
    const char *env = getenv("FLASHATTN_CUDA_BWD_GROUP");
    const int64_t g = env ? atoll(env) : 0;
    q.head_group = g < 1 ? 0 : g < heads ? g : heads;
  }
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(q, m[0], m[1], m[2], m[3], m[4], m[5]);
  FA_CUDA_CHECK_LAUNCH("backward (warp-specialized) kernel launch");
  return FA_OK;
}

template <typename E, int kD, int kBM, int kStages, bool kDet>
fa_status launch_bwd_ws_cfg(const fa__cuda_params &p, const CUtensorMap (&m)[6], cudaStream_t s, fa__err *err) {
  if (p.bwd_tile && p.has_dropout) return launch_bwd_ws_score<E, kD, kBM, kStages, kDet, kScoreTileDrop>(p, m, s, err);
  if (p.bwd_tile) return launch_bwd_ws_score<E, kD, kBM, kStages, kDet, kScoreTile>(p, m, s, err);
  if (p.arith_only) return launch_bwd_ws_score<E, kD, kBM, kStages, kDet, kScoreArith>(p, m, s, err);
  if (p.arith_drop) return launch_bwd_ws_score<E, kD, kBM, kStages, kDet, kScoreDrop>(p, m, s, err);
  return launch_bwd_ws_score<E, kD, kBM, kStages, kDet, kScoreBand>(p, m, s, err);
}

// Whether the warp-specialized backward takes the call, and its tensor maps
// (Q, K, V, dO in boxes of kBM or 128 rows; the f32 dQ accumulator; the
// bias or mask, p.bwd_tile): backend.cu set p.ws_stats where
// fa__cuda_ws_bwd_shape allowed it.
template <typename E>
bool bwd_ws_maps(const fa__cuda_params &p, int kBM, CUtensorMap (&m)[6]) {
  if (!p.ws_stats || !p.dq_acc) return false;
  const int64_t B = fa__cuda_stored_batch(p);
  if (!tma_addressable(p.q, p.qs, B, p.Hq, p.Lq_rows, p.D) || !tma_addressable(p.k, p.ks, B, p.Hkv, p.Lk_rows, p.D) ||
      !tma_addressable(p.v, p.vs, B, p.Hkv, p.Lk_rows, p.Dv) ||
      !tma_addressable(p.dout, p.dos, B, p.Hq, p.Lq_rows, p.Dv))
    return false;
  constexpr bool bf = std::is_same<E, bf16_t>::value;
  if (!tma_map_4d(&m[0], p.q, p.qs, B, p.Hq, p.Lq_rows, p.D, kBM, bf) ||
      !tma_map_4d(&m[1], p.k, p.ks, B, p.Hkv, p.Lk_rows, p.D, 128, bf) ||
      !tma_map_4d(&m[2], p.v, p.vs, B, p.Hkv, p.Lk_rows, p.Dv, 128, bf) ||
      !tma_map_4d(&m[3], p.dout, p.dos, B, p.Hq, p.Lq_rows, p.Dv, kBM, bf) ||
      !tma_map_f32_rows(&m[4], p.dq_acc, B, p.Hq, p.Lq_rows, p.D, kBM))
    return false;
  m[5] = m[0];  // (not read without p.bwd_tile)
  return !p.bwd_tile || tma_map_tile_of(p, kBM, bf, &m[5]);
}

// dQ on wgmma by a kernel of its own (bwd_dq_wgmma_kernel.cuh: the
// deterministic mode's, and D = 256's in both modes), or with kDBias dBias
// instead (launch_dbias_wgmma): two warpgroups x 64 query rows, key tiles of
// kDqBN.
template <typename E, int kD, int kDqBN, bool kFull, bool kArith = false, int kTile = 0, bool kDBias = false,
          bool kDrop = false>
fa_status launch_dq_wgmma(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using dcfg = dq_wgmma_cfg<kD, kDqBN>;
  auto dq_kernel = bwd_dq_wgmma_kernel<E, kD, kDqBN, kFull, kArith, kTile, kDBias, kDrop>;
  FA_CUDA_TRY(fa__cuda_smem_optin(dq_kernel, dcfg::smem_bytes), "backward dq (wgmma): shared memory limit");
  FA_CUDA_ROWS_GRID(dgrid, p.B * p.Hq, p.Lq, dcfg::kBM, "backward dQ (wgmma)");
  dq_kernel<<<dgrid, dcfg::kThreads, dcfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("backward dq (wgmma) kernel launch");
  return FA_OK;
}

template <typename E, int kD, int kBM, bool kFull>
fa_status launch_bwd_wgmma_cfg(const fa__cuda_params &p, int deterministic, cudaStream_t s, fa__err *err) {
  // (per-element options: the arithmetic ones, p.arith_only, or those and a bias or mask, p.bwd_tile, or
  // those and dropout, p.arith_drop, where backend.cu gave the call p.ws_stats)
  if (!kFull || p.arith_only || p.bwd_tile || p.arith_drop) {
    CUtensorMap maps[6];
    if ((!deterministic || p.dq_turn) && bwd_ws_maps<E>(p, kBM, maps)) {
      // (3 slots measured no better than 2: bench/results/2026-12-01-h200-ws-bwd.txt; that A/B
      // variant's instantiations went for the build time)
      if (!deterministic) return launch_bwd_ws_cfg<E, kD, kBM, 2, false>(p, maps, s, err);
      const fa_status st = launch_bwd_ws_cfg<E, kD, kBM, 2, true>(p, maps, s, err);
      return st == FA_OK ? fa__cuda_dq_convert(p, s, err) : st;
    }
  }
  using cfg = bwd_wgmma_cfg<kD, kBM>;
  auto kernel = bwd_wgmma_kernel<E, kD, kBM, kFull>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward (wgmma): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, cfg::kBN, "backward dK/dV (wgmma)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p, deterministic ? 0 : 1);
  FA_CUDA_CHECK_LAUNCH("backward (wgmma) dk/dv kernel launch");
  if (!deterministic) return FA_OK;
  // dQ in its own kernel, key tiles of 128 (D = 64) or 64 (D = 128)
  constexpr int kDqBN = kD == 64 ? 128 : 64;
  return launch_dq_wgmma<E, kD, kDqBN, kFull>(p, s, err);
}

// Head-dim bucket 256 (bwd_wide_wgmma_kernel.cuh). With dq_apart (the
// launchers' `deterministic`: backend.cu sets it in both modes here,
// wide_dq_apart) the wide kernel leaves dQ to the wgmma dQ kernel after it,
// 64-key tiles (FLASHATTN_CUDA_DQ_WGMMA=0: the mma.sync dQ kernel,
// launch_bwd.cuh's, compiled with the sm_80 / sm_90 kernels; an A/B switch);
// without, it fuses dQ (f32 atomics).
template <typename E, bool kFull, bool kArith, int kTile = 0, bool kDrop = false>
fa_status launch_bwd_wide_wgmma_as(const fa__cuda_params &p, int dq_apart, cudaStream_t s, fa__err *err) {
  using cfg = bwd_wide_wgmma_cfg;
  auto kernel = bwd_wide_wgmma_kernel<E, kFull, kArith, kTile, kDrop>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "backward (wgmma, D = 256): shared memory limit");
  FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, cfg::kBN, "backward dK/dV (wgmma, D = 256)");
  kernel<<<grid, cfg::kThreads, cfg::smem_bytes, s>>>(p, dq_apart ? 0 : 1);
  FA_CUDA_CHECK_LAUNCH("backward (wgmma, D = 256) kernel launch");
  if (!dq_apart) return FA_OK;
  const char *env = getenv("FLASHATTN_CUDA_DQ_WGMMA");
  if (!env || atoi(env) != 0) return launch_dq_wgmma<E, 256, 64, kFull, kArith, kTile, false, kDrop>(p, s, err);
  return std::is_same<E, bf16_t>::value ? fa__cuda_fast_bwd_dq_bf16(p, 256, s, err)
                                        : fa__cuda_fast_bwd_dq_f16(p, 256, s, err);
}

// Softcap and ALiBi alone (p.arith_only) take their arithmetic form of both
// kernels; the kFull form reads every option per element and ran at
// 0.45-0.51x the band-only backward (bench/results/2026-12-06-h100-arith-options.txt).
// One bias or mask (p.bwd_tile; with or without softcap and ALiBi) takes
// that form with the tensor read from global memory (kTile); dropout (with
// or without softcap and ALiBi: p.arith_drop; with a bias or mask too:
// p.bwd_tile) with the keep bits (kDrop).
template <typename E, bool kFull>
fa_status launch_bwd_wide_wgmma(const fa__cuda_params &p, int dq_apart, cudaStream_t s, fa__err *err) {
  if constexpr (kFull) {
    if (p.arith_only) return launch_bwd_wide_wgmma_as<E, false, true>(p, dq_apart, s, err);
    if (p.arith_drop) return launch_bwd_wide_wgmma_as<E, false, true, 0, true>(p, dq_apart, s, err);
    const bool drop = p.has_dropout;  // (p.bwd_tile is set with dropout only where the keep bits can be made)
    if (drop && p.bwd_tile == FA_CUDA_TILE_BIAS)
      return launch_bwd_wide_wgmma_as<E, false, true, FA_CUDA_TILE_BIAS, true>(p, dq_apart, s, err);
    if (drop && p.bwd_tile == FA_CUDA_TILE_MASK)
      return launch_bwd_wide_wgmma_as<E, false, true, FA_CUDA_TILE_MASK, true>(p, dq_apart, s, err);
    if (drop) return launch_bwd_wide_wgmma_as<E, kFull, false>(p, dq_apart, s, err);
    if (p.bwd_tile == FA_CUDA_TILE_BIAS)
      return launch_bwd_wide_wgmma_as<E, false, true, FA_CUDA_TILE_BIAS>(p, dq_apart, s, err);
    if (p.bwd_tile == FA_CUDA_TILE_MASK)
      return launch_bwd_wide_wgmma_as<E, false, true, FA_CUDA_TILE_MASK>(p, dq_apart, s, err);
  }
  return launch_bwd_wide_wgmma_as<E, kFull, false>(p, dq_apart, s, err);
}

// Tiles: 2 warpgroups x 64 keys; query tiles of 128 (D = 64) or 64
// (D = 128), so that dQ splits into one 64 x 64 block per warpgroup.
template <typename E, bool kFull>
fa_status launch_bwd_wgmma_full(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_bwd_wgmma_cfg<E, 64, 128, kFull>(p, det, s, err);
    case 128: return launch_bwd_wgmma_cfg<E, 128, 64, kFull>(p, det, s, err);
    case 256: return launch_bwd_wide_wgmma<E, kFull>(p, det, s, err);
    default: fa__err_set(err, "cuda: no wgmma backward kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

// dBias of a bias summed over the batch and / or the heads, and maybe the
// rows (dbias_sum_wgmma_kernel.cuh): one block a dBias tile, the pairs (and
// row tiles) inside.
template <typename E, int kD>
fa_status launch_dbias_sum_wgmma(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  using cfg = dbias_sum_cfg<kD>;
  auto kernel = dbias_sum_wgmma_kernel<E, kD>;
  FA_CUDA_TRY(fa__cuda_smem_optin(kernel, cfg::smem_bytes), "dBias (wgmma, summed): shared memory limit");
  const int64_t own = (p.dbias_sum_b ? 1 : p.B) * (p.dbias_sum_h ? 1 : p.Hq);
  const int64_t x = own * ((p.Lk + cfg::kBN - 1) / cfg::kBN), y = p.dbias_sum_i ? 1 : (p.Lq + cfg::kBM - 1) / cfg::kBM;
  if (x > INT32_MAX || y > 65535) {
    fa__err_set(err, "cuda: dBias (summed) grid of %lld x %lld blocks is too large", (long long)x, (long long)y);
    return FA_ERR_UNSUPPORTED;
  }
  kernel<<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), cfg::kThreads, cfg::smem_bytes, s>>>(p);
  FA_CUDA_CHECK_LAUNCH("dBias (wgmma, summed) kernel launch");
  return FA_OK;
}

// dBias on tensor cores (p.dbias: a bias of the inputs' dtype, p.bwd_tile).
// No dim summed: the wgmma dQ kernel's S, dP and dS, the bias read from
// global memory, each dS stored once, instead of dQ += dS K; the dQ
// kernel's tiles (kDqBN keys) per bucket. Summed over b, h and / or the
// rows: launch_dbias_sum_wgmma.
template <typename E>
fa_status launch_dbias_wgmma(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err) {
  constexpr int kBias = FA_CUDA_TILE_BIAS;
  const bool sum = p.dbias_sum_b || p.dbias_sum_h || p.dbias_sum_i;
  switch (kd) {
    case 64:
      return sum ? launch_dbias_sum_wgmma<E, 64>(p, s, err)
                 : launch_dq_wgmma<E, 64, 128, false, true, kBias, true>(p, s, err);
    case 128:
      return sum ? launch_dbias_sum_wgmma<E, 128>(p, s, err)
                 : launch_dq_wgmma<E, 128, 64, false, true, kBias, true>(p, s, err);
    case 256:
      return sum ? launch_dbias_sum_wgmma<E, 256>(p, s, err)
                 : launch_dq_wgmma<E, 256, 64, false, true, kBias, true>(p, s, err);
    default: fa__err_set(err, "cuda: no wgmma dBias kernel for head-dim bucket %d", kd); return FA_ERR_INTERNAL;
  }
}

template <typename E>
fa_status launch_bwd_wgmma(const fa__cuda_params &p, int kd, int det, cudaStream_t s, fa__err *err) {
  return p.has_extras ? launch_bwd_wgmma_full<E, true>(p, kd, det, s, err)
                      : launch_bwd_wgmma_full<E, false>(p, kd, det, s, err);
}

}  // namespace fa_cuda

#endif
