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

#endif
