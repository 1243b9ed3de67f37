/* Test tensors: a view in any layout inside a host buffer with guard bytes
 * on both sides, optionally mirrored in device memory. Outputs are poisoned
 * (every byte 0xff, a NaN in every float dtype) before a call, so that an
 * element the library forgets to write shows up as NaN, a write outside the
 * view shows up in the guards, and a write into the padding of a strided
 * view shows up as a changed hole byte. */
#ifndef FA_TEST_TENSOR_H
#define FA_TEST_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

#define TB_GUARD 64         /* bytes on each side of a view */
#define TB_GUARD_BYTE 0xa5  /* what the guards hold */
#define TB_POISON_BYTE 0xff /* what an unwritten output (and padding) holds */

/* Memory layouts of a 4-d logical [d0, d1, d2, d3] tensor. */
typedef enum tb_layout {
  TL_BHLD = 0, /* contiguous in logical order */
  TL_BLHD,     /* dims 1 and 2 swapped in memory ([B, L, H, D]) */
  TL_PADDED,   /* logical order, every outer stride padded (a view into a larger tensor) */
  TL_STRIDED   /* TL_PADDED with every other element of the last dim (stride 2) */
} tb_layout;

typedef struct tbuf {
  fa_tensor t;         /* what the library sees; t.data is the host or device view */
  int ndim;            /* 4, or 3 for lse (shape[3] = 1) */
  unsigned char *base; /* host: guard | view | guard */
  size_t span;         /* bytes of the view */
  void *dev;           /* device copy of base, or NULL */
} tbuf;

/* Strides of a tensor of this shape in this layout; dims whose bit is set
 * in zero_dims get stride 0 (broadcast through the stride). */
void tb_strides(const int64_t shape[4], tb_layout layout, unsigned zero_dims, int64_t stride[4]);

/* Allocates (host, and device when memory is FA_MEMORY_CUDA), poisons the
 * view and writes the guards. A NULL-data tbuf (all zero) means "absent". */
void tb_alloc(tbuf *b, fa_dtype dt, const int64_t shape[4], int ndim, tb_layout layout, unsigned zero_dims,
              fa_memory memory);
void tb_free(tbuf *b);
static inline int tb_present(const tbuf *b) {
  return b->base != NULL;
}
static inline unsigned char *tb_view(const tbuf *b) {
  return b->base + TB_GUARD;
}
int64_t tb_numel(const tbuf *b);

/* Host-side element access with dtype conversion. */
double tb_get(const tbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3);
void tb_set(const tbuf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double v);
/* v as the dtype would store it (f16/bf16 rounding; f32 rounding). */
double tb_round(fa_dtype dt, double v);

/* Poisons the view and rewrites the guards (host side). */
void tb_poison(tbuf *b);
/* Host <-> device (no-ops for host tensors). 0 on success. */
int tb_upload(tbuf *b);
int tb_download(tbuf *b);

/* 1 if both guards are intact. */
int tb_guards_ok(const tbuf *b);
/* Bytes of the view that belong to no element and are no longer poison. */
int64_t tb_dirty_holes(const tbuf *b);
/* 1 if every byte of the view is still poison (an output left untouched). */
int tb_all_poison(const tbuf *b);
/* The logical values in natural (row-major) order; caller frees. */
double *tb_logical(const tbuf *b);

#endif
