/* The subcommands of `flashattn`: each takes its own argv (argv[0] is the
 * subcommand's name) and returns the process exit status. */
#ifndef FA_CLI_H
#define FA_CLI_H

int fa_cli_info(int argc, char **argv);
int fa_cli_check(int argc, char **argv);
int fa_cli_trace(int argc, char **argv);
int fa_cli_explain(int argc, char **argv);
int fa_cli_bench(int argc, char **argv); /* bench/bench_cmd.c */

#endif
