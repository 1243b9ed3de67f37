/* Threads (flashattn.h: "two threads with two contexts never interfere").
 * Several contexts on several threads at once, each on its own problem
 * (shapes, dtypes, masks, bias, dropout, windows, padding, packed
 * sequences), the cpu backend with OpenMP threads of its own inside
 * (fa_context_set_threads 2) next to ref; every output, forward and
 * backward, must equal the one computed alone, bit for bit (memcmp over the
 * whole buffer: view, padding and guards). Two threads run each problem at
 * the same time, reading the same input tensors.
 * The first test starts the threads before any other call in the process,
 * so that whatever the library initializes on first use (the CPU probe, the
 * ISA table) is initialized by several threads at once.
 * CI runs this program under ThreadSanitizer too (scripts/dev.sh test-tsan). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/cm.h"
#include "support/problem.h"

static const int32_t sq_2[] = {29, 11}, sk_2[] = {40, 53};
static const int32_t cu_q3[] = {0, 17, 18, 45}, cu_k3[] = {0, 9, 50, 71};

typedef struct job {
  tcase c;
  fa_dtype dt;
  fa_backend backend;
  int threads;    /* cpu: OpenMP threads inside the call */
  fa_cpu_isa isa; /* cpu */
} job;

/* Backwards on cpu ask for the deterministic one: the other sums dK/dV in
 * an order that depends on the schedule, and this test compares bits. */
static const job g_jobs[] = {
    {{"cpu_f32_causal_br_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 37, .Lk = 53, .D = 32, .Dv = 32, .causal = 1,
      .align = FA_ALIGN_BOTTOM_RIGHT},
     FA_F32,
     FA_BACKEND_CPU,
     2,
     FA_ISA_AUTO},
    {{"cpu_bf16_bias_alibi_dropout", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 29, .Lk = 67, .D = 16, .Dv = 24, .bias = 1,
      .dbias = 1, .alibi = 1, .dropout_p = 0.1, .seed = 7, .offset = 3},
     FA_BF16,
     FA_BACKEND_CPU,
     2,
     FA_ISA_GENERIC},
    {{"cpu_f16_window_seqlens_softcap", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 29, .Lk = 53, .D = 16, .Dv = 16,
      .use_window = 1, .wl = 5, .wr = 3, .seqlens_q = sq_2, .seqlens_k = sk_2, .softcap = 20},
     FA_F16,
     FA_BACKEND_CPU,
     1,
     FA_ISA_AUTO},
    {{"cpu_f32_varlen_mask_dropout", .B = 3, .Hq = 2, .Hkv = 1, .D = 16, .Dv = 16, .cu_q = cu_q3, .cu_k = cu_k3,
      .mask = 1, .mask_dead_rows = 1, .dropout_p = 0.2, .seed = 11, .causal = 1},
     FA_F32,
     FA_BACKEND_CPU,
     2,
     FA_ISA_AUTO},
    {{"ref_f64_causal_mask_dropout", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 21, .Lk = 21, .D = 8, .Dv = 8, .causal = 1,
      .mask = 1, .dropout_p = 0.2, .seed = 5},
     FA_F64,
     FA_BACKEND_REF,
     0,
     FA_ISA_AUTO},
    {{"ref_f32_bias_bcast_varlen", .B = 3, .Hq = 2, .Hkv = 2, .D = 8, .Dv = 8, .cu_q = cu_q3, .cu_k = cu_k3, .bias = 1,
      .bias_bcast = BC_B, .dbias = 1, .alibi = 1},
     FA_F32,
     FA_BACKEND_REF,
     0,
     FA_ISA_AUTO},
};
enum { NJOBS = sizeof g_jobs / sizeof g_jobs[0], COPIES = 2, NOUT = 6 };

/* outputs of a call: o, lse, dq, dk, dv, dbias */
static tbuf *outputs(tc_tensors *T, int i) {
  tbuf *o[NOUT] = {&T->o, &T->lse, &T->dq, &T->dk, &T->dv, &T->dbias};
  return o[i];
}
static const char *const g_out_names[NOUT] = {"o", "lse", "dq", "dk", "dv", "dbias"};

typedef struct result {
  unsigned char *bytes[NOUT]; /* guard | view | guard of each output */
  size_t size[NOUT];
} result;

