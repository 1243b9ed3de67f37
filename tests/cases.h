/* The table of cases every backend runs (cases.c). A case is a problem:
 * shape, the dtypes it runs in, the memory layout of its tensors and every
 * option. Zero fields mean "off" or "the default". */
#ifndef FA_TEST_CASES_H
#define FA_TEST_CASES_H

#include <stdint.h>

#include "flashattn.h"
#include "support/tensor.h"

enum {
  TD_F32 = 1u << FA_F32,
  TD_F64 = 1u << FA_F64,
  TD_F16 = 1u << FA_F16,
  TD_BF16 = 1u << FA_BF16,
  TD_ALL = TD_F32 | TD_F64 | TD_F16 | TD_BF16
};

/* broadcast dims of a [B, Hq, Lq, Lk] mask or bias */
enum { BC_B = 1u << 0, BC_H = 1u << 1, BC_Q = 1u << 2, BC_K = 1u << 3 };

typedef struct tcase {
  const char *name;
  /* shape; in the packed layout B is the number of sequences and Lq/Lk are
   * taken from cu_q/cu_k */
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  unsigned dtypes;  /* TD_* bits; 0 = all four */
  tb_layout layout; /* of q, k, v, o, lse, dout and the gradients (and a full bias) */

  /* visibility */
  int causal;
  fa_align align;
  int use_window;
  int64_t wl, wr;
  const int32_t *seqlens_q, *seqlens_k; /* [B], padded layout */
  const int32_t *cu_q, *cu_k;           /* [B + 1], packed layout */

  /* boolean mask: random, with a fraction mask_keep true (0 = 0.7) */
  int mask;
  unsigned mask_bcast; /* BC_* dims of size 1 */
  int mask_stride0;    /* broadcast with stride 0 at full shape instead of size 1 */
  double mask_keep;
  int mask_dead_rows; /* rows i % 4 == 1 all false: fully masked rows */

  /* additive bias: N(0, 1) + bias_shift */
  int bias;
  unsigned bias_bcast;
  int bias_stride0;
  double bias_shift;
  int bias_neginf; /* some -inf entries and row 1 entirely -inf */
  int dbias;       /* ask for dBias */

  int alibi;
  double softcap;
  double scale; /* 0 = 1/sqrt(D) */
  double mag;   /* q and k ~ mag * N(0, 1); 0 = 1. Scores then scale like mag^2 */

  double dropout_p;
  uint64_t seed;
  uint32_t offset;

  int block_q, block_k; /* tile sizes asked of tiled backends */
  int deterministic;    /* the backward in a fixed summation order (fa_options.deterministic) */

  /* positions of row 0 and key 0 in the whole sequence (fa_options.q_offset,
   * k_offset): a block of a ring / context-parallel attention */
  int64_t q_offset, k_offset;
} tcase;

extern const tcase tc_cases[];
extern const int tc_ncases;

static inline unsigned tc_dtypes(const tcase *c) {
  return c->dtypes ? c->dtypes : TD_ALL;
}

#endif
