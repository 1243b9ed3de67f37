/* How close a backend's output is to the float64 oracle. An element passes
 * when |x - ref| <= atol + rtol * |ref| (numpy's allclose rule); equal
 * infinities (LSE = -inf of a fully masked row) pass, NaN never does. */
#ifndef FA_CLI_COMPARE_H
#define FA_CLI_COMPARE_H

#include <stdint.h>

#include "flashattn.h"

typedef struct cli_tol {
  double atol, rtol;
} cli_tol;

/* The tolerance for outputs stored in dtype: a few units of that dtype's
 * rounding, scaled for sums over a few hundred terms. */
cli_tol cli_tol_for(fa_dtype dtype);

typedef struct cli_cmp {
  int64_t n, bad;    /* elements compared, elements over the tolerance */
  double max_abs;    /* largest |x - ref| (inf if one side is inf/NaN) */
  double worst;      /* largest |x - ref| / (atol + rtol |ref|): <= 1 passes */
  int64_t at[4];     /* index of the worst element */
  double x_at, r_at; /* its values */
} cli_cmp;

void cli_compare(const fa_tensor *x, const fa_tensor *ref, int ndim, cli_tol tol, cli_cmp *out);

/* A gradient's tolerance in a 16-bit dtype: tol with atol raised to rtol
 * times the gradient's largest magnitude. Kernels that round dS (and P) to
 * the input dtype for the gradient products (FlashAttention 2 on GPUs, the
 * cpu backend's bf16 products: docs/semantics.md) err by ~2^-9 of the sums
 * of magnitudes that make up each element, which cancellation can leave far
 * above the element itself: a per-element bound cannot hold there, a bound
 * on the tensor's scale can (the test suite's rule, tests/backend_run.c).
 * Other dtypes: tol unchanged. */
cli_tol cli_tol_grad(fa_dtype dtype, cli_tol tol, const fa_tensor *ref, int ndim);

#endif
