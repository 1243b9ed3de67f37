/* Dispatch (src/core/dispatch.c, DESIGN.md "Dispatch"): auto picks the
 * fastest backend that takes the call for the memory the tensors live in;
 * a backend asked for by name never falls back silently; the context tells
 * which backend ran and why the others were passed over; two threads with
 * two contexts do not interfere. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/backends.h"
#include "support/cm.h"
#include "support/device.h"
#include "support/problem.h"

static const tcase g_plain = {"plain", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 9, .Lk = 17, .D = 8, .Dv = 8, .causal = 1};

typedef struct prob {
  tc_inputs in;
  tc_tensors T;
} prob;

static void prob_make(prob *p, const tcase *c, fa_dtype dt, int on_device) {
  tc_inputs_make(&p->in, c, dt, 77);
  assert_int_equal(tc_tensors_make(&p->T, &p->in, dt, TL_BHLD, on_device), 0);
}

static void prob_free(prob *p) {
  tc_tensors_free(&p->T);
  tc_inputs_free(&p->in);
}

static fa_status forward(fa_context *ctx, fa_backend be, prob *p) {
  return fa_forward(ctx, be, &p->T.q.t, &p->T.k.t, &p->T.v.t, &p->T.opt, &p->T.o.t, &p->T.lse.t);
}

static int usable(fa_backend b) {
  return fa_backend_available(b, NULL, 0) == FA_OK;
}

/* The report's line for backend name ("" if none). */
static const char *report_line(const fa_context *ctx, const char *name, char *buf, size_t n) {
  const char *r = fa_context_dispatch_report(ctx);
  buf[0] = '\0';
  const size_t len = strlen(name);
  for (const char *line = r; *line;) {
    const char *end = strchr(line, '\n');
    const size_t l = end ? (size_t)(end - line) : strlen(line);
    if (l > len && strncmp(line, name, len) == 0 && line[len] == ':') {
      snprintf(buf, n, "%.*s", (int)l, line);
      break;
    }
    line += l + (end ? 1 : 0);
  }
  return buf;
}

static void test_auto_host(void **state) {
  (void)state;
  prob p;
  prob_make(&p, &g_plain, FA_F32, 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  if (forward(ctx, FA_BACKEND_AUTO, &p) != FA_OK) fail_msg("%s", fa_context_last_error(ctx));
  char line[512];
  const fa_backend want = usable(FA_BACKEND_CPU) ? FA_BACKEND_CPU : FA_BACKEND_REF;
  print_message("report:\n%s", fa_context_dispatch_report(ctx));
  assert_int_equal(fa_context_last_backend(ctx), want);
  assert_non_null(strstr(report_line(ctx, fa_backend_name(want), line, sizeof line), "chosen"));
  if (want == FA_BACKEND_REF) {
    /* why cpu was passed over, in its own words */
    char why[256];
    fa_backend_available(FA_BACKEND_CPU, why, sizeof why);
    report_line(ctx, "cpu", line, sizeof line);
    if (!strstr(line, "passed over"))
      fail_msg("report has no 'cpu: passed over' line:\n%s", fa_context_dispatch_report(ctx));
    if (why[0] && !strstr(line, why)) fail_msg("cpu line \"%s\" does not give the reason \"%s\"", line, why);
  }
  /* host memory never goes to the cuda backend */
  assert_int_not_equal(fa_context_last_backend(ctx), FA_BACKEND_CUDA);
  fa_context_destroy(ctx);
  prob_free(&p);
}

/* f64 is ref's alone (cpu refuses it with FA_ERR_DTYPE): auto passes cpu
 * over, says why, and runs ref. */
static void test_auto_f64_goes_to_ref(void **state) {
  (void)state;
  prob p;
  prob_make(&p, &g_plain, FA_F64, 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  if (forward(ctx, FA_BACKEND_AUTO, &p) != FA_OK) fail_msg("%s", fa_context_last_error(ctx));
  assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_REF);
  char line[512];
  report_line(ctx, "cpu", line, sizeof line);
  if (!strstr(line, "passed over")) fail_msg("no 'cpu: passed over' line in:\n%s", fa_context_dispatch_report(ctx));
  if (usable(FA_BACKEND_CPU) && !strstr(line, "f64"))
    fail_msg("cpu refused f64, but its line does not say so: \"%s\"", line);
  fa_context_destroy(ctx);
  prob_free(&p);
}

static void test_forced_ref(void **state) {
  (void)state;
  prob p;
  prob_make(&p, &g_plain, FA_F32, 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  assert_int_equal(forward(ctx, FA_BACKEND_REF, &p), FA_OK);
  assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_REF);
  char line[512];
  assert_non_null(strstr(report_line(ctx, "ref", line, sizeof line), "by name"));
  /* a failed call afterwards: no backend ran */
  p.T.opt.dropout_p = -1;
  assert_int_equal(forward(ctx, FA_BACKEND_REF, &p), FA_ERR_DROPOUT);
  assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_AUTO);
  fa_context_destroy(ctx);
  prob_free(&p);
}

