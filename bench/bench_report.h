/* bench results as a table (stdout), CSV and JSON (for bench/plot.py). */
#ifndef FA_BENCH_REPORT_H
#define FA_BENCH_REPORT_H

#include <stdio.h>

#include "bench_run.h"

typedef struct fa_bench_row {
  fa_bench_target target;
  cli_spec spec;
  fa_bench_pass pass;
  fa_bench_result res;
} fa_bench_row;

void fa_bench_print_header(FILE *f);
void fa_bench_print_row(FILE *f, const fa_bench_row *row);
/* 0 on success; -1 with errno set when the file cannot be written. */
int fa_bench_write_csv(const char *path, const fa_bench_row *rows, int n);
int fa_bench_write_json(const char *path, const fa_bench_row *rows, int n, const fa_peak *peak, double peak_gflops,
                        double mem_limit);

#endif
