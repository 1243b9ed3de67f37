/* flashattn: the command-line tool. One subcommand per file; this file only
 * picks one. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "flashattn.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *what;
} command;

static const command commands[] = {
    {"info", fa_cli_info, "version, backends, CPU (ISAs, caches, tile plan), GPU; --peak measures FLOP/s and GB/s"},
    {"check", fa_cli_check, "run every usable backend against the float64 reference, forward and backward"},
    {"trace", fa_cli_trace, "step through the online softmax of a tiny problem, tile by tile"},
    {"explain", fa_cli_explain, "bytes moved and arithmetic intensity: eager vs tiled attention, on a roofline"},
    {"bench", fa_cli_bench, "time forward/backward of any backend (and an eager baseline); --sweep for CSV/JSON"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: flashattn COMMAND [options]     (flashattn COMMAND --help for its options)\n"
          "\n"
          "flashattn %d.%d.%d: exact attention (FlashAttention) forward and backward on ref/cpu/cuda\n"
          "\n"
          "commands:\n",
          FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(name, "--version") == 0) {
    printf("flashattn %d.%d.%d\n", FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
    return CLI_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
    if (strcmp(name, commands[i].name) == 0) {
      cli_set_command(commands[i].name);
      return commands[i].run(argc - 1, argv + 1);
    }
  fprintf(stderr, "flashattn: unknown command '%s' (commands: info, check, trace, explain, bench; see --help)\n", name);
  return CLI_EXIT_USAGE;
}