/* A backend asked for by name that cannot take the call is an error with
 * its reason; nothing runs in its place and no output is written. */
static void test_forced_never_falls_back(void **state) {
  (void)state;
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  int checked = 0;
  for (int i = 0; i < tb_nbackends; ++i) {
    const tb_backend *be = &tb_backends[i];
    if (be->id == FA_BACKEND_REF) continue;
    prob p;
    fa_dtype dt = FA_F32;
    fa_status want;
    if (!usable(be->id)) {
      want = FA_ERR_NO_BACKEND; /* not compiled, or no device here */
    } else if (be->memory == FA_MEMORY_CUDA) {
      want = FA_ERR_MEMORY_SPACE; /* host tensors given to the GPU backend */
    } else {
      dt = FA_F64; /* a dtype the backend lacks */
      want = be->refuses(&g_plain, dt, 0);
      if (want == FA_OK) continue;
    }
    prob_make(&p, &g_plain, dt, 0);
    const fa_status st = forward(ctx, be->id, &p);
    const char *msg = fa_context_last_error(ctx);
    if (st != want)
      fail_msg("forcing %s: %s (%s), expected %s", be->name, fa_status_name(st), msg, fa_status_name(want));
    if (!strstr(msg, be->name)) fail_msg("forcing %s: message does not name it: %s", be->name, msg);
    assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_AUTO);
    assert_true(tb_all_poison(&p.T.o) && tb_all_poison(&p.T.lse));
    char line[512];
    if (!strstr(report_line(ctx, be->name, line, sizeof line), "refused"))
      fail_msg("forcing %s: report does not say it refused:\n%s", be->name, fa_context_dispatch_report(ctx));
    prob_free(&p);
    ++checked;
  }
  print_message("checked %d forced refusals\n", checked);
  fa_context_destroy(ctx);
}

/* With a GPU: device tensors go to cuda under auto, and host-only backends
 * refuse device memory. */
static void test_device_memory(void **state) {
  (void)state;
  if (!usable(FA_BACKEND_CUDA) || !tdev_available()) skip();
  prob p;
  prob_make(&p, &g_plain, FA_F16, 1);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  /* the tensors say "auto": the runtime must recognise device pointers */
  fa_tensor *ts[] = {&p.T.q.t, &p.T.k.t, &p.T.v.t, &p.T.o.t, &p.T.lse.t};
  for (int i = 0; i < 5; ++i) ts[i]->memory = FA_MEMORY_AUTO;
  if (forward(ctx, FA_BACKEND_AUTO, &p) != FA_OK) fail_msg("%s", fa_context_last_error(ctx));
  assert_int_equal(fa_context_last_backend(ctx), FA_BACKEND_CUDA);
  for (int i = 0; i < 5; ++i) ts[i]->memory = FA_MEMORY_CUDA;
  const fa_backend host_only[] = {FA_BACKEND_REF, FA_BACKEND_CPU};
  for (int i = 0; i < 2; ++i) {
    if (!usable(host_only[i])) continue;
    assert_int_equal(forward(ctx, host_only[i], &p), FA_ERR_MEMORY_SPACE);
  }
  fa_context_destroy(ctx);
  prob_free(&p);
}

/* The cpu backend's plan (fa_cpu_plan_get) and ISA choice: every ISA the
 * CPU has gives a plan of that ISA; asked tile sizes are used; AUTO is the
 * best ISA, or what FLASHATTN_ISA says (ctest runs this program once more
 * with FLASHATTN_ISA=generic); an ISA the CPU lacks is refused by name. */
