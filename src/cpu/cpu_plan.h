/* Tile sizes: defaults derived from the cache sizes the OS reports,
 * overridable per call (block_q / block_k) for teaching and tuning. */
#ifndef FA_CPU_PLAN_H
#define FA_CPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

typedef struct fa__cpu_blocks {
  int bq, bk; /* rows of Q, rows of K/V per tile */
} fa__cpu_blocks;

/* Forward tiles for head dims D, Dv (block_q/block_k > 0 override). */
fa__cpu_blocks fa__cpu_blocks_forward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k);
/* Forward: query tiles of one head that share a walk over K/V (*group)
 * and the keys of one shared K/V chunk (*chunk), for blocks blk, Lk keys
 * of elem-byte elements; f32_products: the products run in f32 (not on
 * bf16 pairs, which choose their own group). */
void fa__cpu_forward_group(fa__cpu_blocks blk, int64_t D, int64_t Dv, int64_t Lk, size_t elem, int f32_products,
                           int *group, int64_t *chunk);
/* The FLASHATTN_CPU_FORWARD_GROUP=G[,C] override of group and chunk (tests,
 * experiments); leaves them alone when the variable is not set. */
void fa__cpu_forward_group_override(int bk, int *group, int64_t *chunk);
/* Backward tiles (the backward's panels run along K/V rows). */
fa__cpu_blocks fa__cpu_blocks_backward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k);
/* Bytes one forward tile step keeps hot: Q tile, K and V tiles, score
 * tile, output accumulator and the row statistics. */
size_t fa__cpu_working_set(int bq, int bk, int64_t D, int64_t Dv);

#endif