static void result_free(result *r) {
  for (int i = 0; i < NOUT; ++i) free(r->bytes[i]);
  memset(r, 0, sizeof *r);
}

/* One problem's tensors; the case lives in the job (tc_inputs points to it). */
typedef struct prob {
  tc_inputs in;
  tc_tensors T;
} prob;

static int prob_make(prob *p, const job *j) {
  tc_inputs_make(&p->in, &j->c, j->dt, 21);
  if (tc_tensors_make(&p->T, &p->in, j->dt, TL_BHLD, 0) != 0) return -1;
  return 0;
}

static void prob_free(prob *p) {
  tc_tensors_free(&p->T);
  tc_inputs_free(&p->in);
}

/* Reads the inputs of shared (same shapes and layout) instead of its own. */
static void share_inputs(prob *p, const prob *shared) {
  p->T.q.t = shared->T.q.t;
  p->T.k.t = shared->T.k.t;
  p->T.v.t = shared->T.v.t;
  p->T.dout.t = shared->T.dout.t;
  p->T.opt.mask = shared->T.opt.mask;
  p->T.opt.bias = shared->T.opt.bias;
}

/* Forward then backward on ctx; r gets every output. 0, or -1 with why. */
static int run(fa_context *ctx, const job *j, prob *p, result *r, char *why, size_t n) {
  tc_tensors *T = &p->T;
  for (int i = 0; i < NOUT; ++i)
    if (tb_present(outputs(T, i))) tb_poison(outputs(T, i));
  fa_options opt = T->opt;
  opt.deterministic = 1;
  fa_status st = fa_forward(ctx, j->backend, &T->q.t, &T->k.t, &T->v.t, &opt, &T->o.t, &T->lse.t);
  if (st == FA_OK)
    st = fa_backward(ctx, j->backend, &T->q.t, &T->k.t, &T->v.t, &T->o.t, &T->dout.t, &T->lse.t, &opt, &T->dq.t,
                     &T->dk.t, &T->dv.t, tc_dbias_arg(T));
  if (st != FA_OK) {
    snprintf(why, n, "%s: %s (%s)", j->c.name, fa_status_name(st), fa_context_last_error(ctx));
    return -1;
  }
  if (fa_context_last_backend(ctx) != j->backend) {
    snprintf(why, n, "%s: ran on %s", j->c.name, fa_backend_name(fa_context_last_backend(ctx)));
    return -1;
  }
  for (int i = 0; i < NOUT; ++i) {
    const tbuf *b = outputs(T, i);
    if (!tb_present(b)) continue;
    r->size[i] = b->span + 2 * TB_GUARD;
    if (!r->bytes[i]) r->bytes[i] = malloc(r->size[i]);
    memcpy(r->bytes[i], b->base, r->size[i]);
  }
  return 0;
}

static fa_context *context_for(const job *j) {
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx) != FA_OK) return NULL;
  fa_context_set_threads(ctx, j->threads);
  fa_context_set_cpu_isa(ctx, j->isa);
  return ctx;
}

/* The first output that differs, or -1. */
static int differs(const result *a, const result *b) {
  for (int i = 0; i < NOUT; ++i)
    if (a->size[i] != b->size[i] || (a->size[i] && memcmp(a->bytes[i], b->bytes[i], a->size[i]) != 0)) return i;
  return -1;
}

static result g_alone[NJOBS]; /* each job's outputs, computed with no other thread running */

static void compute_alone(void) {
  for (int j = 0; j < NJOBS; ++j) {
    if (g_alone[j].size[0]) continue;
    prob p;
    char why[512];
    if (prob_make(&p, &g_jobs[j]) != 0) fail_msg("%s: setup failed", g_jobs[j].c.name);
    fa_context *ctx = context_for(&g_jobs[j]);
    assert_non_null(ctx);
    if (run(ctx, &g_jobs[j], &p, &g_alone[j], why, sizeof why) != 0) fail_msg("alone: %s", why);
    fa_context_destroy(ctx);
    prob_free(&p);
  }
}

typedef struct worker {
  const job *j;
  int index;
  const prob *shared; /* inputs read by every copy of this job, or NULL */
  int iters;
  pthread_barrier_t *start;
  result first; /* the outputs of the first iteration */
  char failure[600];
} worker;

