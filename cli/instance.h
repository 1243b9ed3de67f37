/* The tensors of one problem (cli_spec) in host memory, in one dtype, with
 * random inputs that do not depend on the dtype or layout: the f64 copy the
 * ref backend reads and the f32/f16/bf16 copy another backend reads hold the
 * same values, so any difference in the outputs is the backend's. */
#ifndef FA_CLI_INSTANCE_H
#define FA_CLI_INSTANCE_H

#include "flashattn.h"
#include "spec.h"

typedef struct cli_instance {
  fa_dtype dtype; /* of q, k, v, o, dout, dq, dk, dv, bias, dbias */
  fa_memory memory;
  int backward; /* dout, dq, dk, dv (and dbias) allocated */
  fa_tensor q, k, v, o, lse, dout, dq, dk, dv, dbias;
  fa_options opt; /* its mask, bias, alibi and lengths point into this instance */
  float *alibi;
  int32_t *seqlens_q, *seqlens_k, *cu_seqlens_q, *cu_seqlens_k;
  int64_t num_seqs;
} cli_instance;

/* Allocates zeroed tensors for s; lse in lse_dtype (f32, or f64 for ref).
 * Exits with a one-line error when memory runs out. */
void cli_instance_alloc(cli_instance *in, const cli_spec *s, fa_dtype dtype, fa_dtype lse_dtype, int backward);
/* Random q, k, v, dout, mask and bias, each value rounded to `values` (the
 * problem's dtype), plus ALiBi slopes and lengths. */
void cli_instance_fill(cli_instance *in, const cli_spec *s, fa_dtype values);
void cli_instance_free(cli_instance *in);

/* dst = src elementwise (same shape, any dtypes and strides); ndim 3 or 4. */
void cli_tensor_copy(const fa_tensor *dst, const fa_tensor *src, int ndim);

/* Each tensor of an instance with its name and the number of dims that
 * count (3 for lse); for code that walks all of them (device copies). */
typedef struct cli_slot {
  const char *name;
  fa_tensor *t;
  int ndim;
} cli_slot;
int cli_instance_slots(cli_instance *in, cli_slot *out, int max);

/* Bytes of q, k, v, o, lse (and dout, dq, dk, dv): what the call reads and
 * writes, for "extra memory" and cache-fit decisions. */
size_t cli_instance_io_bytes(const cli_instance *in);

#endif
