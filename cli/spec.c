#include "spec.h"

#include <math.h>
#include <string.h>

static void common_defaults(cli_spec *s) {
  memset(s, 0, sizeof *s);
  s->dtype = FA_F32;
  s->align = FA_ALIGN_TOP_LEFT;
  s->window_left = s->window_right = -1;
  s->bias_grad = 1;
  s->dropout_seed = 42;
  s->seed = 1;
}

void cli_spec_default_check(cli_spec *s) {
  common_defaults(s);
  s->B = 2, s->Hq = 4, s->Hkv = 2, s->Lq = s->Lk = 200, s->D = s->Dv = 64;
  s->causal = 1;
}

void cli_spec_default_bench(cli_spec *s) {
  common_defaults(s);
  s->B = 1, s->Hq = 8, s->Hkv = 8, s->Lq = s->Lk = 2048, s->D = s->Dv = 64;
}

static cli_bias_mode parse_bias(const char *v) {
  if (!v || strcmp(v, "full") == 0) return CLI_BIAS_FULL;
  if (strcmp(v, "head") == 0) return CLI_BIAS_HEAD;
  if (strcmp(v, "batch") == 0) return CLI_BIAS_BATCH;
  if (strcmp(v, "shared") == 0) return CLI_BIAS_SHARED;
  cli_usage_error("--bias: '%s' is not one of full, head, batch, shared", v);
}

int cli_spec_parse(cli_spec *s, cli_args *a) {
  const int64_t big = (int64_t)1 << 30;
  if (cli_is(a, "b")) {
    s->B = cli_parse_int("--b", cli_value(a), 1, big);
  } else if (cli_is(a, "hq")) {
    s->Hq = cli_parse_int("--hq", cli_value(a), 1, big);
    if (s->Hkv > s->Hq || s->Hq % s->Hkv) s->Hkv = s->Hq; /* until --hkv says otherwise */
  } else if (cli_is(a, "hkv")) {
    s->Hkv = cli_parse_int("--hkv", cli_value(a), 1, big);
  } else if (cli_is(a, "h") || cli_is(a, "heads")) {
    s->Hq = s->Hkv = cli_parse_int("--heads", cli_value(a), 1, big);
  } else if (cli_is(a, "l")) {
    s->Lq = s->Lk = cli_parse_int("--l", cli_value(a), 1, big);
  } else if (cli_is(a, "lq")) {
    s->Lq = cli_parse_int("--lq", cli_value(a), 1, big);
  } else if (cli_is(a, "lk")) {
    s->Lk = cli_parse_int("--lk", cli_value(a), 1, big);
  } else if (cli_is(a, "d")) {
    s->D = s->Dv = cli_parse_int("--d", cli_value(a), 1, 1 << 16);
  } else if (cli_is(a, "dv")) {
    s->Dv = cli_parse_int("--dv", cli_value(a), 1, 1 << 16);
  } else if (cli_is(a, "dtype")) {
    s->dtype = cli_parse_dtype("--dtype", cli_value(a));
  } else if (cli_is(a, "causal")) {
    cli_flag(a);
    s->causal = 1;
  } else if (cli_is(a, "no-causal")) {
    cli_flag(a);
    s->causal = 0;
  } else if (cli_is(a, "align")) {
    const char *v = cli_value(a);
    if (strcmp(v, "top-left") == 0 || strcmp(v, "tl") == 0)
      s->align = FA_ALIGN_TOP_LEFT;
    else if (strcmp(v, "bottom-right") == 0 || strcmp(v, "br") == 0)
      s->align = FA_ALIGN_BOTTOM_RIGHT;
    else
      cli_usage_error("--align: '%s' is not top-left (tl) or bottom-right (br)", v);
  } else if (cli_is(a, "window")) {
    int64_t w[2];
    if (cli_parse_ints("--window", cli_value(a), w, 2, -1, big) != 2)
      cli_usage_error("--window needs LEFT,RIGHT (-1 = unbounded)");
    s->use_window = 1, s->window_left = w[0], s->window_right = w[1];
  } else if (cli_is(a, "scale")) {
    s->scale = cli_parse_double("--scale", cli_value(a), 0, HUGE_VAL);
  } else if (cli_is(a, "softcap")) {
    s->softcap = cli_parse_double("--softcap", cli_value(a), 0, HUGE_VAL);
  } else if (cli_is(a, "dropout")) {
    s->dropout_p = cli_parse_double("--dropout", cli_value(a), 0, 0.999999);
  } else if (cli_is(a, "dropout-seed")) {
    s->dropout_seed = (uint64_t)cli_parse_int("--dropout-seed", cli_value(a), 0, INT64_MAX);
  } else if (cli_is(a, "dropout-offset")) {
    s->dropout_offset = (uint32_t)cli_parse_int("--dropout-offset", cli_value(a), 0, UINT32_MAX);
  } else if (cli_is(a, "alibi")) {
    cli_flag(a);
    s->alibi = 1;
  } else if (cli_is(a, "bias")) {
    s->bias = parse_bias(a->eq);
    a->i += 1;
  } else if (cli_is(a, "no-bias-grad")) {
    cli_flag(a);
    s->bias_grad = 0;
  } else if (cli_is(a, "mask")) {
    s->mask_keep = a->eq ? cli_parse_double("--mask", a->eq, 1e-9, 1) : 0.8;
    a->i += 1;
  } else if (cli_is(a, "seqlens")) {
    s->n_seqlens_q = cli_parse_ints("--seqlens", cli_value(a), s->seqlens_q, CLI_MAX_SEQS, 0, big);
  } else if (cli_is(a, "seqlens-k")) {
    s->n_seqlens_k = cli_parse_ints("--seqlens-k", cli_value(a), s->seqlens_k, CLI_MAX_SEQS, 0, big);
  } else if (cli_is(a, "varlen")) {
    cli_flag(a);
    s->varlen = 1;
  } else if (cli_is(a, "layout")) {
    const char *v = cli_value(a);
    if (strcmp(v, "bhld") == 0)
      s->layout_blhd = 0;
    else if (strcmp(v, "blhd") == 0)
      s->layout_blhd = 1;
    else
      cli_usage_error("--layout: '%s' is not bhld or blhd", v);
  } else if (cli_is(a, "deterministic")) {
    cli_flag(a);
    s->deterministic = 1;
  } else if (cli_is(a, "block-q")) {
    s->block_q = (int)cli_parse_int("--block-q", cli_value(a), 0, 1 << 16);
  } else if (cli_is(a, "block-k")) {
    s->block_k = (int)cli_parse_int("--block-k", cli_value(a), 0, 1 << 16);
  } else if (cli_is(a, "seed")) {
    s->seed = (uint64_t)cli_parse_int("--seed", cli_value(a), 0, INT64_MAX);
  } else {
    return 0;
  }
  return 1;
}

