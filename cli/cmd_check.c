/* flashattn check: every backend usable here against the float64 ref, on
 * the same inputs, forward and backward, one line per output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "compare.h"
#include "devmem.h"
#include "instance.h"
#include "spec.h"
#include "tensor_io.h"

typedef struct target {
  fa_backend backend;
  fa_cpu_isa isa; /* cpu only */
  char label[32];
} target;

typedef struct check_opts {
  cli_spec spec;
  int only_backend[FA_BACKEND_COUNT]; /* all zero = every backend */
  int any_only;
  fa_cpu_isa isa; /* AUTO = every ISA this CPU has */
  int threads;
  int forward_only;
  int verbose;
  cli_tol tol;
  int tol_given;
} check_opts;

typedef struct tally {
  int passed, failed, skipped;
  char summary[1024];
} tally;

static void help(void) {
  printf(
      "usage: flashattn check [options]\n"
      "\n"
      "Runs every backend usable on this machine on one problem, forward and\n"
      "backward, and compares each output (O, LSE, dQ, dK, dV, dBias) with the\n"
      "float64 ref backend on the same inputs. Exit status 1 on any mismatch.\n"
      "Without options the problem is B=2 Hq=4 Hkv=2 L=200 D=64 causal f32:\n"
      "small, but several tiles long (200 is no multiple of a tile) and GQA.\n"
      "\n"
      "what to run:\n"
      "  --backend LIST   only these backends (comma-separated: ref, cpu, cuda)\n"
      "  --isa ISA        cpu backend: only this ISA (default: each one this CPU has)\n"
      "  --threads N      cpu backend threads (default: OpenMP's)\n"
      "  --forward-only   skip the backward\n"
      "  --atol X, --rtol X  tolerance (default by dtype: see below)\n"
      "  --verbose        print the dispatch report of each call\n"
      "\n");
  cli_spec_help(stdout);
  printf(
      "\n"
      "tolerance: an element passes when |x - ref| <= atol + rtol*|ref|.\n"
      "  f32: atol=rtol=1e-4   f16: atol 5e-3, rtol 1e-2   bf16: 3e-2   f64: 1e-9\n"
      "  gradients in f16 / bf16: atol at least rtol * max|ref| of that gradient (dS is\n"
      "  rounded to the dtype for the gradient products: docs/semantics.md)\n"
      "The 'worst/tol' column is max |x - ref| / (atol + rtol*|ref|): <= 1 passes.\n"
      "The closing 'N passed, N failed, N skipped' counts each backend's forward and\n"
      "backward separately; a backend that cannot take the problem is skipped, never passed.\n"
      "\n"
      "examples:\n"
      "  flashattn check\n"
      "  flashattn check --dtype bf16 --l 1000 --d 128 --no-causal\n"
      "  flashattn check --mask --bias --dropout 0.1 --seqlens 150,37 --align br\n"
      "  flashattn check --varlen --seqlens 100,1,64 --window 32,0 --alibi\n");
}

static void parse(check_opts *o, int argc, char **argv) {
  cli_args a;
  cli_args_init(&a, argc, argv);
  cli_spec_default_check(&o->spec);
  o->tol = cli_tol_for(FA_F32);
  double atol = -1, rtol = -1;
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help") || strcmp(a.argv[a.i], "-h") == 0) {
      help();
      exit(0);
    } else if (cli_is(&a, "backend")) {
      const char *list = cli_value(&a);
      char buf[64];
      for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) cli_usage_error("--backend: '%s' is not a list of backends", list);
        memcpy(buf, p, len);
        buf[len] = '\0';
        const fa_backend b = cli_parse_backend("--backend", buf);
        if (b == FA_BACKEND_AUTO) cli_usage_error("--backend: name backends (ref, cpu, cuda), not auto");
        o->only_backend[b] = 1;
        o->any_only = 1;
        p += len + (p[len] == ',');
      }
    } else if (cli_is(&a, "isa")) {
      o->isa = cli_parse_isa("--isa", cli_value(&a));
    } else if (cli_is(&a, "threads")) {
      o->threads = (int)cli_parse_int("--threads", cli_value(&a), 0, 4096);
    } else if (cli_is(&a, "forward-only")) {
      cli_flag(&a);
      o->forward_only = 1;
    } else if (cli_is(&a, "verbose") || strcmp(a.argv[a.i], "-v") == 0) {
      a.eq = NULL;
      cli_flag(&a);
      o->verbose = 1;
    } else if (cli_is(&a, "atol")) {
      atol = cli_parse_double("--atol", cli_value(&a), 0, HUGE_VAL);
    } else if (cli_is(&a, "rtol")) {
      rtol = cli_parse_double("--rtol", cli_value(&a), 0, HUGE_VAL);
    } else if (!cli_spec_parse(&o->spec, &a)) {
      cli_unknown(&a);
    }
  }
  cli_spec_finish(&o->spec);
  o->tol = cli_tol_for(o->spec.dtype);
  if (atol >= 0) o->tol.atol = atol;
  if (rtol >= 0) o->tol.rtol = rtol;
}

