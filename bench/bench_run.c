#include "bench_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpuinfo.h"
#include "devmem.h"
#include "eager.h"
#include "formulas.h"
#include "instance.h"
#include "memwatch.h"
#include "timer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_SETS 16

const char *fa_bench_pass_name(fa_bench_pass p) {
  static const char *names[] = {"fwd", "bwd", "fwd+bwd"};
  return p >= 0 && p < FA_BENCH_NPASS ? names[p] : "?";
}

double fa_bench_flops(const cli_spec *s, fa_bench_pass pass) {
  double f = 0;
  if (!s->n_seqlens_q)
    f = fa_flops_forward(s->B, s->Hq, s->Lq, s->Lk, s->D, s->Dv, s->causal > 0);
  else
    for (int b = 0; b < s->n_seqlens_q; ++b)
      f += fa_flops_forward(1, s->Hq, s->seqlens_q[b], s->seqlens_k[b], s->D, s->Dv, s->causal > 0);
  return pass == FA_BENCH_FWD ? f : pass == FA_BENCH_BWD ? 2.5 * f : 3.5 * f;
}

static double query_tokens(const cli_spec *s) {
  if (!s->n_seqlens_q) return (double)s->B * (double)s->Lq;
  double n = 0;
  for (int b = 0; b < s->n_seqlens_q; ++b) n += (double)s->seqlens_q[b];
  return n;
}

