/* The problem as every backend receives it: validated, defaults resolved,
 * causal folded into the window, broadcast dimensions given stride 0. A
 * backend reads only this; it never sees fa_options. */
#ifndef FA_CORE_PROBLEM_H
#define FA_CORE_PROBLEM_H

#include <stdint.h>

#include "../rules/kv_address.h"
#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa__pass { FA__FORWARD = 0, FA__BACKWARD = 1 } fa__pass;

/* The KV cache of fa_forward_kvcache, checked: key j of sequence b is at
 * fa__kv_locate(&map, b, j) in k (= k_cache) and v (= v_cache) of the
 * problem, for j < cache_seqlens[b] + L_new (the new tokens written first). */
typedef struct fa__kv {
  fa__kvmap map;
  const int32_t *cache_seqlens;         /* [B] */
  fa_tensor k_new, v_new;               /* [B, Hkv, L_new, D / Dv]; data NULL = none */
  int64_t L_new;                        /* 0 without k_new */
  int64_t capacity;                     /* keys a sequence can hold */
  int64_t pages;                        /* k_cache.shape[0] */
  const float *rotary_cos, *rotary_sin; /* [rotary_len][rotary_dim / 2]; NULL = none */
  int64_t rotary_len, rotary_dim;
  int rotary_interleaved;
  int num_splits; /* 0 = the backend chooses */
} fa__kv;

typedef struct fa__problem {
  fa__pass pass;
  fa_memory memory; /* FA_MEMORY_HOST or FA_MEMORY_CUDA, never AUTO */

  /* sizes */
  int64_t B;      /* number of sequences (num_seqs in the packed layout) */
  int64_t Hq;     /* query heads */
  int64_t Hkv;    /* key/value heads; query head h reads kv head h / group */
  int64_t group;  /* Hq / Hkv */
  int64_t Lq, Lk; /* padded lengths, or the longest sequence when packed */
  int64_t D, Dv;
  fa_dtype dtype; /* of q, k, v, o, dout, dq, dk, dv (FP8: of q, k, v; o is bf16 or f16) */
  int varlen;     /* cu_seqlens given: packed layout */

  /* tensors (data NULL when absent). Broadcast dims of mask/bias have stride 0.
   * lse: f32 or f64, [B, Hq, Lq] (or [1, Hq, total_q] when packed). */
  fa_tensor q, k, v, o, lse;
  fa_tensor dout, dq, dk, dv; /* backward only */
  fa_tensor mask;             /* FA_BOOL, [B, Hq, Lq, Lk] logical */
  fa_tensor bias;             /* f32/f64/f16/bf16, [B, Hq, Lq, Lk] logical */
  fa_tensor dbias;            /* bias's own shape; sums over bias's broadcast dims */

  /* lengths; same memory as the tensors */
  const int32_t *seqlens_q, *seqlens_k;
  const int32_t *cu_seqlens_q, *cu_seqlens_k;

  /* score transform */
  double scale;
  double softcap; /* 0 = off */
  const float *alibi_slopes;

  /* visibility: causal folded in; < 0 = unbounded */
  int64_t window_left, window_right;
  int bottom_right; /* alignment */
  /* positions of row 0 and key 0 in the whole sequence (opt->q_offset,
   * k_offset): the band's diag shifts by q_offset - k_offset (fa__seq_band_at)
   * and dropout indexes (i + q_offset, j + k_offset). 0 for the KV cache. */
  int64_t q_offset, k_offset;

  /* dropout (p = 0: off) */
  double dropout_p;
  uint32_t dropout_threshold; /* keep iff philox word < threshold */
  double dropout_scale;       /* 1 / (1 - p) */
  uint64_t dropout_seed;
  uint32_t dropout_offset;

  /* FP8 forward (dtype FA_F8_E4M3): f32 [B, Hkv] descales, stride 0 on
   * broadcast dims; data NULL = 1 */
  fa_tensor q_descale, k_descale, v_descale;

  int deterministic;
  int block_q, block_k; /* 0 = default */

  /* fa_forward_kvcache: k and v are the caches (Lk = their capacity),
   * lengths and new tokens are in kv; bottom-right, no mask/bias/dropout. */
  int kvcache;
  fa__kv kv;

  /* execution */
  int threads;    /* 0 = OpenMP default */
  fa_cpu_isa isa; /* requested cpu ISA (AUTO = probe / FLASHATTN_ISA) */
  void *stream;   /* cudaStream_t */
} fa__problem;

#ifdef __cplusplus
}
#endif
#endif