static int wanted(const check_opts *o, fa_backend b) {
  return !o->any_only || o->only_backend[b];
}

/* The backends (and cpu ISAs) to run, in the order they are printed. */
static int list_targets(const check_opts *o, target *t, int max) {
  int n = 0;
  if (wanted(o, FA_BACKEND_REF) && n < max) {
    t[n].backend = FA_BACKEND_REF, t[n].isa = FA_ISA_AUTO;
    snprintf(t[n].label, sizeof t[n].label, "ref(%s I/O)", fa_dtype_name(o->spec.dtype));
    ++n;
  }
  if (wanted(o, FA_BACKEND_CPU)) {
    const fa_cpu_isa isas[] = {FA_ISA_AMX, FA_ISA_AVX512BF16, FA_ISA_AVX512, FA_ISA_AVX2, FA_ISA_GENERIC};
    int any = 0;
    if (fa_backend_available(FA_BACKEND_CPU, NULL, 0) == FA_OK)
      for (int i = 0; i < 5 && n < max; ++i) {
        if (o->isa != FA_ISA_AUTO && o->isa != isas[i]) continue;
        if (o->isa == FA_ISA_AUTO && !fa_cpu_isa_supported(isas[i])) continue;
        t[n].backend = FA_BACKEND_CPU, t[n].isa = isas[i];
        snprintf(t[n].label, sizeof t[n].label, "cpu/%s", fa_cpu_isa_name(isas[i]));
        ++n, any = 1;
      }
    if (!any && n < max) { /* report it (as skipped or as refused) under its plain name */
      t[n].backend = FA_BACKEND_CPU, t[n].isa = o->isa;
      snprintf(t[n].label, sizeof t[n].label, "cpu");
      ++n;
    }
  }
  if (wanted(o, FA_BACKEND_CUDA) && n < max) {
    t[n].backend = FA_BACKEND_CUDA, t[n].isa = FA_ISA_AUTO;
    snprintf(t[n].label, sizeof t[n].label, "cuda");
    ++n;
  }
  return n;
}

static void fill_nan(const fa_tensor *t, int ndim) {
  /* outputs start as NaN so that an element a backend forgets to write
   * shows up as a mismatch instead of a lucky zero */
  if (!t->data) return;
  const int64_t n3 = ndim == 4 ? t->shape[3] : 1;
  for (int64_t a = 0; a < t->shape[0]; ++a)
    for (int64_t b = 0; b < t->shape[1]; ++b)
      for (int64_t c = 0; c < t->shape[2]; ++c)
        for (int64_t d = 0; d < n3; ++d) cli_tensor_set(t, a, b, c, d, NAN);
}

static void tally_add(tally *y, const char *label, const char *what) {
  const size_t u = strlen(y->summary);
  snprintf(y->summary + u, sizeof y->summary - u, "%s%s %s", u ? ", " : "", label, what);
}

/* Prints one output's comparison; returns 1 if it passed. */
static int report(const char *label, const char *name, const fa_tensor *x, const fa_tensor *ref, int ndim,
                  cli_tol tol) {
  cli_cmp c;
  cli_compare(x, ref, ndim, tol, &c);
  const int ok = c.bad == 0;
  printf("  %-16s %-6s %11.3e %10.3g   %s", label, name, c.max_abs, c.worst, ok ? "ok" : "FAIL");
  if (!ok) {
    if (ndim == 4)
      printf("  %lld of %lld over; worst at [b=%lld,h=%lld,i=%lld,d=%lld]: %.8g vs ref %.8g", (long long)c.bad,
             (long long)c.n, (long long)c.at[0], (long long)c.at[1], (long long)c.at[2], (long long)c.at[3], c.x_at,
             c.r_at);
    else
      printf("  %lld of %lld over; worst at [b=%lld,h=%lld,i=%lld]: %.8g vs ref %.8g", (long long)c.bad, (long long)c.n,
             (long long)c.at[0], (long long)c.at[1], (long long)c.at[2], c.x_at, c.r_at);
  }
  printf("\n");
  return ok;
}

/* A refusal that means "this backend does not do that" rather than "wrong". */
static int is_refusal(fa_status st) {
  return st == FA_ERR_UNSUPPORTED || st == FA_ERR_DTYPE || st == FA_ERR_NO_BACKEND || st == FA_ERR_MEMORY_SPACE;
}

