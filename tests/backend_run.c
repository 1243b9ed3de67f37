#include "backend_run.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/cm.h"
#include "support/device.h"

double tc_tol(fa_dtype dt) {
  switch (dt) {
    case FA_F64: return 1e-10;
    case FA_F32: return 2e-4;
    case FA_F16: return 2e-2;
    case FA_BF16: return 5e-2;
    case FA_BOOL:
    case FA_F8_E4M3: break; /* the FP8 forward has its own tolerance (test_fp8.c) */
  }
  return 0;
}

static double lse_max(const double *lse, int64_t nlse) {
  double lmax = 0;
  for (int64_t e = 0; e < nlse; ++e)
    if (isfinite(lse[e])) lmax = fmax(lmax, fabs(lse[e]));
  return lmax;
}

double tc_out_tol(fa_dtype dt, const double *lse, int64_t nlse) {
  return tc_tol(dt) + 4.0 * lse_max(lse, nlse) * ldexp(1.0, dt == FA_F64 ? -53 : -24);
}

double tc_grad_tol(const tcase *c, fa_dtype dt, const double *lse, int64_t nlse) {
  const double mag = c->mag > 1 ? c->mag : 1;
  return tc_tol(dt) + 4.0 * lse_max(lse, nlse) * mag * ldexp(1.0, dt == FA_F64 ? -53 : -24);
}

void tc_report_add(tc_report *r, const char *fmt, ...) {
  ++r->fails;
  if (r->len + 2 >= sizeof r->buf) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(r->buf + r->len, sizeof r->buf - r->len - 1, fmt, ap);
  va_end(ap);
  if (n > 0) r->len += (size_t)n < sizeof r->buf - r->len - 1 ? (size_t)n : sizeof r->buf - r->len - 2;
  r->buf[r->len++] = '\n';
  r->buf[r->len] = '\0';
}

static int verbose(void) {
  const char *v = getenv("FA_TEST_VERBOSE");
  return v && *v && *v != '0';
}

/* "[a,b,c,d]" of a flat index in natural order */
static void coords(const tbuf *t, int64_t e, char *out, size_t n) {
  int64_t c[4];
  for (int d = 3; d >= 0; --d) {
    const int64_t s = d < t->ndim ? t->t.shape[d] : 1;
    c[d] = e % s;
    e /= s;
  }
  if (t->ndim == 3)
    snprintf(out, n, "[%lld,%lld,%lld]", (long long)c[0], (long long)c[1], (long long)c[2]);
  else
    snprintf(out, n, "[%lld,%lld,%lld,%lld]", (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3]);
}

void tc_compare(tc_report *r, const char *what, const tbuf *t, const double *ref, double tol) {
  double *x = tb_logical(t);
  const int64_t n = tb_numel(t);
  double maxd = 0, rmax = 0;
  int64_t worst = -1, bad_finite = -1, bad_inf = -1;
  for (int64_t e = 0; e < n; ++e) {
    if (isnan(ref[e])) continue; /* the oracle never produces NaN on these inputs */
    if (isinf(ref[e])) {
      if (x[e] != ref[e] && bad_inf < 0) bad_inf = e;
      continue;
    }
    if (!isfinite(x[e])) {
      if (bad_finite < 0) bad_finite = e;
      continue;
    }
    const double d = fabs(x[e] - ref[e]);
    if (d > maxd) maxd = d, worst = e;
    if (fabs(ref[e]) > rmax) rmax = fabs(ref[e]);
  }
  const double err = maxd / (rmax > 1 ? rmax : 1);
  char at[128];
  if (bad_finite >= 0) {
    coords(t, bad_finite, at, sizeof at);
    tc_report_add(r, "%s: %g at %s where ref has %.9g (unwritten or NaN)", what, x[bad_finite], at, ref[bad_finite]);
  }
  if (bad_inf >= 0) {
    coords(t, bad_inf, at, sizeof at);
    tc_report_add(r, "%s: %g at %s where ref has %g", what, x[bad_inf], at, ref[bad_inf]);
  }
  if (err > tol) {
    coords(t, worst, at, sizeof at);
    tc_report_add(r, "%s: error %.3g > tolerance %.3g (at %s got %.9g, ref %.9g; max|ref| %.3g)", what, err, tol, at,
                  x[worst], ref[worst], rmax);
  } else if (verbose()) {
    print_message("    %-6s err %.3g (tol %.3g)\n", what, err, tol);
  }
  free(x);
}

