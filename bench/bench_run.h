/* Timing one (backend, problem, pass): warm-up, repetitions, median / min /
 * max, FLOP/s, tokens/s, peak extra memory, fraction of the machine's peak. */
#ifndef FA_BENCH_RUN_H
#define FA_BENCH_RUN_H

#include "flashattn.h"
#include "peak.h"
#include "spec.h"

typedef enum fa_bench_pass { FA_BENCH_FWD = 0, FA_BENCH_BWD, FA_BENCH_FWDBWD, FA_BENCH_NPASS } fa_bench_pass;
const char *fa_bench_pass_name(fa_bench_pass p);

/* What runs: a library backend, or the eager baseline of bench/eager.c. */
typedef struct fa_bench_target {
  fa_backend backend; /* for the library */
  int eager;          /* 1: the eager baseline instead */
  char name[16];      /* "cpu", "eager", "ref", "cuda" */
} fa_bench_target;

typedef struct fa_bench_config {
  int warmup, reps;
  int threads;         /* cpu, eager: 0 = OpenMP's default */
  fa_cpu_isa isa;      /* cpu, eager: AUTO = the best */
  double mem_limit;    /* eager: skip when S and P (and dP) would exceed it */
  const fa_peak *peak; /* measured machine, or NULL */
  double peak_gflops;  /* > 0: use this peak for every target instead */
  int rotate;          /* -1 auto (when one input set fits in cache), 0 off, N sets */
} fa_bench_config;

typedef enum fa_bench_status { FA_BENCH_OK = 0, FA_BENCH_SKIPPED, FA_BENCH_FAILED } fa_bench_status;

typedef struct fa_bench_result {
  fa_bench_status status;
  char note[512]; /* why skipped or failed */
  char isa[16];   /* ISA the run used (cpu, eager) */
  int threads, reps, sets;
  double ms_median, ms_min, ms_max;
  double flops;        /* per call, standard count */
  double gflops;       /* at the median */
  double tokens_per_s; /* query tokens per second at the median */
  double extra_bytes;  /* peak extra memory of the call; < 0 unknown */
  double peak_gflops;  /* the peak it is measured against; 0 unknown */
} fa_bench_result;

/* Standard FLOP count of one call of pass over s (per sequence when the
 * lengths vary). */
double fa_bench_flops(const cli_spec *s, fa_bench_pass pass);

void fa_bench_run(const fa_bench_config *cfg, const fa_bench_target *t, const cli_spec *s, fa_bench_pass pass,
                  fa_bench_result *r);

#endif