static void test_cpu_plan_and_isa(void **state) {
  (void)state;
  if (!usable(FA_BACKEND_CPU)) skip();
  static const fa_cpu_isa isas[] = {FA_ISA_GENERIC, FA_ISA_AVX2, FA_ISA_AVX512, FA_ISA_AVX512BF16, FA_ISA_AMX};
  enum { NISA = sizeof isas / sizeof isas[0] };
  fa_cpu_isa best = FA_ISA_GENERIC;
  fa_cpu_plan plan;
  assert_true(fa_cpu_isa_supported(FA_ISA_GENERIC));
  for (int i = 0; i < NISA; ++i) {
    if (!fa_cpu_isa_supported(isas[i])) continue;
#ifdef FA_AMX_EMULATE
    if (isas[i] != FA_ISA_AMX) /* the emulated development build never picks amx on its own (cpu_isa.c) */
#endif
      best = isas[i];
    if (fa_cpu_plan_get(isas[i], 64, 64, 0, 0, &plan) != FA_OK) fail_msg("no plan for %s", fa_cpu_isa_name(isas[i]));
    assert_int_equal(plan.isa, isas[i]);
    assert_true(plan.block_q > 0 && plan.block_k > 0 && plan.working_set_bytes > 0);
    assert_true(plan.l1d_bytes > 0 && plan.l2_bytes >= plan.l1d_bytes);
    assert_int_equal(fa_cpu_plan_get(isas[i], 64, 64, 16, 32, &plan), FA_OK);
    assert_int_equal(plan.block_q, 16);
    assert_int_equal(plan.block_k, 32);
    /* per dtype: the same tiles; only bf16 on avx512bf16 and amx keeps other bytes hot (bf16 tiles and pairs) */
    fa_cpu_plan pd;
    assert_int_equal(fa_cpu_plan_get_dtype(isas[i], FA_F32, 64, 64, 16, 32, &pd), FA_OK);
    assert_int_equal(pd.working_set_bytes, plan.working_set_bytes);
    assert_int_equal(fa_cpu_plan_get_dtype(isas[i], FA_BF16, 64, 64, 16, 32, &pd), FA_OK);
    assert_int_equal(pd.block_q, 16);
    assert_int_equal(pd.block_k, 32);
    if (isas[i] == FA_ISA_AVX512BF16 || isas[i] == FA_ISA_AMX)
      assert_true(pd.working_set_bytes < plan.working_set_bytes);
    else
      assert_int_equal(pd.working_set_bytes, plan.working_set_bytes);
  }
  assert_int_equal(fa_cpu_plan_get(FA_ISA_AUTO, 64, 64, 0, 0, NULL), FA_ERR_NULL_POINTER);
  assert_int_not_equal(fa_cpu_plan_get(FA_ISA_AUTO, 0, 64, 0, 0, &plan), FA_OK);
  assert_int_not_equal(fa_cpu_plan_get(FA_ISA_AUTO, 64, 64, -1, 0, &plan), FA_OK);
  const char *env = getenv("FLASHATTN_ISA");
  if (env && *env && strcmp(env, "auto") != 0) {
    fa_cpu_isa want = FA_ISA_AUTO;
    for (int i = 0; i < NISA; ++i)
      if (strcmp(env, fa_cpu_isa_name(isas[i])) == 0) want = isas[i];
    print_message("FLASHATTN_ISA=%s\n", env);
    if (want != FA_ISA_AUTO && fa_cpu_isa_supported(want)) best = want;
  }
  assert_int_equal(fa_cpu_plan_get(FA_ISA_AUTO, 64, 64, 0, 0, &plan), FA_OK);
  /* auto takes avx512bf16 only where its bf16 products measure faster than f32's FMAs (cpu_isa.c) */
  if (best == FA_ISA_AVX512BF16 && plan.isa == FA_ISA_AVX512)
    print_message("auto: avx512 (vdpbf16ps no faster than the f32 FMAs on this CPU)\n");
  else
    assert_int_equal(plan.isa, best);
  /* an ISA this CPU lacks: the call names it and fails, nothing runs */
  for (int i = 0; i < NISA; ++i) {
    if (fa_cpu_isa_supported(isas[i])) continue;
    prob p;
    prob_make(&p, &g_plain, FA_F32, 0);
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    assert_int_equal(fa_context_set_cpu_isa(ctx, isas[i]), FA_OK);
    assert_int_equal(forward(ctx, FA_BACKEND_CPU, &p), FA_ERR_UNSUPPORTED);
    assert_non_null(strstr(fa_context_last_error(ctx), fa_cpu_isa_name(isas[i])));
    assert_true(tb_all_poison(&p.T.o));
    fa_context_destroy(ctx);
    prob_free(&p);
  }
}

/* ---- two threads, two contexts ------------------------------------------------ */

typedef struct worker {
  const tcase *c;
  fa_backend backend;
  int with_errors; /* alternate failing calls with good ones */
  double *expect;  /* O of a call made before the threads started */
  int iters;
  char failure[512];
} worker;

/* The device description agrees with the cuda backend's availability. */
static void test_cuda_device_describe(void **state) {
  (void)state;
  char why[512], desc[256];
  desc[0] = '\0';
  const int usable = fa_backend_available(FA_BACKEND_CUDA, why, sizeof why) == FA_OK;
  const fa_status st = fa_cuda_device_describe(desc, sizeof desc);
  assert_int_equal(st, usable ? FA_OK : FA_ERR_NO_BACKEND);
  assert_true(strlen(desc) > 0);
  if (usable) assert_non_null(strstr(desc, "sm_"));
  assert_int_equal(fa_cuda_device_describe(NULL, 16), FA_ERR_NULL_POINTER);
  assert_int_equal(fa_cuda_device_describe(desc, 0), FA_ERR_NULL_POINTER);
}