/* Every element of rows marked dead (inner elements per row) equals want. */
static void exact_rows(tc_report *r, const char *what, const tbuf *t, const uint8_t *dead, int64_t inner, double want) {
  double *x = tb_logical(t);
  const int64_t n = tb_numel(t);
  for (int64_t e = 0; e < n; ++e)
    if (dead[e / inner] && !(x[e] == want)) {
      char at[128];
      coords(t, e, at, sizeof at);
      tc_report_add(r, "%s: %g at %s, which nothing is visible to/from: must be exactly %g", what, x[e], at, want);
      break;
    }
  free(x);
}

static void check_buffer(tc_report *r, const char *what, const tbuf *t) {
  if (!tb_guards_ok(t)) tc_report_add(r, "%s: guard bytes around the tensor were overwritten", what);
  const int64_t holes = tb_dirty_holes(t);
  if (holes) tc_report_add(r, "%s: %lld padding bytes inside the strided view were written", what, (long long)holes);
}

/* ---- oracle ----------------------------------------------------------- */

static int64_t idx4(const int64_t s[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

static void mark_dead(tc_oracle *orc, const tbuf *dbias) {
  const tc_inputs *in = &orc->in;
  const tcase *c = in->c;
  const tc_geom *g = &in->g;
  const int64_t nrow = g->Bt * g->Hq * g->rows_q, nkey = g->Bt * g->Hkv * g->rows_k;
  orc->row_dead = (uint8_t *)malloc((size_t)nrow);
  orc->key_dead = (uint8_t *)malloc((size_t)nkey);
  memset(orc->row_dead, 1, (size_t)nrow);
  memset(orc->key_dead, 1, (size_t)nkey);
  if (dbias) {
    orc->bias_dead = (uint8_t *)malloc((size_t)tb_numel(dbias));
    memset(orc->bias_dead, 1, (size_t)tb_numel(dbias));
  }
  for (int64_t b = 0; b < g->nseq; ++b)
    for (int64_t h = 0; h < g->Hq; ++h)
      for (int64_t i = 0; i < tc_lq(c, b); ++i)
        for (int64_t j = 0; j < tc_lk(c, b); ++j) {
          if (!tc_visible(in, b, h, i, j)) continue;
          int64_t qb, qr, kb, kr;
          tc_qpos(c, b, i, &qb, &qr);
          tc_kpos(c, b, j, &kb, &kr);
          orc->row_dead[(qb * g->Hq + h) * g->rows_q + qr] = 0;
          orc->key_dead[(kb * g->Hkv + h / g->group) * g->rows_k + kr] = 0;
          if (dbias) {
            const int64_t *s = dbias->t.shape;
            orc->bias_dead[idx4(s, s[0] == 1 ? 0 : b, s[1] == 1 ? 0 : h, s[2] == 1 ? 0 : i, s[3] == 1 ? 0 : j)] = 0;
          }
        }
}

tc_oracle *tc_oracle_make(const tcase *c, fa_dtype dt, uint64_t seed) {
  tc_oracle *orc = (tc_oracle *)calloc(1, sizeof *orc);
  assert_non_null(orc);
  tc_inputs_make(&orc->in, c, dt, seed);
  tc_tensors T;
  assert_int_equal(tc_tensors_make(&T, &orc->in, FA_F64, TL_BHLD, 0), 0);
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  fa_status st = fa_forward(ctx, FA_BACKEND_REF, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  if (st != FA_OK) fail_msg("oracle: ref forward failed: %s", fa_context_last_error(ctx));
  st = fa_backward(ctx, FA_BACKEND_REF, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt, &T.dq.t, &T.dk.t,
                   &T.dv.t, tc_dbias_arg(&T));
  if (st != FA_OK) fail_msg("oracle: ref backward failed: %s", fa_context_last_error(ctx));
  orc->o = tb_logical(&T.o);
  orc->lse = tb_logical(&T.lse);
  orc->dq = tb_logical(&T.dq);
  orc->dk = tb_logical(&T.dk);
  orc->dv = tb_logical(&T.dv);
  if (tb_present(&T.dbias)) orc->dbias = tb_logical(&T.dbias);
  mark_dead(orc, tb_present(&T.dbias) ? &T.dbias : NULL);
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  return orc;
}

void tc_oracle_free(tc_oracle *orc) {
  if (!orc) return;
  tc_inputs_free(&orc->in);
  free(orc->o);
  free(orc->lse);
  free(orc->dq);
  free(orc->dk);
  free(orc->dv);
  free(orc->dbias);
  free(orc->row_dead);
  free(orc->key_dead);
  free(orc->bias_dead);
  free(orc);
}

/* ---- one backend --------------------------------------------------------- */

static void download(tc_report *r, tbuf *t, const char *what) {
  if (tb_present(t) && tb_download(t) != 0)
    tc_report_add(r, "%s: copy from device failed: %s", what, tdev_last_error());
}

/* A refused call: the documented status, a message naming the backend, no
 * backend recorded as run, every output untouched. */
static void check_refusal(tc_report *r, const char *pass, fa_status st, fa_status want, const fa_context *ctx,
                          const tb_backend *be, tbuf *const *outs, const char *const *names, int nout) {
  if (st != want) {
    tc_report_add(r, "%s: returned %s, expected the documented refusal %s (%s)", pass, fa_status_name(st),
                  fa_status_name(want), fa_context_last_error(ctx));
    return;
  }
  const char *msg = fa_context_last_error(ctx);
  if (!strstr(msg, be->name)) tc_report_add(r, "%s: refusal message does not name the backend: \"%s\"", pass, msg);
  if (fa_context_last_backend(ctx) != FA_BACKEND_AUTO)
    tc_report_add(r, "%s: refused, yet last_backend says %s ran", pass, fa_backend_name(fa_context_last_backend(ctx)));
  for (int i = 0; i < nout; ++i)
    if (tb_present(outs[i]) && (!tb_all_poison(outs[i]) || !tb_guards_ok(outs[i])))
      tc_report_add(r, "%s: refused, yet output %s was written", pass, names[i]);
}

/* Writes the oracle's values into an output tensor (for a backward whose
 * forward was refused) and uploads it. */
static void store_logical(tbuf *t, const double *vals) {
  int64_t n = 0;
  for (int64_t a = 0; a < t->t.shape[0]; ++a)
    for (int64_t b = 0; b < t->t.shape[1]; ++b)
      for (int64_t c = 0; c < t->t.shape[2]; ++c)
        for (int64_t d = 0; d < (t->ndim == 4 ? t->t.shape[3] : 1); ++d) tb_set(t, a, b, c, d, vals[n++]);
  tb_upload(t);
}

void tc_run_case(const tc_oracle *orc, const tb_backend *be, const tb_variant *var) {
  const tcase *c = orc->in.c;
  const fa_dtype dt = orc->in.dt;
  const tc_geom *g = &orc->in.g;
  tc_report rep;
  memset(&rep, 0, sizeof rep);
  tc_tensors T;
  if (tc_tensors_make(&T, &orc->in, dt, c->layout, be->memory == FA_MEMORY_CUDA) != 0)
    fail_msg("cannot set up device memory: %s", tdev_last_error());
  fa_context *ctx = NULL;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  tb_variant_apply(ctx, var);

  /* forward */
  fa_status want = be->refuses(c, dt, 0);
  fa_status st = fa_forward(ctx, be->id, &T.q.t, &T.k.t, &T.v.t, &T.opt, &T.o.t, &T.lse.t);
  download(&rep, &T.o, "O");
  download(&rep, &T.lse, "LSE");
  if (want != FA_OK) {
    tbuf *outs[] = {&T.o, &T.lse};
    const char *names[] = {"O", "LSE"};
    check_refusal(&rep, "forward", st, want, ctx, be, outs, names, 2);
    store_logical(&T.o, orc->o);
    store_logical(&T.lse, orc->lse);
  } else if (st != FA_OK) {
    tc_report_add(&rep, "forward: %s", fa_context_last_error(ctx));
    goto done;
  } else {
    if (fa_context_last_backend(ctx) != be->id) tc_report_add(&rep, "forward: last_backend is not %s", be->name);
    check_buffer(&rep, "O", &T.o);
    check_buffer(&rep, "LSE", &T.lse);
    const double tol = tc_out_tol(dt, orc->lse, tb_numel(&T.lse));
    tc_compare(&rep, "O", &T.o, orc->o, tol);
    tc_compare(&rep, "LSE", &T.lse, orc->lse, tol);
    exact_rows(&rep, "O", &T.o, orc->row_dead, g->Dv, 0.0);
    exact_rows(&rep, "LSE", &T.lse, orc->row_dead, 1, -INFINITY);
  }

  /* backward, from this backend's own O and LSE */
  const double gtol = tc_grad_tol(c, dt, orc->lse, tb_numel(&T.lse));
  want = be->refuses(c, dt, 1);
  st = fa_backward(ctx, be->id, &T.q.t, &T.k.t, &T.v.t, &T.o.t, &T.dout.t, &T.lse.t, &T.opt, &T.dq.t, &T.dk.t, &T.dv.t,
                   tc_dbias_arg(&T));
  download(&rep, &T.dq, "dQ");
  download(&rep, &T.dk, "dK");
  download(&rep, &T.dv, "dV");
  download(&rep, &T.dbias, "dBias");
  if (want != FA_OK) {
    tbuf *outs[] = {&T.dq, &T.dk, &T.dv, &T.dbias};
    const char *names[] = {"dQ", "dK", "dV", "dBias"};
    check_refusal(&rep, "backward", st, want, ctx, be, outs, names, 4);
  } else if (st != FA_OK) {
    tc_report_add(&rep, "backward: %s", fa_context_last_error(ctx));
  } else {
    check_buffer(&rep, "dQ", &T.dq);
    check_buffer(&rep, "dK", &T.dk);
    check_buffer(&rep, "dV", &T.dv);
    tc_compare(&rep, "dQ", &T.dq, orc->dq, gtol);
    tc_compare(&rep, "dK", &T.dk, orc->dk, gtol);
    tc_compare(&rep, "dV", &T.dv, orc->dv, gtol);
    exact_rows(&rep, "dQ", &T.dq, orc->row_dead, g->D, 0.0);
    exact_rows(&rep, "dK", &T.dk, orc->key_dead, g->D, 0.0);
    exact_rows(&rep, "dV", &T.dv, orc->key_dead, g->Dv, 0.0);
    if (tb_present(&T.dbias)) {
      check_buffer(&rep, "dBias", &T.dbias);
      tc_compare(&rep, "dBias", &T.dbias, orc->dbias, gtol);
      exact_rows(&rep, "dBias", &T.dbias, orc->bias_dead, 1, 0.0);
    }
  }

done:
  fa_context_destroy(ctx);
  tc_tensors_free(&T);
  if (rep.fails) fail_msg("%s on %s (%s), %s:\n%s", c->name, be->name, var->name, fa_dtype_name(dt), rep.buf);
}