/* The dispatch report, one indented line per backend it mentions. */
static void print_report(const char *label, const fa_context *ctx) {
  const char *r = fa_context_dispatch_report(ctx);
  while (*r) {
    const size_t n = strcspn(r, "\n");
    printf("  %-16s dispatch: %.*s\n", label, (int)n, r);
    r += n + (r[n] == '\n');
  }
}

static void print_skip(const char *label, const char *pass, const char *why) {
  printf("  %-16s %-6s skipped: %s\n", label, pass, why);
}

/* Runs one target, prints its rows, counts its passes. */
static void run_target(const check_opts *o, const target *t, const cli_instance *oracle, tally *y) {
  const cli_spec *s = &o->spec;
  char why[600];
  if (fa_backend_available(t->backend, why, sizeof why) != FA_OK) {
    print_skip(t->label, "", why);
    y->skipped += o->forward_only ? 1 : 2;
    tally_add(y, t->label, "skipped");
    return;
  }
  const int on_device = t->backend == FA_BACKEND_CUDA;
  if (on_device && !cli_dev_usable(why, sizeof why)) {
    print_skip(t->label, "", why);
    y->skipped += o->forward_only ? 1 : 2;
    tally_add(y, t->label, "skipped");
    return;
  }
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx) != FA_OK) cli_fail("out of memory creating a context");
  fa_context_set_threads(ctx, o->threads);
  if (t->backend == FA_BACKEND_CPU) fa_context_set_cpu_isa(ctx, t->isa);

  cli_instance host, dev, *run = &host;
  cli_instance_alloc(&host, s, s->dtype, FA_F32, !o->forward_only);
  cli_instance_fill(&host, s, s->dtype);
  fill_nan(&host.o, 4);
  fill_nan(&host.lse, 3);
  fill_nan(&host.dq, 4);
  fill_nan(&host.dk, 4);
  fill_nan(&host.dv, 4);
  fill_nan(&host.dbias, 4);
  if (on_device) {
    if (cli_dev_mirror(&host, &dev, why, sizeof why) != 0) {
      print_skip(t->label, "", why);
      y->skipped += o->forward_only ? 1 : 2;
      tally_add(y, t->label, "skipped");
      cli_instance_free(&host);
      fa_context_destroy(ctx);
      return;
    }
    run = &dev;
  }

  int fwd_ok = 0, bwd_ok = 0, fwd_ran = 0, bwd_ran = 0;
  fa_status st = fa_forward(ctx, t->backend, &run->q, &run->k, &run->v, &run->opt, &run->o, &run->lse);
  if (o->verbose) print_report(t->label, ctx);
  if (st != FA_OK) {
    if (is_refusal(st)) {
      print_skip(t->label, "fwd", fa_context_last_error(ctx));
      y->skipped++;
    } else {
      printf("  %-16s %-6s FAIL: %s\n", t->label, "fwd", fa_context_last_error(ctx));
      y->failed++;
    }
  } else {
    if (on_device && (cli_dev_download(&host.o, &dev.o, 4, why, sizeof why) ||
                      cli_dev_download(&host.lse, &dev.lse, 3, why, sizeof why)))
      cli_fail("%s", why);
    fwd_ran = 1;
    fwd_ok = report(t->label, "O", &host.o, &oracle->o, 4, o->tol);
    /* LSE is f32 on every backend: compare it at f32's tolerance at least */
    cli_tol lt = o->tol;
    if (lt.atol < 1e-4) lt.atol = lt.rtol = 1e-4;
    fwd_ok &= report(t->label, "LSE", &host.lse, &oracle->lse, 3, lt);
    fwd_ok ? y->passed++ : y->failed++;
  }

  if (!o->forward_only) {
    /* the backward reads the oracle's O and LSE, so that its errors are its own */
    cli_tensor_copy(&host.o, &oracle->o, 4);
    cli_tensor_copy(&host.lse, &oracle->lse, 3);
    if (on_device && (cli_dev_upload(&dev.o, &host.o, 4, why, sizeof why) ||
                      cli_dev_upload(&dev.lse, &host.lse, 3, why, sizeof why)))
      cli_fail("%s", why);
    st = fa_backward(ctx, t->backend, &run->q, &run->k, &run->v, &run->o, &run->dout, &run->lse, &run->opt, &run->dq,
                     &run->dk, &run->dv, run->dbias.data ? &run->dbias : NULL);
    if (o->verbose) print_report(t->label, ctx);
    if (st != FA_OK) {
      if (is_refusal(st)) {
        print_skip(t->label, "bwd", fa_context_last_error(ctx));
        y->skipped++;
      } else {
        printf("  %-16s %-6s FAIL: %s\n", t->label, "bwd", fa_context_last_error(ctx));
        y->failed++;
      }
    } else {
      if (on_device) {
        const fa_tensor *h[] = {&host.dq, &host.dk, &host.dv, &host.dbias};
        const fa_tensor *d[] = {&dev.dq, &dev.dk, &dev.dv, &dev.dbias};
        for (int i = 0; i < 4; ++i)
          if (h[i]->data && cli_dev_download(h[i], d[i], 4, why, sizeof why)) cli_fail("%s", why);
      }
      bwd_ran = 1;
      const fa_dtype gdt = o->spec.dtype;
      bwd_ok = report(t->label, "dQ", &host.dq, &oracle->dq, 4, cli_tol_grad(gdt, o->tol, &oracle->dq, 4));
      bwd_ok &= report(t->label, "dK", &host.dk, &oracle->dk, 4, cli_tol_grad(gdt, o->tol, &oracle->dk, 4));
      bwd_ok &= report(t->label, "dV", &host.dv, &oracle->dv, 4, cli_tol_grad(gdt, o->tol, &oracle->dv, 4));
      if (host.dbias.data) {
        /* dBias sums over broadcast dims (batch, heads): more terms, more rounding */
        cli_tol bt = o->tol;
        bt.atol *= (double)(s->B * s->Hq) / (double)(host.dbias.shape[0] * host.dbias.shape[1]);
        bwd_ok &= report(t->label, "dBias", &host.dbias, &oracle->dbias, 4, bt);
      }
      bwd_ok ? y->passed++ : y->failed++;
    }
  }
  const int any_fail = (fwd_ran && !fwd_ok) || (bwd_ran && !bwd_ok) || (st != FA_OK && !is_refusal(st));
  if (any_fail)
    tally_add(y, t->label, "FAILED");
  else if (fwd_ran && (bwd_ran || o->forward_only))
    tally_add(y, t->label, "ok");
  else if (fwd_ran || bwd_ran)
    tally_add(y, t->label, fwd_ran ? "ok (forward only)" : "ok (backward only)");
  else
    tally_add(y, t->label, "skipped");

  if (on_device) cli_dev_free(&dev);
  cli_instance_free(&host);
  fa_context_destroy(ctx);
}

