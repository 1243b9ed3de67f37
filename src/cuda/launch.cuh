// Host-side glue shared by the launch files: error reporting in the
// library's terms, and the entry points backend.cu dispatches to.
#ifndef FA_CUDA_LAUNCH_CUH
#define FA_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "../core/backend.h"
#include "params.cuh"

// The CUDA runtime's word for a failure, as FA_ERR_DEVICE with what we did.
inline fa_status fa__cuda_fail(cudaError_t e, const char *what, fa__err *err) {
  fa__err_set(err, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return FA_ERR_DEVICE;
}

#define FA_CUDA_TRY(expr, what)                                 \
  do {                                                          \
    const cudaError_t e_ = (expr);                              \
    if (e_ != cudaSuccess) return fa__cuda_fail(e_, what, err); \
  } while (0)

// After a launch: a bad configuration shows here, a fault only later.
#define FA_CUDA_CHECK_LAUNCH(what) FA_CUDA_TRY(cudaGetLastError(), what)

// Whether a Hopper backward call has the shape the warp-specialized kernel
// takes (bwd_ws_kernel.cuh: band-only options, p.arith_only, p.bwd_tile or p.arith_drop;
// per-sequence lengths, padded or packed, too) and the switches allow it
// (FLASHATTN_CUDA_WS=0, FLASHATTN_CUDA_WS_BWD=0, FLASHATTN_CUDA_VARIANT=2 keep
// bwd_wgmma_kernel; FLASHATTN_CUDA_WS_LENGTHS=0 for calls with lengths).
// backend.cu asks it before allocating p.ws_stats; the launcher then takes
// the call where p.ws_stats is set and the copy engine can address the
// tensors.
inline bool fa__cuda_ws_bwd_shape(const fa__cuda_params &p) {
  const char *all = getenv("FLASHATTN_CUDA_WS"), *bwd = getenv("FLASHATTN_CUDA_WS_BWD");
  if ((all && strcmp(all, "0") == 0) || (bwd && strcmp(bwd, "0") == 0) || p.variant == 2) return false;
  const char *lengths = getenv("FLASHATTN_CUDA_WS_LENGTHS");
  if ((p.seqlens_q || p.seqlens_k || p.cu_q || p.cu_k) && lengths && strcmp(lengths, "0") == 0) return false;
  return !p.has_extras || p.arith_only || p.bwd_tile || p.arith_drop;
}

// The grid of a row-tiled kernel: (sequences x heads) blocks along x, tiles of
// `tile` rows along y. CUDA caps gridDim.y at 65535 (a launch past it fails
// with "invalid argument"), so a longer sequence is refused here in the
// library's terms, naming the limit for this kernel's tile.
inline fa_status fa__cuda_rows_grid(int64_t bh, int64_t rows, int tile, const char *what, dim3 *grid, fa__err *err) {
  const int64_t tiles = (rows + tile - 1) / tile;
  if (tiles > 65535 || bh > 2147483647) {
    fa__err_set(err,
                "cuda: %s: %lld rows (tiles of %d) x %lld sequence-heads is over CUDA's grid limits "
                "(at most %lld rows, 2^31 - 1 sequence-heads)",
                what, (long long)rows, tile, (long long)bh, 65535LL * tile);
    return FA_ERR_UNSUPPORTED;
  }
  *grid = dim3(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
  return FA_OK;
}

// The persistent grid of the warp-specialized forwards (fwd_ws_kernel.cuh,
// fwd_fp8_ws_kernel.cuh): one block per multiprocessor (their shared memory
// allows no second), or fewer when there are fewer work tiles of `bm` rows;
// and fwd_ws_block's work order: a head's row tiles side by side where that
// measured faster (head-dim bucket 128, no band), else heads innermost.
// Per-sequence lengths (seqlens, packed) took heads innermost until
// 2026-12-07, for balance (a tile costs its sequence's keys), but lost
// the side-by-side tiles' shared K / V in L2: packed sequences of 2048 ran
// at 0.81x the same tokens dense (bench/gpu/varlen.py).
struct fa__cuda_ws_grid {
  unsigned blocks;
  int64_t row_tiles;
  bool heads_inner;
};

inline fa_status fa__cuda_ws_grid_of(const fa__cuda_params &p, int bm, int kd, const char *what, fa__cuda_ws_grid *out,
                                     fa__err *err) {
  int dev = 0, sms = 0;
  FA_CUDA_TRY(cudaGetDevice(&dev), what);
  FA_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), what);
  out->row_tiles = (p.Lq + bm - 1) / bm;
  const int64_t works = p.B * p.Hq * out->row_tiles;
  out->blocks = static_cast<unsigned>(works < sms ? works : sms);
  out->heads_inner = p.ws_order ? p.ws_order == 1 : kd != 128 || p.wl >= 0 || p.wr >= 0;
  return FA_OK;
}

