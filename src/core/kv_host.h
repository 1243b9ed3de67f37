/* Host-memory pieces of the decode calls that ref and cpu share, so that
 * both backends write the same cache bits and merge the same way. */
#ifndef FA_CORE_KV_HOST_H
#define FA_CORE_KV_HOST_H

#include "backend.h"

/* Writes k_new (rotated when the call has rotary) and v_new into the cache
 * at cache_seqlens[b] + t, in float64 rounded to the cache's dtype. */
void fa__kv_append_host(const fa__problem *p);

/* Keys sequence b attends to: cache_seqlens[b] + L_new. */
static inline int64_t fa__kv_len(const fa__problem *p, int64_t b) {
  return (int64_t)p->kv.cache_seqlens[b] + p->kv.L_new;
}

/* fa_merge_states on host tensors (checked by fa__merge_check), float64. */
fa_status fa__merge_host(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse,
                         fa__err *err);

#endif