static void *work(void *arg) {
  worker *w = (worker *)arg;
  prob p;
  tc_inputs_make(&p.in, w->c, FA_F32, 5);
  if (tc_tensors_make(&p.T, &p.in, FA_F32, TL_BHLD, 0) != 0) {
    snprintf(w->failure, sizeof w->failure, "setup failed");
    return NULL;
  }
  fa_context *ctx;
  fa_context_create(&ctx);
  fa_context_set_threads(ctx, 1);
  const fa_backend ran =
      w->backend == FA_BACKEND_AUTO ? (usable(FA_BACKEND_CPU) ? FA_BACKEND_CPU : FA_BACKEND_REF) : w->backend;
  for (int it = 0; it < w->iters && !w->failure[0]; ++it) {
    if (w->with_errors && it % 2) {
      p.T.opt.dropout_p = 1.5;
      const fa_status st = forward(ctx, w->backend, &p);
      p.T.opt.dropout_p = 0;
      if (st != FA_ERR_DROPOUT || !strstr(fa_context_last_error(ctx), "dropout_p"))
        snprintf(w->failure, sizeof w->failure, "iteration %d: bad call gave %s / \"%s\"", it, fa_status_name(st),
                 fa_context_last_error(ctx));
      continue;
    }
    tb_poison(&p.T.o);
    const fa_status st = forward(ctx, w->backend, &p);
    if (st != FA_OK || fa_context_last_error(ctx)[0] || fa_context_last_backend(ctx) != ran) {
      snprintf(w->failure, sizeof w->failure, "iteration %d: %s, last_error \"%s\", last_backend %s", it,
               fa_status_name(st), fa_context_last_error(ctx), fa_backend_name(fa_context_last_backend(ctx)));
      break;
    }
    double *o = tb_logical(&p.T.o);
    for (int64_t e = 0; e < tb_numel(&p.T.o); ++e)
      if (!(fabs(o[e] - w->expect[e]) <= 1e-6 * (1 + fabs(w->expect[e])))) {
        snprintf(w->failure, sizeof w->failure, "iteration %d: O[%lld] = %g, alone it was %g", it, (long long)e, o[e],
                 w->expect[e]);
        break;
      }
    free(o);
  }
  fa_context_destroy(ctx);
  prob_free(&p);
  return NULL;
}

static void test_two_threads(void **state) {
  (void)state;
  static const tcase ca = {"a", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .causal = 1};
  static const tcase cb = {"b",    .B = 1,   .Hq = 2,   .Hkv = 1,   .Lq = 17,         .Lk = 65,
                           .D = 8, .Dv = 24, .bias = 1, .alibi = 1, .dropout_p = 0.1, .seed = 3};
  worker w[2] = {{&ca, FA_BACKEND_AUTO, 1, NULL, 40, ""}, {&cb, FA_BACKEND_REF, 0, NULL, 40, ""}};
  for (int t = 0; t < 2; ++t) { /* the answers, computed alone first */
    prob p;
    tc_inputs_make(&p.in, w[t].c, FA_F32, 5);
    assert_int_equal(tc_tensors_make(&p.T, &p.in, FA_F32, TL_BHLD, 0), 0);
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx), FA_OK);
    assert_int_equal(fa_context_set_threads(ctx, 1), FA_OK);
    assert_int_equal(forward(ctx, w[t].backend, &p), FA_OK);
    w[t].expect = tb_logical(&p.T.o);
    fa_context_destroy(ctx);
    prob_free(&p);
  }
  pthread_t th[2];
  for (int t = 0; t < 2; ++t) assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
  for (int t = 0; t < 2; ++t) assert_int_equal(pthread_join(th[t], NULL), 0);
  for (int t = 0; t < 2; ++t) free(w[t].expect);
  for (int t = 0; t < 2; ++t)
    if (w[t].failure[0]) fail_msg("thread %d: %s", t, w[t].failure);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auto_host),     cmocka_unit_test(test_auto_f64_goes_to_ref),
      cmocka_unit_test(test_forced_ref),    cmocka_unit_test(test_forced_never_falls_back),
      cmocka_unit_test(test_device_memory), cmocka_unit_test(test_cpu_plan_and_isa),
      cmocka_unit_test(test_two_threads),   cmocka_unit_test(test_cuda_device_describe),
  };
  return cmocka_run_group_tests_name("dispatch", tests, NULL, NULL);
}
