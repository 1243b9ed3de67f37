#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_command = "";

void cli_set_command(const char *name) {
  g_command = name;
}
const char *cli_command(void) {
  return g_command;
}

static void vmessage(const char *fmt, va_list ap) {
  fprintf(stderr, "flashattn%s%s: ", g_command[0] ? " " : "", g_command);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmessage(fmt, ap);
  va_end(ap);
  exit(CLI_EXIT_USAGE);
}

void cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmessage(fmt, ap);
  va_end(ap);
  exit(CLI_EXIT_FAIL);
}

void cli_args_init(cli_args *a, int argc, char **argv) {
  a->argc = argc;
  a->argv = argv;
  a->i = 1;
  a->eq = NULL;
}

int cli_args_more(const cli_args *a) {
  return a->i < a->argc;
}

int cli_is(cli_args *a, const char *name) {
  const char *s = a->argv[a->i];
  if (s[0] != '-' || s[1] != '-') return 0;
  const size_t n = strlen(name);
  if (strncmp(s + 2, name, n) != 0) return 0;
  if (s[2 + n] == '\0') {
    a->eq = NULL;
    return 1;
  }
  if (s[2 + n] == '=') {
    a->eq = s + 3 + n;
    return 1;
  }
  return 0;
}

const char *cli_value(cli_args *a) {
  const char *opt = a->argv[a->i];
  if (a->eq) {
    a->i += 1;
    return a->eq;
  }
  if (a->i + 1 >= a->argc) cli_usage_error("%s needs a value (see --help)", opt);
  a->i += 2;
  return a->argv[a->i - 1];
}

void cli_flag(cli_args *a) {
  if (a->eq) cli_usage_error("%s takes no value", a->argv[a->i]);
  a->i += 1;
}

void cli_unknown(const cli_args *a) {
  cli_usage_error("unknown argument '%s' (see flashattn %s --help)", a->argv[a->i], g_command);
}

int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi) {
  char *end = NULL;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end != '\0') cli_usage_error("%s: '%s' is not an integer", opt, s);
  if (v < lo || v > hi) cli_usage_error("%s: %lld is outside [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
  return (int64_t)v;
}

double cli_parse_double(const char *opt, const char *s, double lo, double hi) {
  char *end = NULL;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || isnan(v)) cli_usage_error("%s: '%s' is not a number", opt, s);
  if (v < lo || v > hi) cli_usage_error("%s: %g is outside [%g, %g]", opt, v, lo, hi);
  return v;
}

int64_t cli_parse_bytes(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) cli_usage_error("%s: '%s' is not a size (e.g. 512M, 4G)", opt, s);
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024.0, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024.0, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024.0 * 1024.0, ++end;
  if (*end == 'i') ++end;
  if (*end == 'B') ++end;
  if (*end != '\0') cli_usage_error("%s: '%s' is not a size (e.g. 512M, 4G)", opt, s);
  return (int64_t)(v * mult);
}

int cli_parse_doubles(const char *opt, const char *s, double *out, int max) {
  int n = 0;
  char buf[64];
  const char *p = s;
  while (*p) {
    const size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof buf) cli_usage_error("%s: '%s' is not a comma-separated list of numbers", opt, s);
    if (n == max) cli_usage_error("%s: at most %d values", opt, max);
    memcpy(buf, p, len);
    buf[len] = '\0';
    out[n++] = cli_parse_double(opt, buf, -HUGE_VAL, HUGE_VAL);
    p += len;
    if (*p == ',') ++p;
  }
  if (n == 0) cli_usage_error("%s: empty list", opt);
  return n;
}

int cli_parse_ints(const char *opt, const char *s, int64_t *out, int max, int64_t lo, int64_t hi) {
  int n = 0;
  char buf[32];
  const char *p = s;
  while (*p) {
    const size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof buf) cli_usage_error("%s: '%s' is not a comma-separated list of integers", opt, s);
    if (n == max) cli_usage_error("%s: at most %d values", opt, max);
    memcpy(buf, p, len);
    buf[len] = '\0';
    out[n++] = cli_parse_int(opt, buf, lo, hi);
    p += len;
    if (*p == ',') ++p;
  }
  if (n == 0) cli_usage_error("%s: empty list", opt);
  return n;
}

fa_dtype cli_parse_dtype(const char *opt, const char *s) {
  const fa_dtype all[] = {FA_F32, FA_F64, FA_F16, FA_BF16};
  for (int i = 0; i < 4; ++i)
    if (strcmp(s, fa_dtype_name(all[i])) == 0) return all[i];
  cli_usage_error("%s: '%s' is not a dtype (f32, f64, f16, bf16)", opt, s);
}

fa_backend cli_parse_backend(const char *opt, const char *s) {
  fa_backend b;
  if (fa_backend_from_name(s, &b) != FA_OK) cli_usage_error("%s: '%s' is not a backend (auto, ref, cpu, cuda)", opt, s);
  return b;
}

fa_cpu_isa cli_parse_isa(const char *opt, const char *s) {
  for (int i = FA_ISA_AUTO; i <= FA_ISA_AMX; ++i)
    if (strcmp(s, fa_cpu_isa_name((fa_cpu_isa)i)) == 0) return (fa_cpu_isa)i;
  cli_usage_error("%s: '%s' is not an ISA (auto, generic, avx2, avx512, avx512bf16, amx)", opt, s);
}

const char *cli_fmt_bytes(double bytes, char *buf, size_t n) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (fabs(bytes) >= 1024.0 && u < 4) bytes /= 1024.0, ++u;
  if (u == 0 || bytes == floor(bytes))
    snprintf(buf, n, "%.0f %s", bytes, unit[u]);
  else
    snprintf(buf, n, "%.2f %s", bytes, unit[u]);
  return buf;
}
