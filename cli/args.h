/* Argument helpers shared by every subcommand. Errors in what the user typed
 * are one line on stderr ("flashattn CMD: ...") and exit status 2: a CLI
 * has nothing to clean up that the OS would not, so helpers exit directly
 * instead of threading error codes through every parser. */
#ifndef FA_CLI_ARGS_H
#define FA_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

#if defined(__GNUC__)
#define FA_CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FA_CLI_NORETURN __attribute__((noreturn))
#else
#define FA_CLI_PRINTF(a, b)
#define FA_CLI_NORETURN
#endif

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Walks argv of one subcommand: argv[0] is the subcommand's name. */
typedef struct cli_args {
  int argc;
  char **argv;
  int i;          /* the argument being looked at */
  const char *eq; /* value after '=' in "--opt=value", if any */
} cli_args;

void cli_args_init(cli_args *a, int argc, char **argv);
/* 1 while there are arguments left; a.argv[a.i] is the current one. */
int cli_args_more(const cli_args *a);
/* Is the current argument the option `name` (as "--name" or "--name=v")? */
int cli_is(cli_args *a, const char *name);
/* The value of the option just matched by cli_is: after '=' or the next
 * argument; consumes both. Exits with a usage error when it is missing. */
const char *cli_value(cli_args *a);
/* The option matched by cli_is takes no value: consumes it. */
void cli_flag(cli_args *a);
/* The current argument matched nothing: usage error naming it. */
FA_CLI_NORETURN void cli_unknown(const cli_args *a);

/* The subcommand being run, for messages. */
void cli_set_command(const char *name);
const char *cli_command(void);
/* "flashattn CMD: message" on stderr and exit(CLI_EXIT_USAGE). */
FA_CLI_NORETURN void cli_usage_error(const char *fmt, ...) FA_CLI_PRINTF(1, 2);
/* Same, exit(CLI_EXIT_FAIL): something failed at run time. */
FA_CLI_NORETURN void cli_fail(const char *fmt, ...) FA_CLI_PRINTF(1, 2);

/* Number parsing: the whole string must be a number within [lo, hi]. */
int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi);
double cli_parse_double(const char *opt, const char *s, double lo, double hi);
/* Sizes with an optional K/M/G suffix (powers of 1024): "512M", "2G". */
int64_t cli_parse_bytes(const char *opt, const char *s);
/* Comma-separated doubles; returns how many (at most max). */
int cli_parse_doubles(const char *opt, const char *s, double *out, int max);
/* Comma-separated integers within [lo, hi]; returns how many. */
int cli_parse_ints(const char *opt, const char *s, int64_t *out, int max, int64_t lo, int64_t hi);
fa_dtype cli_parse_dtype(const char *opt, const char *s);
fa_backend cli_parse_backend(const char *opt, const char *s);
fa_cpu_isa cli_parse_isa(const char *opt, const char *s);

/* Human-readable bytes ("128 MiB", "1.50 GiB") into buf. */
const char *cli_fmt_bytes(double bytes, char *buf, size_t n);

#endif
