// Decode on the cuda backend: fa_forward_kvcache and fa_merge_states.
//
// A decode step reads each key and value once and does a handful of
// multiply-adds per byte: the time is the bytes of K and V over the memory
// bandwidth. Three kernels, one stream:
//   append   k_new (rotated) and v_new written into the cache at
//            cache_seqlens[b] (contiguous or paged, src/rules/kv_address.h);
//   decode   ("flash-decoding") one block per (sequence, kv head, split,
//            row block): the g query heads of the kv head times the Lq new
//            query rows (R = g * Lq rows, a row block at a time) share every
//            K/V tile read, so K and V cross the memory bus once per kv head.
//            Tiles stream through a cp.async ring (16-byte copies). Two
//            kernels: on tensor cores for grouped f16/bf16 queries with D <=
//            128 (decode_mma_kernel.cuh: a key costs the same few mma
//            instructions whatever R is), else on CUDA cores with f32
//            arithmetic (decode_kernel.cuh: about 2 R multiply-adds per
//            byte, enough at R = 1, issue-bound from R = 4). A split takes
//            interleaved tiles of its row (s, s + n, ...) where the cache
//            has no block table, runs of tiles in paged caches
//            (block_work_of, decode_parts.cuh);
//   merge    with more than one split, the splits' partial (o, lse) merged
//            in f32: the online-softmax merge (src/rules/online_softmax.h)
//            with the weights exp(lse_k - max) summed in a fixed order
//            (decode_merge.cuh), by a kernel of its own (combine_kernel,
//            decode.cu, launched as the decode kernel's programmatic
//            dependent). FLASHATTN_CUDA_DECODE_FUSED_MERGE=1 merges inside
//            the decode kernel instead: every split block stores its
//            partial rows and counts itself on a per-item counter; the
//            last one to arrive merges all the splits of its rows in split
//            order (merge_splits, decode_parts.cuh: the same arithmetic,
//            the same bits) and puts the counter back to 0 (fused_merge in
//            decode.cu says why it is not the default).
// fa_merge_states is the combine over the caller's tensors (in float64).
#ifndef FA_CUDA_DECODE_CUH
#define FA_CUDA_DECODE_CUH

#include <cuda_runtime.h>

#include "../core/backend.h"

// fa_forward_kvcache on the cuda backend (p->kvcache set, validated).
fa_status fa__cuda_forward_kvcache(const fa__problem *p, fa__err *err);

// The plain fa_forward on the decode kernels: few query rows (Lq <= 16,
// group * Lq <= 64) against many keys (Lk >= 256 and >= 8 Lq), no mask,
// bias, dropout or per-sequence lengths, K/V rows 16-byte aligned. The
// tiled kernels would give each query row a whole tile of the block's rows.
int fa__cuda_decode_fits(const fa__problem *p);
fa_status fa__cuda_decode_forward(const fa__problem *p, fa__err *err);

// fa_merge_states on device tensors (checked by fa__merge_check).
fa_status fa__cuda_merge_states(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o,
                                fa_tensor *lse, void *stream, fa__err *err);

// What a call may leave unchecked (fa_context_set_device_checks(ctx, 0)) is
// made harmless in the kernels: a length past the capacity, a page index
// outside the cache or a rotary position past the tables is clamped into
// bounds, so a bad value gives wrong numbers for its sequence, never an
// access outside a tensor. (Checked values are inside already: no change.)
struct fa__dec_bounds {
  int64_t max_len;  // cache_seqlens[b] in [0, max_len] (capacity - L_new)
  int64_t pages;    // block-table entries in [0, pages)
  int64_t rot_len;  // rotary rows in [0, rot_len)
};

__device__ __forceinline__ int64_t fa__dec_clamp(int64_t x, int64_t hi) {
  return x < 0 ? 0 : x > hi ? hi : x;
}

// The decode kernel's problem, by value.
struct fa__dec_params {
  const void *q;
  const void *k, *v;  // the caches: element (page, h, row, d) at page*s0 + h*s1 + row*s2 + d
  void *o;
  float *lse;       // may be NULL
  float *part_o;    // [items][nsplit][R][Dv] f32 when nsplit > 1
  float *part_lse;  // [items][nsplit][R]
  // nsplit > 1: one arrival counter per (sequence, kv head, row block),
  // [items][nrb], 0 on entry and put back to 0 by the last split block of
  // each (decode.cu says where they live); NULL: the combine kernel merges
  unsigned *counters;
  int64_t qs[3], os[3], lses[3], ks[3], vs[3];
  fa__kvmap map;
  const int32_t *cache_seqlens;  // NULL: every sequence has fixed_len keys (the plain forward)
  int64_t fixed_len;
  int64_t L_new;
  int top_left;  // causal / window aligned top-left (the plain forward may ask), else bottom-right
  fa__dec_bounds bounds;
  const float *rot_cos, *rot_sin;
  int rot_dim, rot_interleaved;
  const float *alibi;
  int64_t B, Hq, Hkv, group, Lq;
  int D, Dv, R, nrb, nsplit;
  float qscale;  // scale * log2 e (plain) or scale (softcap / ALiBi: the transform is in natural units)
  float softcap;
  int elementwise;
  int64_t wl, wr;
  int interleave;  // splits take every nsplit-th tile, not a run of tiles (block_work_of)
  int warm_merge;  // fused merge: the other split blocks run it dry first (finish_splits)
  // L2 policy of the K/V copies (mma.cuh's kL2EvictFirst, or kL2EvictNormal
  // with FLASHATTN_CUDA_DECODE_EVICT=0; decode.cu says why)
  uint64_t kv_policy;
};

// One decode launch: dtype (FA_F16 / FA_BF16 / FA_F32), kd head-dim bucket
// (64 / 128 / 256), rb rows per block (1 / 4 / 8: CUDA cores; 16: tensor
// cores, f16 / bf16 and kd <= 128 only). grid blocks, 128 threads. pdl:
// launched as a programmatic dependent of the kernel before it (pdl.cuh).
fa_status fa__cuda_decode_launch_bf16(const fa__dec_params &p, int kd, int rb, bool pdl, int64_t blocks, cudaStream_t s,
                                      fa__err *err);
fa_status fa__cuda_decode_launch_f16(const fa__dec_params &p, int kd, int rb, bool pdl, int64_t blocks, cudaStream_t s,
                                     fa__err *err);
fa_status fa__cuda_decode_launch_f32(const fa__dec_params &p, int kd, int rb, bool pdl, int64_t blocks, cudaStream_t s,
                                     fa__err *err);
// Resident blocks per multiprocessor of that decode kernel (0 on error).
int fa__cuda_decode_occupancy_bf16(int kd, int rb);
int fa__cuda_decode_occupancy_f16(int kd, int rb);
int fa__cuda_decode_occupancy_f32(int kd, int rb);

#endif
