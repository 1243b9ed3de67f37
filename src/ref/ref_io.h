/* Element access for the ref backend: any dtype, any strides, as double. */
#ifndef FA_REF_IO_H
#define FA_REF_IO_H

#include <stdint.h>

#include "../core/problem.h"

double fa__ref_load(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
void fa__ref_store(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v);
/* 1 if the boolean element is true. */
int fa__ref_load_bool(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
/* Writes 0 to every element of t (4-d, its own shape). */
void fa__ref_zero(const fa_tensor *t);

#endif
