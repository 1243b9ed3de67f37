#include "bench_report.h"

#include <math.h>
#include <string.h>

#include "args.h"
#include "core/cpuinfo.h"
#include "memwatch.h"

void fa_bench_print_header(FILE *f) {
  fprintf(f, "%-7s %-7s %-7s %6s %5s %4s %10s %10s %10s %9s %6s %10s %11s\n", "backend", "isa", "pass", "L", "D", "cau",
          "median ms", "min ms", "max ms", "GFLOP/s", "%peak", "tokens/s", "extra mem");
}

void fa_bench_print_row(FILE *f, const fa_bench_row *row) {
  const fa_bench_result *r = &row->res;
  const cli_spec *s = &row->spec;
  char L[24];
  if (s->Lq == s->Lk)
    snprintf(L, sizeof L, "%lld", (long long)s->Lq);
  else
    snprintf(L, sizeof L, "%lldx%lld", (long long)s->Lq, (long long)s->Lk);
  fprintf(f, "%-7s %-7s %-7s %6s %5lld %4s ", row->target.name, r->isa, fa_bench_pass_name(row->pass), L,
          (long long)s->D, s->causal > 0 ? "yes" : "no");
  if (r->status != FA_BENCH_OK) {
    fprintf(f, "%s: %s\n", r->status == FA_BENCH_SKIPPED ? "skipped" : "FAILED", r->note);
    return;
  }
  char pk[16], mem[32];
  if (r->peak_gflops > 0)
    snprintf(pk, sizeof pk, "%5.1f%%", 100.0 * r->gflops / r->peak_gflops);
  else
    snprintf(pk, sizeof pk, "-");
  if (r->extra_bytes >= 0)
    cli_fmt_bytes(r->extra_bytes, mem, sizeof mem);
  else
    snprintf(mem, sizeof mem, "n/a");
  fprintf(f, "%10.3f %10.3f %10.3f %9.1f %6s %10.3g %11s\n", r->ms_median, r->ms_min, r->ms_max, r->gflops, pk,
          r->tokens_per_s, mem);
}

static const char *status_name(fa_bench_status s) {
  return s == FA_BENCH_OK ? "ok" : s == FA_BENCH_SKIPPED ? "skipped" : "failed";
}

/* CSV field: quoted, inner quotes doubled. */
static void csv_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

int fa_bench_write_csv(const char *path, const fa_bench_row *rows, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "backend,isa,pass,B,Hq,Hkv,Lq,Lk,D,Dv,dtype,causal,threads,reps,sets,ms_median,ms_min,ms_max,flops,gflops,"
          "peak_gflops,frac_peak,tokens_per_s,extra_bytes,status,note\n");
  for (int i = 0; i < n; ++i) {
    const fa_bench_row *w = &rows[i];
    const fa_bench_result *r = &w->res;
    const cli_spec *s = &w->spec;
    fprintf(f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%d,%d,%d,%d,", w->target.name, r->isa,
            fa_bench_pass_name(w->pass), (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->Lq,
            (long long)s->Lk, (long long)s->D, (long long)s->Dv, fa_dtype_name(s->dtype), s->causal > 0, r->threads,
            r->reps, r->sets);
    if (r->status == FA_BENCH_OK)
      fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,", r->ms_median, r->ms_min, r->ms_max,
              fa_bench_flops(s, w->pass), r->gflops, r->peak_gflops,
              r->peak_gflops > 0 ? r->gflops / r->peak_gflops : 0.0, r->tokens_per_s, r->extra_bytes);
    else
      fprintf(f, ",,,,,,,,,");
    fprintf(f, "%s,", status_name(r->status));
    csv_str(f, r->note);
    fputc('\n', f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, const char *key, double v, int last) {
  if (isfinite(v))
    fprintf(f, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
  else
    fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

int fa_bench_write_json(const char *path, const fa_bench_row *rows, int n, const fa_peak *peak, double peak_gflops,
                        double mem_limit) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  fprintf(f, "{\n  \"machine\": {\"cpu\": ");
  json_str(f, ci->model);
  fprintf(f, ", \"logical_cpus\": %d", ci->logical_cpus);
  if (peak && peak->have_flops) {
    fprintf(f, ", \"peak_threads\": %d, \"peak_gflops\": {", peak->threads);
    int first = 1;
    for (int isa = FA_ISA_GENERIC; isa <= FA_ISA_AMX; ++isa) {
      if (!peak->isa[isa].measured) continue;
      fprintf(f, "%s\"%s\": {\"1\": %.6g, \"all\": %.6g}", first ? "" : ", ", fa_cpu_isa_name((fa_cpu_isa)isa),
              peak->isa[isa].gflops_1t, peak->isa[isa].gflops_all);
      first = 0;
    }
    fprintf(f, "}");
  }
  if (peak && peak->have_bw) fprintf(f, ", \"triad_gbs\": %.6g", peak->triad_gbs);
  if (peak_gflops > 0) fprintf(f, ", \"peak_gflops_given\": %.6g", peak_gflops);
  fprintf(f, ", \"eager_mem_limit\": %.0f, \"extra_memory_method\": ", mem_limit);
  json_str(f, fa_memwatch_method());
  fprintf(f, "},\n  \"results\": [\n");
  for (int i = 0; i < n; ++i) {
    const fa_bench_row *w = &rows[i];
    const fa_bench_result *r = &w->res;
    const cli_spec *s = &w->spec;
    fprintf(f, "    {\"backend\": \"%s\", \"isa\": \"%s\", \"pass\": \"%s\", ", w->target.name, r->isa,
            fa_bench_pass_name(w->pass));
    fprintf(f,
            "\"B\": %lld, \"Hq\": %lld, \"Hkv\": %lld, \"Lq\": %lld, \"Lk\": %lld, \"D\": %lld, \"Dv\": %lld, "
            "\"dtype\": \"%s\", \"causal\": %s, \"threads\": %d, \"reps\": %d, \"sets\": %d, \"status\": \"%s\", ",
            (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->Lq, (long long)s->Lk, (long long)s->D,
            (long long)s->Dv, fa_dtype_name(s->dtype), s->causal > 0 ? "true" : "false", r->threads, r->reps, r->sets,
            status_name(r->status));
    if (r->status == FA_BENCH_OK) {
      json_num(f, "ms_median", r->ms_median, 0);
      json_num(f, "ms_min", r->ms_min, 0);
      json_num(f, "ms_max", r->ms_max, 0);
      json_num(f, "flops", fa_bench_flops(s, w->pass), 0);
      json_num(f, "gflops", r->gflops, 0);
      json_num(f, "peak_gflops", r->peak_gflops > 0 ? r->peak_gflops : NAN, 0);
      json_num(f, "tokens_per_s", r->tokens_per_s, 0);
      json_num(f, "extra_bytes", r->extra_bytes >= 0 ? r->extra_bytes : NAN, 0);
    }
    fprintf(f, "\"note\": ");
    json_str(f, r->note);
    fprintf(f, "}%s\n", i + 1 < n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}
