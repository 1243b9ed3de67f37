/* Running one case on one backend and judging it against the oracle (ref
 * in float64 on the same rounded inputs, contiguous, in host memory).
 *
 * Error norm, per output tensor X with oracle R:
 *     err(X) = max_e |X_e - R_e| / max(1, max_e |R_e|)
 * over the elements where R is finite; where R is +-inf (LSE of rows that
 * see nothing) X must be exactly that; a non-finite X where R is finite is
 * a failure whatever its size. Tolerances by dtype (tc_tol):
 *     f64 1e-10, f32 2e-4, f16 2e-2, bf16 5e-2
 * (f16/bf16 keep 11/8 significant bits; the inputs are rounded before the
 * oracle sees them, so only the backend's own arithmetic and output
 * rounding count). The gradients get one more term, tc_grad_tol: the
 * backward recomputes P = exp(s - LSE) from an LSE stored in f32, whose
 * absolute error is ~|LSE| 2^-24, a relative error of P that dQ and dK
 * multiply by |k| and |q| (the case's mag): 4 |LSE|max mag 2^-24 (2^-53 with
 * an f64 LSE). Negligible at ordinary scales (|LSE| ~ 5: ~1e-6); it is what
 * scores of 1e4 cost in any implementation with an f32 LSE. O and LSE get
 * the forward's share of it, tc_out_tol: a score of size |s| computed in f32
 * carries ~|s| 2^-24, which exp turns into that relative error of P:
 * 4 |LSE|max 2^-24 (LSE >= the row's largest score; no mag factor, V is not
 * scaled). Structural zeros are checked exactly on every backend:
 * rows that see nothing have O = 0, LSE = -inf, dQ = 0; keys no query sees
 * have dK = dV = 0; bias elements no visible score reads have dBias = 0. */
#ifndef FA_TEST_BACKEND_RUN_H
#define FA_TEST_BACKEND_RUN_H

#include "support/backends.h"
#include "support/problem.h"

double tc_tol(fa_dtype dt);
/* tc_tol(dt) plus the f32-score term described above, for O and LSE. */
double tc_out_tol(fa_dtype dt, const double *lse, int64_t nlse);
/* tc_tol(dt) plus the f32-LSE term described above, for dQ, dK, dV, dBias. */
double tc_grad_tol(const tcase *c, fa_dtype dt, const double *lse, int64_t nlse);

typedef struct tc_oracle {
  tc_inputs in;
  double *o, *lse, *dq, *dk, *dv, *dbias; /* natural order of each tensor */
  uint8_t *row_dead;                      /* [Bt, Hq, rows_q]: row sees nothing */
  uint8_t *key_dead;                      /* [Bt, Hkv, rows_k]: key seen by nothing */
  uint8_t *bias_dead;                     /* dbias tensor's elements no visible score reads */
} tc_oracle;

/* Inputs of case c in dtype dt (seeded by seed), and ref's float64
 * results on them. cmocka-fails if ref fails. */
tc_oracle *tc_oracle_make(const tcase *c, fa_dtype dt, uint64_t seed);
void tc_oracle_free(tc_oracle *orc);

/* Forward then backward on backend be run as var; everything checked as
 * the header comment says; a refusal must be the documented status with a
 * message, and leave every output untouched. cmocka-fails with the list of
 * every problem found. */
void tc_run_case(const tc_oracle *orc, const tb_backend *be, const tb_variant *var);

/* Growing report of failures (printed at the end of a test). */
typedef struct tc_report {
  char buf[6000];
  size_t len;
  int fails;
} tc_report;
void tc_report_add(tc_report *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Compares t (downloaded) with the oracle values ref, as described above. */
void tc_compare(tc_report *r, const char *what, const tbuf *t, const double *ref, double tol);

#endif
