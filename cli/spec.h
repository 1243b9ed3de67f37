/* One attention problem as the user describes it on the command line
 * (shape, dtype, masks, options), shared by `check` and `bench`. */
#ifndef FA_CLI_SPEC_H
#define FA_CLI_SPEC_H

#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "flashattn.h"

#define CLI_MAX_SEQS 64

typedef enum cli_bias_mode {
  CLI_BIAS_NONE = 0,
  CLI_BIAS_FULL,  /* [B, Hq, Lq, Lk] */
  CLI_BIAS_HEAD,  /* [1, Hq, Lq, Lk]: shared by the batch */
  CLI_BIAS_BATCH, /* [B, 1, Lq, Lk]: shared by the heads */
  CLI_BIAS_SHARED /* [1, 1, Lq, Lk] */
} cli_bias_mode;

typedef struct cli_spec {
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  fa_dtype dtype;
  int causal;
  fa_align align;
  int use_window;
  int64_t window_left, window_right;
  double scale, softcap;
  double dropout_p;
  uint64_t dropout_seed;
  uint32_t dropout_offset;
  int alibi;
  cli_bias_mode bias;
  int bias_grad;    /* ask for dBias in the backward */
  double mask_keep; /* > 0: a random boolean mask keeping this fraction */
  int n_seqlens_q, n_seqlens_k;
  int64_t seqlens_q[CLI_MAX_SEQS], seqlens_k[CLI_MAX_SEQS];
  int varlen;      /* packed layout built from the seqlens */
  int layout_blhd; /* memory [B, L, H, D] instead of [B, H, L, D] */
  int deterministic;
  int block_q, block_k;
  uint64_t seed; /* of the random inputs */
} cli_spec;

/* The default problem of `check`: small, but tiled (L = 200 is no multiple
 * of any tile), grouped-query (Hq = 2 Hkv) and causal. */
void cli_spec_default_check(cli_spec *s);
/* The default problem of `bench`: one realistic head group, no mask. */
void cli_spec_default_bench(cli_spec *s);

/* If the current argument is a problem option, consumes it and returns 1. */
int cli_spec_parse(cli_spec *s, cli_args *a);
/* Cross-option checks (after parsing); usage error on a contradiction. */
void cli_spec_finish(cli_spec *s);
/* The --help text of the problem options. */
void cli_spec_help(FILE *f);
/* One line: "B=2 Hq=4 Hkv=2 Lq=200 Lk=200 D=64 Dv=64 f32 causal ...". */
void cli_spec_describe(const cli_spec *s, char *buf, size_t n);

/* Actual lengths of sequence b (full length when no seqlens were given). */
int64_t cli_spec_lq(const cli_spec *s, int64_t b);
int64_t cli_spec_lk(const cli_spec *s, int64_t b);
/* Does the problem use anything beyond plain (causal) attention? */
int cli_spec_has_extras(const cli_spec *s);

#endif
