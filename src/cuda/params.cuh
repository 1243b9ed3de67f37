// The problem as the kernels see it: plain pointers, element strides and the
// resolved options, copied by value into every launch. Built once on the host
// from the validated fa__problem (params.cu); kernels never see fa_tensor.
#ifndef FA_CUDA_PARAMS_CUH
#define FA_CUDA_PARAMS_CUH

#include <stdint.h>

#include "../core/problem.h"

// fa__cuda_params.fwd_tile
enum { FA_CUDA_TILE_BIAS = 1, FA_CUDA_TILE_MASK = 2 };

// Element strides of dims 0..2 of a [B, H, L, D] tensor (dim 3 is contiguous).
struct fa__cuda_strides {
  int64_t b, h, r;
};

struct fa__cuda_params {
  // forward inputs / outputs
  const void *q, *k, *v;
  void *o;
  float *lse;  // forward: output (may be NULL); backward: input
  fa__cuda_strides qs, ks, vs, os, lses;

  // backward
  const void *dout;
  void *dq, *dk, *dv;
  fa__cuda_strides dos, dqs, dks, dvs;
  float *dq_acc;  // [Bt, Hq, Lq_rows, D] f32, fused backward only
  float *dsum;    // [Bt, Hq, Lq_rows] f32: rowsum(dO * O) (the D of the paper)
  // the warp-specialized backward's copy of LSE and dsum, [Bt * Hq][2][ws_pitch]
  // (rows padded to whole tiles with zeros, so that a tile is one aligned bulk
  // copy; packed sequences: from fa__cuda_ws_row0, and every row up to the
  // pitch finite, so that a sequence's last tile may read past it), or NULL
  float *ws_stats;
  int64_t ws_pitch;
  // deterministic warp-specialized backward: per (sequence, query head, query
  // tile) the key tile whose dQ reduction comes next (zeroed by the caller;
  // bwd_ws_kernel.cuh's bwd_ws_turn), dq_turn_pitch counters per (stored batch,
  // head), or NULL
  int *dq_turn;
  int64_t dq_turn_pitch;
  // how many sequence-heads the warp-specialized backward's grid interleaves
  // (grid_order.cuh head_group_block; set by its launch): deterministic, each
  // head's key tiles last first; otherwise first first, 0 = tile-major
  int64_t head_group;

  // boolean mask and additive bias, [B, Hq, Lq, Lk] logical, stride 0 broadcasts
  const uint8_t *mask;
  int64_t mask_s[4];
  const void *bias;
  int bias_dtype;  // fa_dtype
  int64_t bias_s[4];
  const float *alibi;  // [Hq] or NULL

  // FP8 forward: f32 descales [B, Hkv] (element strides, 0 = broadcast) or NULL = 1
  const float *q_descale, *k_descale, *v_descale;
  int64_t qds[2], kds[2], vds[2];

  // lengths (device memory) or NULL
  const int32_t *seqlens_q, *seqlens_k, *cu_q, *cu_k;

  int64_t B, Hq, Hkv, group;
  int64_t Lq, Lk;            // padded lengths (or longest sequence when packed)
  int64_t Lq_rows, Lk_rows;  // dim 2 of q and k as stored
  int D, Dv;
  int dtype;  // fa_dtype of q, k, v, o, ...
  int varlen;

  float scale, scale_log2, softcap;
  int64_t wl, wr;
  int bottom_right;
  int64_t q_off, k_off;  // positions of row 0 and key 0 (fa_options.q_offset, k_offset)

  int has_dropout;
  uint64_t seed;
  uint32_t offset, threshold;
  float dscale;

  int has_extras;      // mask, bias, alibi, softcap or dropout: the per-element path
  int arith_only;      // the extras are softcap and / or ALiBi only: the warp-specialized kernels take them
                       // (score_arith.cuh) unless FLASHATTN_CUDA_WS_ARITH=0
  int arith_drop;      // those and dropout (dropout_tile.cuh's keep bits: k_off a multiple of 4), unless
                       // FLASHATTN_CUDA_WS_DROP=0
  int fwd_tile;        // the forward's one per-element tensor, when the warp-specialized forward may copy it
                       // tile by tile (fwd_ws_kernel.cuh's kScoreTile[Drop]): FA_CUDA_TILE_BIAS or _MASK, else 0
  int bwd_tile;        // the same for the backward (dBias, when asked for, by a kernel of its own)
  int64_t tile_s[4];   // with fwd_tile: that tensor's element strides (mask_s or bias_s; 0: broadcast)
  void *dbias;         // the wgmma dBias kernel's output (launch_bwd_wgmma.cuh launch_dbias_wgmma), else NULL:
  int64_t dbias_s[4];  // [B, Hq, Lq, Lk] of the inputs' dtype; dims 0, 1, 2 may be summed:
  int dbias_sum_b;     // dBias is [1, ...]: the sum over the batch (dbias_sum_wgmma_kernel.cuh)
  int dbias_sum_h;     // dBias is [., 1, ...]: the sum over the query heads
  int dbias_sum_i;     // dBias is [., ., 1, Lk]: the sum over the rows too
  int dbias_pairs;     // its rows start at 4-byte boundaries: two elements a store
  int ws_order;        // FLASHATTN_CUDA_WS_ORDER=heads|rows: the warp-specialized forwards' work order for every
                       // call (A/B timing in one process); 0: fa__cuda_ws_grid_of's rule
  int variant;         // FLASHATTN_CUDA_VARIANT: selects alternative tile configurations, when a
                       // launch file compiles some, for A/B timing in one process (anchors.py --variants)
};

// The batches the tensors store: packed sequences (cu_seqlens) share one.
__host__ __device__ inline int64_t fa__cuda_stored_batch(const fa__cuda_params &p) {
  return p.cu_q || p.cu_k ? 1 : p.B;
}

// Where sequence b's rows start in p.ws_stats, within its stored batch's
// block: at its first row q_row0 (0 in the padded layout); packed, at
// q_row0 rounded down to 4, plus 4 b, so that every query tile's bulk copy
// starts 16-byte aligned and no sequence reaches the next one's rows.
__host__ __device__ inline int64_t fa__cuda_ws_row0(const fa__cuda_params &p, int64_t b, int64_t q_row0) {
  return p.cu_q ? (q_row0 & ~static_cast<int64_t>(3)) + 4 * b : q_row0;
}

#endif