static void *work(void *arg) {
  worker *w = (worker *)arg;
  prob p;
  result r = {0};
  const int made = prob_make(&p, w->j);
  pthread_barrier_wait(w->start); /* every thread starts its first call together */
  if (made != 0) {
    snprintf(w->failure, sizeof w->failure, "%s: setup failed", w->j->c.name);
    prob_free(&p);
    return NULL;
  }
  if (w->shared) share_inputs(&p, w->shared);
  fa_context *ctx = context_for(w->j);
  if (!ctx) {
    snprintf(w->failure, sizeof w->failure, "%s: no context", w->j->c.name);
    prob_free(&p);
    return NULL;
  }
  for (int it = 0; it < w->iters && !w->failure[0]; ++it) {
    char why[512];
    if (run(ctx, w->j, &p, it == 0 ? &w->first : &r, why, sizeof why) != 0) {
      snprintf(w->failure, sizeof w->failure, "iteration %d: %s", it, why);
      break;
    }
    if (it == 0 && !g_alone[w->index].size[0]) continue; /* cold start: compared by the caller */
    const int d = differs(it == 0 ? &w->first : &r, &g_alone[w->index]);
    if (d >= 0)
      snprintf(w->failure, sizeof w->failure, "%s, iteration %d: %s differs from the result computed alone",
               w->j->c.name, it, g_out_names[d]);
  }
  fa_context_destroy(ctx);
  result_free(&r);
  prob_free(&p);
  return NULL;
}

/* COPIES threads per job, all started at once; shared: the copies of a job
 * read one set of input tensors. */
static void run_threads(int iters, int shared) {
  worker w[NJOBS * COPIES];
  prob inputs[NJOBS];
  pthread_t th[NJOBS * COPIES];
  pthread_barrier_t start;
  const int n = NJOBS * COPIES;
  assert_int_equal(pthread_barrier_init(&start, NULL, (unsigned)n), 0);
  for (int j = 0; j < NJOBS && shared; ++j)
    if (prob_make(&inputs[j], &g_jobs[j]) != 0) fail_msg("%s: setup failed", g_jobs[j].c.name);
  memset(w, 0, sizeof w);
  for (int t = 0; t < n; ++t) {
    w[t].j = &g_jobs[t % NJOBS];
    w[t].index = t % NJOBS;
    w[t].shared = shared ? &inputs[t % NJOBS] : NULL;
    w[t].iters = iters;
    w[t].start = &start;
    assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  for (int t = 0; t < n; ++t) assert_int_equal(pthread_join(th[t], NULL), 0);
  pthread_barrier_destroy(&start);
  for (int j = 0; j < NJOBS && shared; ++j) prob_free(&inputs[j]);

  int failed = 0;
  const int cold = !g_alone[0].size[0];
  if (cold) compute_alone(); /* now, with no other thread running */
  for (int t = 0; t < n; ++t) {
    if (!w[t].failure[0] && cold) {
      const int d = differs(&w[t].first, &g_alone[w[t].index]);
      if (d >= 0)
        snprintf(w[t].failure, sizeof w[t].failure,
                 "%s, first call in the process: %s differs from the result "
                 "computed alone",
                 w[t].j->c.name, g_out_names[d]);
    }
    if (w[t].failure[0]) {
      print_error("thread %d: %s\n", t, w[t].failure);
      failed = 1;
    }
    result_free(&w[t].first);
  }
  if (failed) fail_msg("threads interfered (see above)");
}

/* The process's first calls, from every thread at once. */
static void test_cold_start(void **state) {
  (void)state;
  run_threads(1, 0);
}

/* Many calls from every thread, compared each time; the copies of a job
 * read the same input tensors. */
static void test_concurrent(void **state) {
  (void)state;
  compute_alone();
  run_threads(6, 1);
}

int main(void) {
  /* a backend missing from this build would make every job fail: skip */
  if (fa_backend_available(FA_BACKEND_CPU, NULL, 0) != FA_OK) {
    printf("cpu backend not usable here: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cold_start),
      cmocka_unit_test(test_concurrent),
  };
  const int rc = cmocka_run_group_tests_name("threads", tests, NULL, NULL);
  for (int j = 0; j < NJOBS; ++j) result_free(&g_alone[j]);
  return rc;
}
