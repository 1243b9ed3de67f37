/* flashattn bench --decode: one decode step (Lq new queries against a KV
 * cache of Lk tokens) through fa_forward_kvcache, reported as GB/s of K and
 * V read (B * Hkv * Lk * (D + Dv) * element size per call) next to this
 * machine's STREAM triad measured with the same threads. Caches are rotated
 * through so that no call starts with K/V warm in the caches. On a shared
 * machine both numbers move with the neighbours' load, so the triad is
 * measured again after each row and %triad is against the higher of the
 * two (the conservative choice); the row prints both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "core/cpuinfo.h"
#include "flashattn.h"
#include "peak.h"
#include "timer.h"

#define DECODE_MAX_COPIES 1024 /* a round holds at most its size plus one copy; this caps tiny caches' count */

static void help(void) {
  printf(
      "usage: flashattn bench --decode [options]\n"
      "\n"
      "  --backend NAME   cpu (default) or ref: the cache lives in host memory (the cuda\n"
      "                   backend's decode: bench/gpu/decode.py on the GPU machine)\n"
      "  --b N --hq N --hkv N --lq N --lk LIST --d N   (default B=1 Hq=32 Hkv=32 Lq=1\n"
      "                   Lk=8192,32768 D=128)\n"
      "  --dtype T        f32 (default), bf16, f16\n"
      "  --page N         paged cache with N-token pages (default: contiguous)\n"
      "  --splits N       num_splits (0 = auto)\n"
      "  --block-k N      keys per tile (0 = the backend's choice; for tuning)\n"
      "  --threads N      (default: OpenMP's); --reps N (default 20)\n"
      "  --plain          time fa_forward on the same K/V instead of the cache call\n"
      "  --warm           one copy of the cache, not a rotation: with a cache that fits in L2/L3\n"
      "                   this times the kernels, not the memory (their compute ceiling)\n");
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int fa_bench_decode(int argc, char **argv) {
  int64_t B = 1, Hq = 32, Hkv = 32, Lq = 1, D = 128, page = 0, lks[8] = {8192, 32768};
  int nlk = 2, splits = 0, block_k = 0, threads = 0, reps = 20, plain = 0, warm = 0;
  fa_dtype dt = FA_F32;
  fa_backend be = FA_BACKEND_CPU;
  cli_args a;
  cli_args_init(&a, argc, argv);
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help")) {
      help();
      return 0;
    } else if (cli_is(&a, "decode")) {
      cli_flag(&a);
    } else if (cli_is(&a, "plain")) {
      cli_flag(&a);
      plain = 1;
    } else if (cli_is(&a, "warm")) {
      cli_flag(&a);
      warm = 1;
    } else if (cli_is(&a, "backend")) {
      be = cli_parse_backend("--backend", cli_value(&a));
    } else if (cli_is(&a, "b")) {
      B = cli_parse_int("--b", cli_value(&a), 1, 1 << 20);
    } else if (cli_is(&a, "hq")) {
      Hq = cli_parse_int("--hq", cli_value(&a), 1, 4096);
    } else if (cli_is(&a, "hkv")) {
      Hkv = cli_parse_int("--hkv", cli_value(&a), 1, 4096);
    } else if (cli_is(&a, "lq")) {
      Lq = cli_parse_int("--lq", cli_value(&a), 1, 4096);
    } else if (cli_is(&a, "lk")) {
      nlk = cli_parse_ints("--lk", cli_value(&a), lks, 8, 1, (int64_t)1 << 30);
    } else if (cli_is(&a, "d")) {
      D = cli_parse_int("--d", cli_value(&a), 1, 1024);
    } else if (cli_is(&a, "dtype")) {
      dt = cli_parse_dtype("--dtype", cli_value(&a));
    } else if (cli_is(&a, "page")) {
      page = cli_parse_int("--page", cli_value(&a), 1, 1 << 20);
    } else if (cli_is(&a, "splits")) {
      splits = (int)cli_parse_int("--splits", cli_value(&a), 0, 4096);
    } else if (cli_is(&a, "block-k")) {
      block_k = (int)cli_parse_int("--block-k", cli_value(&a), 0, 1 << 16);
    } else if (cli_is(&a, "threads")) {
      threads = (int)cli_parse_int("--threads", cli_value(&a), 0, 4096);
    } else if (cli_is(&a, "reps")) {
      reps = (int)cli_parse_int("--reps", cli_value(&a), 3, 100000);
    } else {
      cli_unknown(&a);
    }
  }
  if (Hq % Hkv) cli_usage_error("--hq %lld is not a multiple of --hkv %lld", (long long)Hq, (long long)Hkv);
  static fa_peak peak;
  memset(&peak, 0, sizeof peak);
  fa_peak_measure_bandwidth(&peak, threads, 0, 0);
  printf("decode: %s %s, B=%lld Hq=%lld Hkv=%lld Lq=%lld D=%lld%s%s, threads %s; STREAM triad %.1f GB/s\n",
         fa_backend_name(be), fa_dtype_name(dt), (long long)B, (long long)Hq, (long long)Hkv, (long long)Lq,
         (long long)D,
         plain  ? ", fa_forward"
         : page ? ", paged"
                : ", contiguous cache",
         warm ? ", warm (one copy)" : "", threads ? "set" : "default", peak.triad_gbs);
  printf("%8s %10s %10s %10s %8s %14s\n", "Lk", "median ms", "min ms", "K/V GB/s", "%triad", "triad GB/s");
  fa_context *ctx;
  if (fa_context_create(&ctx) != FA_OK) cli_fail("cannot create a context");
  fa_context_set_threads(ctx, threads);
  const size_t es = fa_dtype_size(dt);
  for (int li = 0; li < nlk; ++li) {
    const int64_t Lk = lks[li];
    const int64_t psz = page ? page : Lk, blocks = (Lk + psz - 1) / psz, pages = page ? B * blocks : B;
    const size_t kv_elems = (size_t)(pages * Hkv * psz * D);
    /* Enough copies of the cache that one round is twice the last-level
     * cache (256 MiB at least): a call then finds none of its K/V there. A
     * fixed 256 MiB round fell short on a 2-vCPU Xeon guest with 480 MiB of
     * L3, where bf16 GQA 32/8 at 32768 keys (one 134 MB copy) read at 126%
     * of the triad, from the L3. */
    const size_t bytes = 2 * kv_elems * es, l3 = fa__cpuinfo_get()->l3_bytes;
    const size_t round = 2 * l3 > ((size_t)256 << 20) ? 2 * l3 : ((size_t)256 << 20);
    size_t want = (round + bytes - 1) / bytes;
    if (want > DECODE_MAX_COPIES) want = DECODE_MAX_COPIES;
    const int ncopy = warm ? 1 : (int)want;
    char **kc = malloc((size_t)ncopy * sizeof *kc), **vc = malloc((size_t)ncopy * sizeof *vc);
    for (int c = 0; c < ncopy; ++c) {
      kc[c] = malloc(kv_elems * es);
      vc[c] = malloc(kv_elems * es);
      if (!kc[c] || !vc[c]) cli_fail("cannot allocate %zu bytes of cache", 2 * kv_elems * es);
      memset(kc[c], 0x3c, kv_elems * es); /* small finite numbers in every dtype */
      memset(vc[c], 0x3c, kv_elems * es);
    }
    const size_t nq = (size_t)(B * Hq * Lq * D);
    char *q = calloc(nq, es), *o = calloc(nq, es);
    float *lse = calloc((size_t)(B * Hq * Lq), sizeof(float));
    int32_t *seqlens = malloc((size_t)B * sizeof(int32_t)), *bt = malloc((size_t)(B * blocks) * sizeof(int32_t));
    for (int64_t b = 0; b < B; ++b) seqlens[b] = (int32_t)Lk;
    for (int64_t e = 0; e < B * blocks; ++e) bt[e] = (int32_t)e;
    fa_tensor tq = fa_tensor_contiguous(q, dt, B, Hq, Lq, D), to = fa_tensor_contiguous(o, dt, B, Hq, Lq, D);
    fa_tensor tl = fa_tensor_contiguous(lse, FA_F32, B, Hq, Lq, 1);
    fa_options opt;
    fa_options_init(&opt);
    opt.causal = 1;
    opt.align = FA_ALIGN_BOTTOM_RIGHT;
    opt.block_k = block_k;
    double *t = malloc((size_t)(reps + 1) * sizeof(double));
    for (int r = -1; r < reps; ++r) {
      const int c = (r + 1) % ncopy;
      fa_status st;
      const double t0 = fa_bench_now();
      if (plain) {
        fa_tensor tk = fa_tensor_contiguous(kc[c], dt, B, Hkv, Lk, D),
                  tv = fa_tensor_contiguous(vc[c], dt, B, Hkv, Lk, D);
        st = fa_forward(ctx, be, &tq, &tk, &tv, &opt, &to, &tl);
      } else {
        fa_kvcache kv;
        memset(&kv, 0, sizeof kv);
        if (page) { /* vLLM's memory layout [pages, page, Hkv, D] */
          const int64_t sh[4] = {pages, Hkv, psz, D}, sd[4] = {psz * Hkv * D, D, Hkv * D, 1};
          kv.k_cache = fa_tensor_contiguous(kc[c], dt, 1, 1, 1, 1);
          kv.v_cache = fa_tensor_contiguous(vc[c], dt, 1, 1, 1, 1);
          memcpy(kv.k_cache.shape, sh, sizeof sh);
          memcpy(kv.k_cache.stride, sd, sizeof sd);
          memcpy(kv.v_cache.shape, sh, sizeof sh);
          memcpy(kv.v_cache.stride, sd, sizeof sd);
          kv.block_table = bt;
          kv.max_blocks = blocks;
        } else {
          kv.k_cache = fa_tensor_contiguous(kc[c], dt, B, Hkv, Lk, D);
          kv.v_cache = fa_tensor_contiguous(vc[c], dt, B, Hkv, Lk, D);
        }
        kv.cache_seqlens = seqlens;
        kv.num_splits = splits;
        st = fa_forward_kvcache(ctx, be, &tq, &kv, &opt, &to, &tl);
      }
      const double dtm = fa_bench_now() - t0;
      if (st != FA_OK) cli_fail("%s", fa_context_last_error(ctx));
      if (r >= 0) t[r] = dtm;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    const double med = t[reps / 2], gbs = (double)(B * Hkv * Lk * 2 * D) * (double)es / med * 1e-9;
    const double before = peak.triad_gbs;
    fa_peak_measure_bandwidth(&peak, threads, 0, 0);
    const double triad = before > peak.triad_gbs ? before : peak.triad_gbs;
    printf("%8lld %10.4f %10.4f %10.2f %7.1f%% %6.1f/%-6.1f\n", (long long)Lk, med * 1e3, t[0] * 1e3, gbs,
           triad > 0 ? 100 * gbs / triad : NAN, before, peak.triad_gbs);
    free(t);
    for (int c = 0; c < ncopy; ++c) {
      free(kc[c]);
      free(vc[c]);
    }
    free(kc);
    free(vc);
    free(q);
    free(o);
    free(lse);
    free(seqlens);
    free(bt);
  }
  fa_context_destroy(ctx);
  return 0;
}