static int all_threads(int threads) {
#ifdef _OPENMP
  return threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

/* How many input sets to rotate through so that each timed call starts
 * with cold caches, as it would inside a model: enough to cover twice the
 * caches when one set fits in them. */
static int sets_for(const fa_bench_config *cfg, size_t set_bytes, int on_device) {
  if (cfg->rotate == 0) return 1;
  if (cfg->rotate > 0) return cfg->rotate < MAX_SETS ? cfg->rotate : MAX_SETS;
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  const size_t cache = on_device ? ((size_t)128 << 20) : ci->l3_bytes + ci->l2_bytes * (size_t)ci->logical_cpus;
  if (set_bytes == 0 || set_bytes > cache) return 1;
  const size_t n = 2 * cache / set_bytes + 1;
  return n < MAX_SETS ? (int)n : MAX_SETS;
}

/* Does the cpu backend run this pass's products on vdpbf16ps or AMX? Then
 * its %peak is of that bf16 rate (forward and backward alike). */
static int bf16_products(fa_cpu_isa isa, const cli_spec *s) {
  return (isa == FA_ISA_AVX512BF16 || isa == FA_ISA_AMX) && s->dtype == FA_BF16;
}

static double peak_for(const fa_bench_config *cfg, const fa_bench_target *t, const cli_spec *s, int threads,
                       fa_cpu_isa *isa_out) {
  fa_cpu_isa isa = FA_ISA_AUTO;
  if (t->eager) {
    isa = fa_eager_resolve_isa(cfg->isa);
  } else if (t->backend == FA_BACKEND_CPU) {
    fa_cpu_plan plan;
    if (fa_cpu_plan_get(cfg->isa, s->D, s->Dv, s->block_q, s->block_k, &plan) == FA_OK) isa = plan.isa;
  } else if (t->backend == FA_BACKEND_REF) {
    isa = FA_ISA_GENERIC; /* scalar float64: measured against the portable FP32 peak */
  }
  *isa_out = isa;
  if (cfg->peak_gflops > 0) return cfg->peak_gflops;
  if (!cfg->peak || isa == FA_ISA_AUTO) return 0;
  return fa_peak_gflops_for_dtype(cfg->peak, isa, !t->eager && bf16_products(isa, s), threads);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void finish(const fa_bench_config *cfg, const cli_spec *s, fa_bench_pass pass, double *ms, int n,
                   fa_bench_result *r) {
  qsort(ms, (size_t)n, sizeof *ms, cmp_double);
  r->reps = n;
  r->ms_min = ms[0];
  r->ms_max = ms[n - 1];
  r->ms_median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  r->flops = fa_bench_flops(s, pass);
  r->gflops = r->ms_median > 0 ? r->flops / (r->ms_median * 1e-3) * 1e-9 : 0;
  r->tokens_per_s = r->ms_median > 0 ? query_tokens(s) / (r->ms_median * 1e-3) : 0;
  (void)cfg;
}

/* ---- library backends --------------------------------------------------- */

typedef struct lib_call {
  fa_context *ctx;
  fa_backend backend;
} lib_call;

static fa_status call_forward(const lib_call *c, cli_instance *in) {
  return fa_forward(c->ctx, c->backend, &in->q, &in->k, &in->v, &in->opt, &in->o, &in->lse);
}

static fa_status call_backward(const lib_call *c, cli_instance *in) {
  return fa_backward(c->ctx, c->backend, &in->q, &in->k, &in->v, &in->o, &in->dout, &in->lse, &in->opt, &in->dq,
                     &in->dk, &in->dv, in->dbias.data ? &in->dbias : NULL);
}

static fa_status call_pass(const lib_call *c, cli_instance *in, fa_bench_pass pass) {
  fa_status st = FA_OK;
  if (pass != FA_BENCH_BWD) st = call_forward(c, in);
  if (st == FA_OK && pass != FA_BENCH_FWD) st = call_backward(c, in);
  return st;
}

static int is_refusal(fa_status st) {
  return st == FA_ERR_UNSUPPORTED || st == FA_ERR_DTYPE || st == FA_ERR_NO_BACKEND || st == FA_ERR_MEMORY_SPACE ||
         st == FA_ERR_OUT_OF_MEMORY;
}

static void run_library(const fa_bench_config *cfg, const fa_bench_target *t, const cli_spec *s, fa_bench_pass pass,
                        fa_bench_result *r) {
  char why[512];
  if (fa_backend_available(t->backend, why, sizeof why) != FA_OK) {
    r->status = FA_BENCH_SKIPPED;
    snprintf(r->note, sizeof r->note, "%s", why);
    return;
  }
  const int on_device = t->backend == FA_BACKEND_CUDA;
  if (on_device && !cli_dev_usable(why, sizeof why)) {
    r->status = FA_BENCH_SKIPPED;
    snprintf(r->note, sizeof r->note, "%s", why);
    return;
  }
  lib_call c = {NULL, t->backend};
  if (fa_context_create(&c.ctx) != FA_OK) {
    r->status = FA_BENCH_FAILED;
    snprintf(r->note, sizeof r->note, "cannot create a context");
    return;
  }
  fa_context_set_threads(c.ctx, cfg->threads);
  if (t->backend == FA_BACKEND_CPU) fa_context_set_cpu_isa(c.ctx, cfg->isa);

  static cli_instance host[MAX_SETS], dev[MAX_SETS];
  const int bwd = pass != FA_BENCH_FWD;
  cli_instance_alloc(&host[0], s, s->dtype, FA_F32, bwd);
  cli_instance_fill(&host[0], s, s->dtype);
  int nsets = sets_for(cfg, cli_instance_io_bytes(&host[0]), on_device);
  for (int i = 1; i < nsets; ++i) {
    cli_instance_alloc(&host[i], s, s->dtype, FA_F32, bwd);
    cli_instance_fill(&host[i], s, s->dtype);
  }
  r->sets = nsets;
  cli_instance *run = host;
  int mirrored = 0;
  fa_status st = FA_OK;
  if (on_device) {
    for (; mirrored < nsets; ++mirrored)
      if (cli_dev_mirror(&host[mirrored], &dev[mirrored], why, sizeof why) != 0) break;
    if (mirrored < nsets) {
      r->status = FA_BENCH_SKIPPED;
      snprintf(r->note, sizeof r->note, "%s", why);
      goto done;
    }
    run = dev;
  }
  if (pass == FA_BENCH_BWD) /* the backward reads a forward's O and LSE */
    for (int i = 0; i < nsets && st == FA_OK; ++i) st = call_forward(&c, &run[i]);

  /* first call: also the peak-memory measurement (host memory only) */
  if (st == FA_OK) {
    fa_memwatch w;
    fa_memwatch_start(&w);
    st = call_pass(&c, &run[0], pass);
    if (on_device) cli_dev_sync();
    r->extra_bytes = on_device ? -1 : fa_memwatch_stop(&w);
  }
  for (int i = 0; i < cfg->warmup && st == FA_OK; ++i) st = call_pass(&c, &run[(i + 1) % nsets], pass);
  double ms[1024];
  const int reps = cfg->reps < 1024 ? cfg->reps : 1024;
  cli_dev_timer *timer = on_device ? cli_dev_timer_create() : NULL;
  for (int i = 0; i < reps && st == FA_OK; ++i) {
    cli_instance *in = &run[i % nsets];
    if (timer) {
      cli_dev_timer_start(timer);
      st = call_pass(&c, in, pass);
      ms[i] = cli_dev_timer_stop_ms(timer);
    } else {
      const double t0 = fa_bench_now();
      st = call_pass(&c, in, pass);
      ms[i] = 1e3 * (fa_bench_now() - t0);
    }
  }
  cli_dev_timer_destroy(timer);
  if (st != FA_OK) {
    r->status = is_refusal(st) ? FA_BENCH_SKIPPED : FA_BENCH_FAILED;
    snprintf(r->note, sizeof r->note, "%s", fa_context_last_error(c.ctx));
  } else {
    finish(cfg, s, pass, ms, reps, r);
  }
done:
  for (int i = 0; i < mirrored; ++i) cli_dev_free(&dev[i]);
  for (int i = 0; i < nsets; ++i) cli_instance_free(&host[i]);
  fa_context_destroy(c.ctx);
}

/* ---- the eager baseline -------------------------------------------------- */

static const char *eager_refuses(const cli_spec *s) {
  if (s->dtype != FA_F32) return "the eager baseline is f32 only";
  if (s->layout_blhd) return "the eager baseline takes the bhld layout only";
  if (s->use_window || s->softcap > 0 || s->dropout_p > 0 || s->alibi || s->bias || s->mask_keep > 0 ||
      s->n_seqlens_q || s->varlen)
    return "the eager baseline does plain and causal attention only (no window, softcap, dropout, ALiBi, bias, "
           "mask, seqlens)";
  if (s->causal > 0 && s->align == FA_ALIGN_BOTTOM_RIGHT && s->Lq != s->Lk)
    return "the eager baseline aligns causal top-left only";
  return NULL;
}

static int eager_call(const fa_eager_problem *p, fa_eager_ws *ws, cli_instance *in, fa_bench_pass pass) {
  int rc = 0;
  if (pass != FA_BENCH_BWD) rc = fa_eager_forward(p, ws, in->q.data, in->k.data, in->v.data, in->o.data);
  if (rc == 0 && pass != FA_BENCH_FWD)
    rc = fa_eager_backward(p, ws, in->q.data, in->k.data, in->v.data, in->o.data, in->dout.data, in->dq.data,
                           in->dk.data, in->dv.data);
  return rc;
}

static void run_eager(const fa_bench_config *cfg, const cli_spec *s, fa_bench_pass pass, fa_bench_result *r) {
  const char *no = eager_refuses(s);
  if (no) {
    r->status = FA_BENCH_SKIPPED;
    snprintf(r->note, sizeof r->note, "%s", no);
    return;
  }
  fa_eager_problem p = {s->B,  s->Hq,         s->Hkv,   s->Lq,    s->Lk,       s->D,
                        s->Dv, s->causal > 0, s->scale, cfg->isa, cfg->threads};
  const double need = fa_eager_forward_bytes(&p) + (pass != FA_BENCH_FWD ? fa_eager_backward_bytes(&p) / 2 : 0);
  if (need > cfg->mem_limit) {
    char a[32], b[32];
    r->status = FA_BENCH_SKIPPED;
    snprintf(r->note, sizeof r->note, "eager would hold %s of S, P%s > --mem-limit %s",
             cli_fmt_bytes(need, a, sizeof a), pass != FA_BENCH_FWD ? ", dP" : "",
             cli_fmt_bytes(cfg->mem_limit, b, sizeof b));
    return;
  }
  static cli_instance sets[MAX_SETS];
  const int bwd = pass != FA_BENCH_FWD;
  cli_instance_alloc(&sets[0], s, FA_F32, FA_F32, bwd);
  cli_instance_fill(&sets[0], s, FA_F32);
  const int nsets = sets_for(cfg, cli_instance_io_bytes(&sets[0]), 0);
  for (int i = 1; i < nsets; ++i) {
    cli_instance_alloc(&sets[i], s, FA_F32, FA_F32, bwd);
    cli_instance_fill(&sets[i], s, FA_F32);
  }
  r->sets = nsets;
  fa_eager_ws ws;
  memset(&ws, 0, sizeof ws);
  int rc = 0;
  if (pass == FA_BENCH_BWD) rc = eager_call(&p, &ws, &sets[0], FA_BENCH_FWD); /* P for the backward */
  if (rc == 0) {
    fa_memwatch w;
    fa_memwatch_start(&w);
    rc = eager_call(&p, &ws, &sets[0], pass);
    r->extra_bytes = fa_memwatch_stop(&w);
  }
  for (int i = 0; i < cfg->warmup && rc == 0; ++i) rc = eager_call(&p, &ws, &sets[(i + 1) % nsets], pass);
  double ms[1024];
  const int reps = cfg->reps < 1024 ? cfg->reps : 1024;
  for (int i = 0; i < reps && rc == 0; ++i) {
    const double t0 = fa_bench_now();
    rc = eager_call(&p, &ws, &sets[i % nsets], pass);
    ms[i] = 1e3 * (fa_bench_now() - t0);
  }
  if (rc != 0) {
    r->status = FA_BENCH_SKIPPED;
    snprintf(r->note, sizeof r->note, "eager ran out of memory for S and P");
  } else {
    finish(cfg, s, pass, ms, reps, r);
  }
  fa_eager_ws_free(&ws);
  for (int i = 0; i < nsets; ++i) cli_instance_free(&sets[i]);
}

void fa_bench_run(const fa_bench_config *cfg, const fa_bench_target *t, const cli_spec *s, fa_bench_pass pass,
                  fa_bench_result *r) {
  memset(r, 0, sizeof *r);
  r->extra_bytes = -1;
  fa_cpu_isa isa;
  r->threads = t->eager || t->backend == FA_BACKEND_CPU ? all_threads(cfg->threads) : 0;
  if (!t->eager && t->backend == FA_BACKEND_REF) r->threads = 1; /* ref is one plain loop nest */
  r->peak_gflops = peak_for(cfg, t, s, r->threads, &isa);
  snprintf(r->isa, sizeof r->isa, "%s",
           (t->eager || t->backend == FA_BACKEND_CPU) && isa != FA_ISA_AUTO ? fa_cpu_isa_name(isa) : "-");
  if (t->eager)
    run_eager(cfg, s, pass, r);
  else
    run_library(cfg, t, s, pass, r);
}