void cli_spec_finish(cli_spec *s) {
  if (s->Hq % s->Hkv) cli_usage_error("--hq %lld is not a multiple of --hkv %lld", (long long)s->Hq, (long long)s->Hkv);
  if (s->n_seqlens_k && !s->n_seqlens_q) cli_usage_error("--seqlens-k needs --seqlens (the query lengths) too");
  if (s->n_seqlens_q && !s->n_seqlens_k) { /* same lengths for keys */
    s->n_seqlens_k = s->n_seqlens_q;
    memcpy(s->seqlens_k, s->seqlens_q, sizeof s->seqlens_q);
  }
  if (s->n_seqlens_q && s->n_seqlens_q != s->n_seqlens_k)
    cli_usage_error("--seqlens has %d values but --seqlens-k has %d", s->n_seqlens_q, s->n_seqlens_k);
  if (s->varlen && !s->n_seqlens_q) cli_usage_error("--varlen needs --seqlens (the length of each packed sequence)");
  if (s->n_seqlens_q) {
    if (s->varlen) { /* B is the number of sequences; L the longest */
      s->B = s->n_seqlens_q;
      int64_t mq = 1, mk = 1;
      for (int b = 0; b < s->n_seqlens_q; ++b) {
        if (s->seqlens_q[b] > mq) mq = s->seqlens_q[b];
        if (s->seqlens_k[b] > mk) mk = s->seqlens_k[b];
      }
      s->Lq = mq, s->Lk = mk;
    } else if (s->n_seqlens_q != s->B) {
      cli_usage_error("--seqlens has %d values for --b %lld sequences", s->n_seqlens_q, (long long)s->B);
    }
  }
}

int64_t cli_spec_lq(const cli_spec *s, int64_t b) {
  return s->n_seqlens_q ? s->seqlens_q[b] : s->Lq;
}
int64_t cli_spec_lk(const cli_spec *s, int64_t b) {
  return s->n_seqlens_k ? s->seqlens_k[b] : s->Lk;
}

