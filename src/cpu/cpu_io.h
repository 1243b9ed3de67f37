/* Reading and writing the caller's tensors: any dtype the backend takes,
 * any element strides (stride 0 included), converted to and from the f32
 * the kernels compute in. A "matrix view" is one [L, C] slice of a
 * [B, H, L, C] tensor: a base address and two element strides. */
#ifndef FA_CPU_IO_H
#define FA_CPU_IO_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"
#include "kernels.h"

typedef struct fa__cpu_mat {
  const char *base; /* element (0, 0) */
  fa_dtype dtype;
  ptrdiff_t rs, cs; /* element strides of rows and columns */
} fa__cpu_mat;

/* The [L, C] slice (b, h) of t, starting at row `row`. */
fa__cpu_mat fa__cpu_mat_of(const fa_tensor *t, int64_t b, int64_t h, int64_t row);

/* Address of element (r, c) of a view. */
static inline const void *fa__cpu_mat_at(const fa__cpu_mat *m, int64_t r, int64_t c) {
  const ptrdiff_t es = m->dtype == FA_F64 ? 8 : m->dtype == FA_F32 ? 4 : m->dtype == FA_BOOL ? 1 : 2;
  return m->base + (ptrdiff_t)(r * m->rs + c * m->cs) * es;
}

/* One element of a tensor (f32, f64, f16, bf16) as float, or stored from float. */
float fa__cpu_get(const void *p, fa_dtype t);
void fa__cpu_put(void *p, fa_dtype t, float v);

/* dst[c] = scale * x(r, c) for c < n. */
void fa__cpu_load_row(const fa__cpu_kernels *kt, float *dst, const fa__cpu_mat *x, int64_t r, int n, float scale);

/* x(r, c) = src[c] for c < n (x is an output view). */
void fa__cpu_store_row(const fa__cpu_mat *x, int64_t r, const float *src, int n);

/* Packs rows x cols of x transposed into a panel: dst[c*ld + r] = scale *
 * x(r, c); columns r in [rows, rpad) are zero. tmp holds cols floats. */
void fa__cpu_pack_t(const fa__cpu_kernels *kt, float *dst, ptrdiff_t ld, int rpad, const fa__cpu_mat *x, int rows,
                    int cols, float scale, float *tmp);

/* Packs rows x cols of x row by row: dst[r*ld + c] = scale * x(r, c);
 * c in [cols, cpad) is zero. */
void fa__cpu_pack_rows(const fa__cpu_kernels *kt, float *dst, ptrdiff_t ld, int cpad, const fa__cpu_mat *x, int rows,
                       int cols, float scale);

/* The broadcast operand of the micro-kernel for rows x cols of x: the
 * tensor itself when it is f32 (any strides), else a converted copy in buf
 * (rows x cols floats, row-major). */
typedef struct fa__cpu_aop {
  const float *a;
  ptrdiff_t rs, cs;
} fa__cpu_aop;
fa__cpu_aop fa__cpu_operand(const fa__cpu_kernels *kt, const fa__cpu_mat *x, int rows, int cols, float *buf);

#endif
