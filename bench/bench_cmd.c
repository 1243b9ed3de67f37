/* flashattn bench: time any backend (and the eager baseline) on any
 * problem; --sweep runs L = 512 .. 16384 x D x causal into CSV and JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "bench_report.h"
#include "bench_run.h"
#include "cli.h"
#include "memwatch.h"
#include "peak.h"
#include "spec.h"

#define MAX_TARGETS 8
#define MAX_DIMS 8

typedef struct bench_opts {
  cli_spec spec;
  fa_bench_config cfg;
  fa_bench_target targets[MAX_TARGETS];
  int ntargets;
  int passes[FA_BENCH_NPASS];
  int passes_given;
  int sweep, quiet, no_peak;
  int64_t lmin, lmax;
  int64_t dims[MAX_DIMS];
  int ndims;
  const char *csv, *json, *out;
} bench_opts;

static void help(void) {
  printf(
      "usage: flashattn bench [options]            one problem, every pass\n"
      "       flashattn bench --sweep [options]    L = 512 .. 16384, D = 64 and 128, causal and not\n"
      "\n"
      "Times forward, backward and forward+backward: one call that also measures\n"
      "memory, warm-up calls, then --reps timed calls; prints the median (and min,\n"
      "max) in ms, FLOP/s with the standard count (forward 4*B*Hq*Lq*Lk*D, halved when\n"
      "causal; backward 2.5x that), query tokens/s, the peak extra memory of the call\n"
      "and the fraction of this machine's FP32 peak (measured at start, per ISA and\n"
      "thread count, as `flashattn info --peak` does). When one set of inputs fits in\n"
      "the caches, calls rotate through several sets so that none starts warm.\n"
      "\n"
      "default problem: B=1 Hq=Hkv=8 L=2048 D=64 f32, not causal (sweep: one head).\n"
      "\n"
      "  --backend LIST   of cpu, eager, ref, cuda (default cpu,eager). eager: the\n"
      "                   textbook baseline in f32 that materializes S and P in memory\n"
      "  --pass LIST      of fwd, bwd, fwdbwd, or all (default all; sweep: fwd,bwd)\n"
      "  --reps N         timed calls, at least 5 (default 5);  --warmup N (default 1)\n"
      "  --threads N      threads of cpu and eager (default: OpenMP's)\n"
      "  --isa ISA        cpu and eager: generic, avx2, avx512, avx512bf16, amx (default: the best)\n"
      "  --mem-limit SIZE eager is skipped when its S and P would exceed SIZE\n"
      "                   (e.g. 2G; default a quarter of this machine's memory)\n"
      "  --peak-gflops X  compare with this peak instead of measuring one\n"
      "  --no-peak        measure no peak (no %%peak column)\n"
      "  --rotate N       input sets to rotate through (0 = off; default: automatic)\n"
      "  --csv FILE, --json FILE   also write the results there\n"
      "  --decode         a decode step against a KV cache instead, in GB/s of K/V\n"
      "                   against the STREAM triad (flashattn bench --decode --help)\n"
      "  --quiet          no progress on stderr\n"
      "sweep:\n"
      "  --sweep          L from --lmin (512) to --lmax (16384), doubling; for each D in\n"
      "                   --dims (64,128) and causal and not (--causal or --no-causal: one)\n"
      "  --out PREFIX     write PREFIX.csv and PREFIX.json (default bench-sweep)\n"
      "\n"
      "extra memory: %s, measured on the first call.\n"
      "\n",
      fa_memwatch_method());
  cli_spec_help(stdout);
  printf(
      "\nexamples:\n"
      "  flashattn bench --l 4096 --heads 8 --causal\n"
      "  flashattn bench --backend cpu,eager --pass fwd --l 8192 --mem-limit 1G\n"
      "  flashattn bench --sweep --heads 1 --pass fwd --out docs/bench-cpu\n"
      "  python3 bench/plot.py bench-sweep.json docs/bench-cpu.png\n");
}

static void add_target(bench_opts *o, const char *name) {
  if (o->ntargets == MAX_TARGETS) cli_usage_error("--backend: too many backends");
  fa_bench_target *t = &o->targets[o->ntargets++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%.15s", name);
  if (strcmp(name, "eager") == 0) {
    t->eager = 1;
    return;
  }
  t->backend = cli_parse_backend("--backend", name);
  if (t->backend == FA_BACKEND_AUTO) cli_usage_error("--backend: name backends (cpu, eager, ref, cuda), not auto");
}

static void parse_list(const char *opt, const char *list, void (*each)(bench_opts *, const char *), bench_opts *o) {
  char buf[32];
  for (const char *p = list; *p;) {
    const size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof buf) cli_usage_error("%s: '%s' is not a comma-separated list", opt, list);
    memcpy(buf, p, len);
    buf[len] = '\0';
    each(o, buf);
    p += len + (p[len] == ',');
  }
}

static void add_pass(bench_opts *o, const char *name) {
  if (strcmp(name, "all") == 0) {
    for (int i = 0; i < FA_BENCH_NPASS; ++i) o->passes[i] = 1;
  } else if (strcmp(name, "fwd") == 0) {
    o->passes[FA_BENCH_FWD] = 1;
  } else if (strcmp(name, "bwd") == 0) {
    o->passes[FA_BENCH_BWD] = 1;
  } else if (strcmp(name, "fwdbwd") == 0 || strcmp(name, "fwd+bwd") == 0) {
    o->passes[FA_BENCH_FWDBWD] = 1;
  } else {
    cli_usage_error("--pass: '%s' is not fwd, bwd, fwdbwd or all", name);
  }
  o->passes_given = 1;
}

/* Did the user choose the head counts? (The sweep's default differs.) */
static int heads_given(int argc, char **argv) {
  static const char *names[] = {"--heads", "--h", "--hq", "--hkv"};
  for (int i = 1; i < argc; ++i)
    for (int k = 0; k < 4; ++k) {
      const size_t n = strlen(names[k]);
      if (strncmp(argv[i], names[k], n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=')) return 1;
    }
  return 0;
}

static double default_mem_limit(void) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return 0.25 * (double)pages * (double)page;
  return 4.0 * 1024 * 1024 * 1024;
}

static void parse(bench_opts *o, int argc, char **argv) {
  cli_args a;
  cli_args_init(&a, argc, argv);
  cli_spec_default_bench(&o->spec);
  o->spec.causal = -1; /* not given: the sweep runs both, a single run plain */
  o->cfg.warmup = 1;
  o->cfg.reps = 5;
  o->cfg.rotate = -1;
  o->cfg.mem_limit = default_mem_limit();
  o->lmin = 512, o->lmax = 16384;
  o->out = "bench-sweep";
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help") || strcmp(a.argv[a.i], "-h") == 0) {
      help();
      exit(0);
    } else if (cli_is(&a, "backend")) {
      o->ntargets = 0;
      const char *list = cli_value(&a);
      char buf[32];
      for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) cli_usage_error("--backend: '%s' is not a comma-separated list", list);
        memcpy(buf, p, len);
        buf[len] = '\0';
        add_target(o, buf);
        p += len + (p[len] == ',');
      }
    } else if (cli_is(&a, "pass")) {
      parse_list("--pass", cli_value(&a), add_pass, o);
    } else if (cli_is(&a, "reps")) {
      o->cfg.reps = (int)cli_parse_int("--reps", cli_value(&a), 5, 1000);
    } else if (cli_is(&a, "warmup")) {
      o->cfg.warmup = (int)cli_parse_int("--warmup", cli_value(&a), 0, 1000);
    } else if (cli_is(&a, "threads")) {
      o->cfg.threads = (int)cli_parse_int("--threads", cli_value(&a), 1, 4096);
    } else if (cli_is(&a, "isa")) {
      o->cfg.isa = cli_parse_isa("--isa", cli_value(&a));
    } else if (cli_is(&a, "mem-limit")) {
      o->cfg.mem_limit = (double)cli_parse_bytes("--mem-limit", cli_value(&a));
    } else if (cli_is(&a, "peak-gflops")) {
      o->cfg.peak_gflops = cli_parse_double("--peak-gflops", cli_value(&a), 1e-6, 1e12);
    } else if (cli_is(&a, "no-peak")) {
      cli_flag(&a);
      o->no_peak = 1;
    } else if (cli_is(&a, "rotate")) {
      o->cfg.rotate = (int)cli_parse_int("--rotate", cli_value(&a), 0, 16);
    } else if (cli_is(&a, "csv")) {
      o->csv = cli_value(&a);
    } else if (cli_is(&a, "json")) {
      o->json = cli_value(&a);
    } else if (cli_is(&a, "quiet") || strcmp(a.argv[a.i], "-q") == 0) {
      a.eq = NULL;
      cli_flag(&a);
      o->quiet = 1;
    } else if (cli_is(&a, "sweep")) {
      cli_flag(&a);
      o->sweep = 1;
    } else if (cli_is(&a, "lmin")) {
      o->lmin = cli_parse_int("--lmin", cli_value(&a), 1, (int64_t)1 << 24);
    } else if (cli_is(&a, "lmax")) {
      o->lmax = cli_parse_int("--lmax", cli_value(&a), 1, (int64_t)1 << 24);
    } else if (cli_is(&a, "dims")) {
      o->ndims = cli_parse_ints("--dims", cli_value(&a), o->dims, MAX_DIMS, 1, 1 << 16);
    } else if (cli_is(&a, "out")) {
      o->out = cli_value(&a);
    } else if (!cli_spec_parse(&o->spec, &a)) {
      cli_unknown(&a);
    }
  }
  if (o->sweep && !heads_given(argc, argv)) o->spec.Hq = o->spec.Hkv = 1; /* L = 16384 must fit a laptop */
  cli_spec_finish(&o->spec);
  if (o->ntargets == 0) {
    add_target(o, "cpu");
    add_target(o, "eager");
  }
  if (!o->passes_given) {
    o->passes[FA_BENCH_FWD] = o->passes[FA_BENCH_BWD] = 1;
    if (!o->sweep) o->passes[FA_BENCH_FWDBWD] = 1;
  }
  if (o->sweep) {
    if (o->lmin > o->lmax) cli_usage_error("--lmin %lld is above --lmax %lld", (long long)o->lmin, (long long)o->lmax);
    if (o->spec.n_seqlens_q) cli_usage_error("--sweep sets the lengths itself: drop --seqlens");
    if (o->ndims == 0) o->dims[0] = 64, o->dims[1] = 128, o->ndims = 2;
  }
}

