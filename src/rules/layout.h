/* Where sequence b lives: its actual lengths and the first row of its Q and
 * K/V in the tensors, for the padded layout (seqlens_q/k, per batch) and the
 * packed variable-length layout (cu_seqlens_q/k offsets, tokens packed along
 * dim 2 of a batch of one). Host and device code read lengths through this
 * and nothing else. */
#ifndef FA_RULES_LAYOUT_H
#define FA_RULES_LAYOUT_H

#include <stdint.h>

#include "hd.h"
#include "visibility.h"

typedef struct fa__seq {
  int64_t bidx;   /* index along dim 0 of q/k/v/o (0 in the packed layout) */
  int64_t q_row0; /* first row of this sequence along dim 2 of q, o, lse */
  int64_t k_row0; /* first row along dim 2 of k, v */
  int64_t lq, lk; /* actual lengths */
} fa__seq;

/* seqlens_* and cu_seqlens_* are NULL when absent; max_lq/max_lk are the
 * padded lengths (tensor dim 2) in the padded layout. */
FA_HD fa__seq fa__seq_get(int64_t b, int64_t max_lq, int64_t max_lk, const int32_t *seqlens_q, const int32_t *seqlens_k,
                          const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k) {
  fa__seq s;
  s.bidx = b;
  s.q_row0 = 0;
  s.k_row0 = 0;
  s.lq = max_lq;
  s.lk = max_lk;
  if (cu_seqlens_q) {
    s.bidx = 0;
    s.q_row0 = cu_seqlens_q[b];
    s.lq = cu_seqlens_q[b + 1] - cu_seqlens_q[b];
  } else if (seqlens_q) {
    s.lq = seqlens_q[b];
  }
  if (cu_seqlens_k) {
    s.bidx = 0;
    s.k_row0 = cu_seqlens_k[b];
    s.lk = cu_seqlens_k[b + 1] - cu_seqlens_k[b];
  } else if (seqlens_k) {
    s.lk = seqlens_k[b];
  }
  return s;
}

/* The band of a sequence, given the effective window (causal folded in),
 * for a call whose row 0 and key 0 sit at positions q_offset and k_offset of
 * the whole sequence: pos_shift = q_offset - k_offset moves the diagonal, so
 * that causal, window and ALiBi measure positions (fa_options.q_offset). */
FA_HD fa__band fa__seq_band_at(const fa__seq *s, int64_t left, int64_t right, int bottom_right, int64_t pos_shift) {
  fa__band bd;
  bd.lq = s->lq;
  bd.lk = s->lk;
  bd.left = left;
  bd.right = right;
  bd.diag_shift = (bottom_right ? s->lk - s->lq : 0) + pos_shift;
  return bd;
}

/* The band of a call at positions 0 (no offsets). */
FA_HD fa__band fa__seq_band(const fa__seq *s, int64_t left, int64_t right, int bottom_right) {
  return fa__seq_band_at(s, left, right, bottom_right, 0);
}

#endif