#define FA_CUDA_ROWS_GRID(grid, bh, rows, tile, what)                                   \
  dim3 grid;                                                                            \
  do {                                                                                  \
    const fa_status st_ = fa__cuda_rows_grid((bh), (rows), (tile), (what), &grid, err); \
    if (st_ != FA_OK) return st_;                                                       \
  } while (0)

// Raises a kernel's dynamic shared-memory limit when it needs more than the
// 48 KiB every kernel gets without asking.
template <typename K>
inline cudaError_t fa__cuda_smem_optin(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

// Shared memory of the widest backward (bwd_wide_kernel.cuh: head-dim bucket
// 256) with 1 or 2 stages of Q and dO: K, V [64][256] and P^T, dS^T [64][64]
// in 16 bits; a stage is Q, dO [64][256] and their 64 rows' LSE and dsum.
constexpr size_t fa__cuda_bwd_wide_smem(int stages) {
  return 2 * (2 * 64 * 256 + 2 * 64 * 64) + stages * (2 * (2 * 64 * 256) + 2 * 64 * 4);
}

// The generic SIMT path: every dtype (f32 included), any strides, every
// option; f32 arithmetic throughout. Correct first, not fast.
fa_status fa__cuda_generic_fwd(const fa__cuda_params &p, cudaStream_t s, fa__err *err);
// dsum must be filled (fa__cuda_dsum) first.
fa_status fa__cuda_generic_bwd(const fa__cuda_params &p, cudaStream_t s, fa__err *err);
// rowsum(dO * O) into p.dsum (both paths).
fa_status fa__cuda_dsum(const fa__cuda_params &p, cudaStream_t s, fa__err *err);
// dBias from the recomputed dS, summed over its broadcast dimensions in a
// fixed order (deterministic); dbias strides 0 on the summed dims.
fa_status fa__cuda_dbias(const fa__cuda_params &p, void *dbias, int dbias_dtype, const int64_t shape[4],
                         const int64_t stride[4], cudaStream_t s, fa__err *err);

// Tensor-core path, f16 / bf16 with 16-byte aligned rows. kd: head-dim
// bucket (64, 128, 256 forward; 64, 128 backward).
fa_status fa__cuda_fast_fwd_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
fa_status fa__cuda_fast_fwd_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
// The same on Hopper with wgmma (sm_90a code: call only on a compute
// capability 9.0 device, and only when FA_HAVE_SM90A); kd 64, 128 or 256.
fa_status fa__cuda_wgmma_fwd_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
fa_status fa__cuda_wgmma_fwd_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
// The FP8 forward (e4m3 q, k, v; o in bf16 or f16 by the function's name):
// sm_90a code (FA_HAVE_SM90A, a 9.0 device); kd 128 or 256 (bucket of
// max(D, Dv); D = 64 runs zero-padded in 128).
fa_status fa__cuda_fp8_fwd_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
fa_status fa__cuda_fp8_fwd_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
// The backward's dK/dV (and fused dQ) kernel on wgmma, same contract as
// fa__cuda_fast_bwd_*; sm_90a code (FA_HAVE_SM90A, a 9.0 device); kd 64, 128 or 256.
fa_status fa__cuda_wgmma_bwd_bf16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err);
fa_status fa__cuda_wgmma_bwd_f16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err);
// dBias on wgmma into p.dbias after the backward (dsum filled): unsummed,
// the elements no block writes (a band, lengths) zeroed by the caller
// (backend.cu dbias); summed over b, h and / or the rows (p.dbias_sum_b,
// _h, _i), every element written; sm_90a code; kd 64, 128 or 256.
fa_status fa__cuda_wgmma_dbias_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
fa_status fa__cuda_wgmma_dbias_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
// deterministic: dQ by its own kernel (no atomics); else fused with f32
// atomics into p.dq_acc, which must be zero, then converted. kd 64, 128 or
// 256 (that one only where fa__cuda_bwd_wide_smem(1) fits the device).
fa_status fa__cuda_fast_bwd_bf16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err);
fa_status fa__cuda_fast_bwd_f16(const fa__cuda_params &p, int kd, int deterministic, cudaStream_t s, fa__err *err);
// The deterministic mode's dQ kernel alone (after a dK/dV kernel without
// dQ; the wgmma one at bucket 256); kd 64, 128 or 256.
fa_status fa__cuda_fast_bwd_dq_bf16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
fa_status fa__cuda_fast_bwd_dq_f16(const fa__cuda_params &p, int kd, cudaStream_t s, fa__err *err);
// dq_acc * scale -> dq (dtype), rows of each sequence only.
fa_status fa__cuda_dq_convert(const fa__cuda_params &p, cudaStream_t s, fa__err *err);

#endif