int fa_cli_check(int argc, char **argv) {
  check_opts o;
  memset(&o, 0, sizeof o);
  parse(&o, argc, argv);
  const cli_spec *s = &o.spec;
  char desc[512];
  cli_spec_describe(s, desc, sizeof desc);
  printf("flashattn check: %s\n", desc);
  printf("oracle: the ref backend in float64 on the same inputs (each input rounded to %s first)\n",
         fa_dtype_name(s->dtype));
  printf("pass:   |x - ref| <= atol + rtol*|ref| per element, atol %.0e, rtol %.0e%s\n\n", o.tol.atol, o.tol.rtol,
         o.spec.dtype == FA_BF16 || o.spec.dtype == FA_F16 ? "; gradients: atol >= rtol*max|ref|" : "");

  /* the oracle: ref in float64 */
  cli_instance oracle;
  cli_instance_alloc(&oracle, s, FA_F64, FA_F64, !o.forward_only);
  cli_instance_fill(&oracle, s, s->dtype);
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx) != FA_OK) cli_fail("out of memory creating a context");
  if (fa_forward(ctx, FA_BACKEND_REF, &oracle.q, &oracle.k, &oracle.v, &oracle.opt, &oracle.o, &oracle.lse) != FA_OK)
    cli_usage_error("the problem is not valid: %s", fa_context_last_error(ctx));
  if (!o.forward_only &&
      fa_backward(ctx, FA_BACKEND_REF, &oracle.q, &oracle.k, &oracle.v, &oracle.o, &oracle.dout, &oracle.lse,
                  &oracle.opt, &oracle.dq, &oracle.dk, &oracle.dv, oracle.dbias.data ? &oracle.dbias : NULL) != FA_OK)
    cli_fail("the ref backward failed: %s", fa_context_last_error(ctx));
  fa_context_destroy(ctx);

  printf("  %-16s %-6s %11s %10s   %s\n", "backend", "output", "max|x-ref|", "worst/tol", "result");
  target targets[8];
  const int nt = list_targets(&o, targets, 8);
  tally y;
  memset(&y, 0, sizeof y);
  for (int i = 0; i < nt; ++i) {
    run_target(&o, &targets[i], &oracle, &y);
    fflush(stdout);
  }
  cli_instance_free(&oracle);
  printf("\nsummary: %s\n", y.summary);
  printf("%d passed, %d failed, %d skipped\n", y.passed, y.failed, y.skipped);
  return y.failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
