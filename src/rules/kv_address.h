/* Where key j of sequence b lives in a KV cache: the one addressing rule of
 * fa_forward_kvcache, for every backend.
 *   contiguous (no block table): page b, row j
 *   paged: page block_table[b * stride + j / page_size], row j % page_size
 * A cache tensor is [pages, Hkv, rows, D] in logical order (any strides), so
 * element (page, h, row, d) is at page*s0 + h*s1 + row*s2 + d*s3. Keys
 * [j, j + fa__kv_run(...)) share one page and step by stride[2]: the tiled
 * backends read them as one strided matrix. */
#ifndef FA_RULES_KV_ADDRESS_H
#define FA_RULES_KV_ADDRESS_H

#include <stdint.h>

#include "hd.h"

typedef struct fa__kvmap {
  const int32_t *block_table; /* NULL: contiguous */
  int64_t bt_stride;          /* elements between the rows of block_table */
  int64_t page_size;          /* rows per page (contiguous: the capacity) */
} fa__kvmap;

typedef struct fa__kvpos {
  int64_t page, row;
} fa__kvpos;

FA_HD fa__kvpos fa__kv_locate(const fa__kvmap *m, int64_t b, int64_t j) {
  fa__kvpos at;
  if (!m->block_table) {
    at.page = b;
    at.row = j;
  } else {
    at.page = m->block_table[b * m->bt_stride + j / m->page_size];
    at.row = j % m->page_size;
  }
  return at;
}

/* Element offset of (at, h, d) in a cache tensor of element strides s[4]. */
FA_HD int64_t fa__kv_offset(const int64_t *s, fa__kvpos at, int64_t h, int64_t d) {
  return at.page * s[0] + h * s[1] + at.row * s[2] + d * s[3];
}

/* How many keys from j (up to j_end) lie on j's page, one row apart. */
FA_HD int64_t fa__kv_run(const fa__kvmap *m, int64_t j, int64_t j_end) {
  if (!m->block_table) return j_end - j;
  const int64_t page_end = (j / m->page_size + 1) * m->page_size;
  return (page_end < j_end ? page_end : j_end) - j;
}

#endif