static int needs_cpu_peak(const bench_opts *o) {
  for (int i = 0; i < o->ntargets; ++i)
    if (o->targets[i].eager || o->targets[i].backend != FA_BACKEND_CUDA) return 1;
  return 0;
}

static void run_one(const bench_opts *o, const cli_spec *s, fa_bench_row *rows, int *n, int total) {
  for (int t = 0; t < o->ntargets; ++t)
    for (int p = 0; p < FA_BENCH_NPASS; ++p) {
      if (!o->passes[p]) continue;
      fa_bench_row *row = &rows[*n];
      row->target = o->targets[t];
      row->spec = *s;
      row->pass = (fa_bench_pass)p;
      if (!o->quiet) {
        fprintf(stderr, "bench [%d/%d] %s %s L=%lld D=%lld%s ...", *n + 1, total, o->targets[t].name,
                fa_bench_pass_name(row->pass), (long long)s->Lq, (long long)s->D, s->causal > 0 ? " causal" : "");
        fflush(stderr);
      }
      fa_bench_run(&o->cfg, &o->targets[t], s, row->pass, &row->res);
      if (!o->quiet) {
        if (row->res.status == FA_BENCH_OK)
          fprintf(stderr, " %.3f ms, %.1f GFLOP/s\n", row->res.ms_median, row->res.gflops);
        else
          fprintf(stderr, " %s\n", row->res.status == FA_BENCH_SKIPPED ? "skipped" : "FAILED");
      }
      ++*n;
    }
}

