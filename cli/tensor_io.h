/* Element access to fa_tensor of any dtype and strides, as double, for
 * filling inputs and comparing outputs (never on a hot path). */
#ifndef FA_CLI_TENSOR_IO_H
#define FA_CLI_TENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

double cli_tensor_get(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
void cli_tensor_set(const fa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v);
/* v rounded to what dtype can hold (round to nearest even), as double. */
double cli_quantize(double v, fa_dtype dtype);
/* Number of elements over the first ndim dims, and their bytes. */
int64_t cli_tensor_numel(const fa_tensor *t, int ndim);
size_t cli_tensor_bytes(const fa_tensor *t, int ndim);

/* Deterministic random numbers indexed by (seed, stream, i): the same value
 * for the same logical element whatever the layout or dtype. */
double cli_rand_normal(uint64_t seed, uint64_t stream, uint64_t i);
double cli_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i);

#endif