int cli_spec_has_extras(const cli_spec *s) {
  return s->use_window || s->softcap > 0 || s->dropout_p > 0 || s->alibi || s->bias || s->mask_keep > 0 ||
         s->n_seqlens_q || s->varlen || s->Lq != s->Lk;
}

void cli_spec_help(FILE *f) {
  fputs(
      "problem:\n"
      "  --b N            batch size (sequences)\n"
      "  --hq N, --hkv N  query heads, key/value heads (Hq a multiple of Hkv: GQA/MQA)\n"
      "  --heads N        Hq = Hkv = N\n"
      "  --l N            Lq = Lk = N;  --lq N, --lk N  separately\n"
      "  --d N            head dim D (= Dv);  --dv N  value head dim\n"
      "  --dtype T        f32, f64, f16, bf16\n"
      "  --causal, --no-causal\n"
      "  --align tl|br    causal/window/ALiBi diagonal: top-left (PyTorch) or bottom-right (FA2, decode)\n"
      "  --window L,R     sliding window: keys diag-L .. diag+R visible (-1 = unbounded)\n"
      "  --scale X        score scale (default 1/sqrt(D))\n"
      "  --softcap X      s = X tanh(s / X)\n"
      "  --alibi          ALiBi slopes 2^(-8(h+1)/Hq)\n"
      "  --bias[=M]       random additive bias; M = full [B,Hq,Lq,Lk] (default), head [1,Hq,..],\n"
      "                   batch [B,1,..], shared [1,1,..]\n"
      "  --no-bias-grad   do not ask for dBias\n"
      "  --mask[=KEEP]    random boolean mask keeping a fraction KEEP (default 0.8)\n"
      "  --dropout P      dropout probability;  --dropout-seed S, --dropout-offset N\n"
      "  --seqlens a,b,.. per-sequence lengths (padding; with --varlen: packed layout)\n"
      "  --seqlens-k ..   key lengths when they differ from the query lengths\n"
      "  --varlen         packed variable-length layout (cu_seqlens) from --seqlens\n"
      "  --layout L       bhld (default) or blhd memory layout of q, k, v, o\n"
      "  --deterministic  deterministic backward\n"
      "  --block-q N, --block-k N  tile sizes of the tiled backends (0 = default)\n"
      "  --seed N         seed of the random inputs\n",
      f);
}

void cli_spec_describe(const cli_spec *s, char *buf, size_t n) {
  size_t u = 0;
#define ADD(...)                                                   \
  do {                                                             \
    if (u < n) u += (size_t)snprintf(buf + u, n - u, __VA_ARGS__); \
  } while (0)
  ADD("B=%lld Hq=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld Dv=%lld %s", (long long)s->B, (long long)s->Hq, (long long)s->Hkv,
      (long long)s->Lq, (long long)s->Lk, (long long)s->D, (long long)s->Dv, fa_dtype_name(s->dtype));
  if (s->causal) ADD(" causal");
  if (s->use_window) ADD(" window=%lld,%lld", (long long)s->window_left, (long long)s->window_right);
  if ((s->causal || s->use_window || s->alibi) && s->align == FA_ALIGN_BOTTOM_RIGHT) ADD(" bottom-right");
  if (s->scale > 0) ADD(" scale=%g", s->scale);
  if (s->softcap > 0) ADD(" softcap=%g", s->softcap);
  if (s->alibi) ADD(" alibi");
  if (s->bias) {
    static const char *names[] = {"", "full", "head", "batch", "shared"};
    ADD(" bias=%s%s", names[s->bias], s->bias_grad ? "" : "(no grad)");
  }
  if (s->mask_keep > 0) ADD(" mask(keep %.2g)", s->mask_keep);
  if (s->dropout_p > 0) ADD(" dropout=%g", s->dropout_p);
  if (s->n_seqlens_q) {
    ADD(" %s=", s->varlen ? "varlen" : "seqlens");
    for (int b = 0; b < s->n_seqlens_q; ++b) {
      ADD("%s%lld", b ? "," : "", (long long)s->seqlens_q[b]);
      if (s->seqlens_k[b] != s->seqlens_q[b]) ADD(":%lld", (long long)s->seqlens_k[b]);
    }
  }
  if (s->layout_blhd) ADD(" layout=blhd");
  if (s->deterministic) ADD(" deterministic");
  if (s->block_q || s->block_k) ADD(" tiles=%dx%d", s->block_q, s->block_k);
#undef ADD
}