static void write_files(const bench_opts *o, const char *csv, const char *json, const fa_bench_row *rows, int n,
                        const fa_peak *peak) {
  if (csv && fa_bench_write_csv(csv, rows, n) != 0) cli_fail("cannot write %s", csv);
  if (json && fa_bench_write_json(json, rows, n, peak, o->cfg.peak_gflops, o->cfg.mem_limit) != 0)
    cli_fail("cannot write %s", json);
  if (csv) printf("wrote %s\n", csv);
  if (json) printf("wrote %s\n", json);
}

int fa_bench_decode(int argc, char **argv); /* bench_decode.c */

int fa_cli_bench(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "--decode") == 0) return fa_bench_decode(argc, argv);
  static bench_opts o;
  memset(&o, 0, sizeof o);
  parse(&o, argc, argv);
  fa_memwatch_prepare();

  static fa_peak peak;
  memset(&peak, 0, sizeof peak);
  if (!o.no_peak && o.cfg.peak_gflops <= 0 && needs_cpu_peak(&o)) {
    fa_peak_measure_flops(&peak, o.cfg.threads, !o.quiet);
    o.cfg.peak = &peak;
  }
  int npass = 0;
  for (int p = 0; p < FA_BENCH_NPASS; ++p) npass += o.passes[p];

  char desc[512];
  if (!o.sweep) {
    cli_spec s = o.spec;
    if (s.causal < 0) s.causal = 0;
    cli_spec_describe(&s, desc, sizeof desc);
    printf("flashattn bench: %s\n", desc);
    printf("%d timed calls after 1 memory-measuring call and %d warm-up; times are the median [min, max]\n", o.cfg.reps,
           o.cfg.warmup);
    if (o.cfg.peak) {
      printf("peak (measured now; FP32 FMA, bf16 vdpbf16ps for avx512bf16, tdpbf16ps for amx):");
      for (int isa = FA_ISA_AMX; isa >= FA_ISA_GENERIC; --isa)
        if (peak.isa[isa].measured)
          printf(" %s %.1f/%.1f", fa_cpu_isa_name((fa_cpu_isa)isa), peak.isa[isa].gflops_1t, peak.isa[isa].gflops_all);
      printf(" GFLOP/s (1/%d threads; %%peak of bf16 products is of their ISA's bf16 rate)\n", peak.threads);
    } else if (o.cfg.peak_gflops > 0) {
      printf("peak: %.1f GFLOP/s (given)\n", o.cfg.peak_gflops);
    }
    printf("\n");
    static fa_bench_row rows[MAX_TARGETS * FA_BENCH_NPASS];
    int n = 0;
    run_one(&o, &s, rows, &n, o.ntargets * npass);
    fa_bench_print_header(stdout);
    int failed = 0;
    for (int i = 0; i < n; ++i) {
      fa_bench_print_row(stdout, &rows[i]);
      failed |= rows[i].res.status == FA_BENCH_FAILED;
    }
    printf("\nextra mem: %s\n", fa_memwatch_method());
    for (int i = 0; i < n; ++i)
      if (rows[i].res.sets > 1) {
        printf("inputs: one set fits in the caches, so the calls rotated through %d sets\n", rows[i].res.sets);
        break;
      }
    write_files(&o, o.csv, o.json, rows, n, o.cfg.peak);
    return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
  }

  /* sweep */
  int nl = 0;
  for (int64_t L = o.lmin; L <= o.lmax; L *= 2) ++nl;
  const int ncausal = o.spec.causal < 0 ? 2 : 1;
  const int total = nl * o.ndims * ncausal * o.ntargets * npass;
  fa_bench_row *rows = calloc((size_t)total, sizeof *rows);
  if (!rows) cli_fail("out of memory");
  cli_spec base = o.spec;
  base.causal = 0;
  cli_spec_describe(&base, desc, sizeof desc);
  printf("flashattn bench --sweep: L = %lld .. %lld, D in {", (long long)o.lmin, (long long)o.lmax);
  for (int i = 0; i < o.ndims; ++i) printf("%s%lld", i ? ", " : "", (long long)o.dims[i]);
  printf("}, %s; B=%lld Hq=%lld Hkv=%lld %s\n\n",
         ncausal == 2    ? "causal and not"
         : o.spec.causal ? "causal"
                         : "not causal",
         (long long)o.spec.B, (long long)o.spec.Hq, (long long)o.spec.Hkv, fa_dtype_name(o.spec.dtype));
  int n = 0, failed = 0;
  fa_bench_print_header(stdout);
  for (int di = 0; di < o.ndims; ++di)
    for (int c = 0; c < ncausal; ++c)
      for (int64_t L = o.lmin; L <= o.lmax; L *= 2) {
        cli_spec s = o.spec;
        s.D = s.Dv = o.dims[di];
        s.causal = ncausal == 2 ? c : o.spec.causal;
        s.Lq = s.Lk = L;
        const int first = n;
        run_one(&o, &s, rows, &n, total);
        for (int i = first; i < n; ++i) {
          fa_bench_print_row(stdout, &rows[i]);
          failed |= rows[i].res.status == FA_BENCH_FAILED;
        }
        fflush(stdout);
      }
  char csv[1024], json[1024];
  snprintf(csv, sizeof csv, "%s.csv", o.out);
  snprintf(json, sizeof json, "%s.json", o.out);
  printf("\nextra mem: %s\n", fa_memwatch_method());
  write_files(&o, o.csv ? o.csv : csv, o.json ? o.json : json, rows, n, o.cfg.peak);
  free(rows);
  return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
