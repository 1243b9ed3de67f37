#include "compare.h"

#include <math.h>
#include <string.h>

#include "tensor_io.h"

cli_tol cli_tol_for(fa_dtype dtype) {
  cli_tol t;
  switch (dtype) {
    case FA_F64: t.atol = 1e-9, t.rtol = 1e-9; break;
    /* f32 rounding is 6e-8; sums over ~L terms in another order and exp()
     * implementations differ add a few hundred ulps at most */
    case FA_F32: t.atol = 1e-4, t.rtol = 1e-4; break;
    /* f16 output rounding alone is 4.9e-4 relative; P rounded to f16 before
     * P·V on tensor cores adds about as much */
    case FA_F16: t.atol = 5e-3, t.rtol = 1e-2; break;
    /* bf16 keeps 8 bits: 3.9e-3 relative per rounding */
    case FA_BF16: t.atol = 3e-2, t.rtol = 3e-2; break;
    default: t.atol = 1e-4, t.rtol = 1e-4; break;
  }
  return t;
}

void cli_compare(const fa_tensor *x, const fa_tensor *ref, int ndim, cli_tol tol, cli_cmp *c) {
  memset(c, 0, sizeof *c);
  const int64_t n3 = ndim == 4 ? ref->shape[3] : 1;
  for (int64_t a = 0; a < ref->shape[0]; ++a)
    for (int64_t b = 0; b < ref->shape[1]; ++b)
      for (int64_t i = 0; i < ref->shape[2]; ++i)
        for (int64_t d = 0; d < n3; ++d) {
          const double xv = cli_tensor_get(x, a, b, i, d), rv = cli_tensor_get(ref, a, b, i, d);
          double err, ratio;
          if (xv == rv) { /* covers equal infinities */
            err = 0, ratio = 0;
          } else if (isnan(xv) || isnan(rv) || isinf(xv) || isinf(rv)) {
            err = INFINITY, ratio = INFINITY;
          } else {
            err = fabs(xv - rv);
            ratio = err / (tol.atol + tol.rtol * fabs(rv));
          }
          c->n++;
          if (!(ratio <= 1.0)) c->bad++;
          if (err > c->max_abs) c->max_abs = err;
          if (ratio > c->worst || (c->n == 1)) {
            c->worst = ratio;
            c->at[0] = a, c->at[1] = b, c->at[2] = i, c->at[3] = d;
            c->x_at = xv, c->r_at = rv;
          }
        }
}

cli_tol cli_tol_grad(fa_dtype dtype, cli_tol tol, const fa_tensor *ref, int ndim) {
  if (dtype != FA_BF16 && dtype != FA_F16) return tol;
  double rmax = 0;
  const int64_t n3 = ndim == 4 ? ref->shape[3] : 1;
  for (int64_t a = 0; a < ref->shape[0]; ++a)
    for (int64_t b = 0; b < ref->shape[1]; ++b)
      for (int64_t i = 0; i < ref->shape[2]; ++i)
        for (int64_t d = 0; d < n3; ++d) {
          const double v = fabs(cli_tensor_get(ref, a, b, i, d));
          if (isfinite(v) && v > rmax) rmax = v;
        }
  if (tol.rtol * rmax > tol.atol) tol.atol = tol.rtol * rmax;
  return tol;
}
