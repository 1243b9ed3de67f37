/* flashattn explain: why tiling wins. The bytes eager attention moves
 * (S and P through memory) against the tiled version, the arithmetic
 * intensity of each, and where each lands on this machine's roofline. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "formulas.h"
#include "peak.h"

static void help(void) {
  printf(
      "usage: flashattn explain [--l L] [--d D] [--dtype T] [--heads H] [--batch B]\n"
      "                         [--block-q N] [--block-k N] [--causal]\n"
      "                         [--peak-gflops X] [--bandwidth-gbs Y] [--threads N]\n"
      "\n"
      "Counts the bytes one attention forward moves between memory and the compute\n"
      "units, eager (S = QK^T and P = softmax(S) written to memory and read back:\n"
      "2 L^2 elements each way per head) against tiled (FlashAttention: Q read once,\n"
      "K and V re-read once per Q tile, O and LSE written), their arithmetic\n"
      "intensity (FLOP per byte) and where each sits on a roofline: this machine's\n"
      "measured FP32 peak and bandwidth (about 2 s to measure), or the figures given.\n"
      "\n"
      "  --l L            sequence length (default 4096)\n"
      "  --d D, --dv D    head dims (default 64)\n"
      "  --dtype T        f16 (default), bf16, f32, f64\n"
      "  --heads H        heads (default 16);  --batch B (default 1)\n"
      "  --block-q N      Q rows per tile (default 128);  --block-k N (default 64)\n"
      "  --causal         causal: half the FLOPs, the tiled version skips key tiles\n"
      "  --peak-gflops X  compute peak to use instead of measuring\n"
      "  --bandwidth-gbs Y  memory bandwidth to use instead of measuring\n"
      "\n"
      "examples:\n"
      "  flashattn explain --l 8192 --heads 1\n"
      "  flashattn explain --l 4096 --heads 16 --peak-gflops 312000 --bandwidth-gbs 1555   (an A100)\n");
}

static const char *b(double bytes, char *buf) {
  return cli_fmt_bytes(bytes, buf, 32);
}

static void row(const char *what, double eager, double tiled, const char *note) {
  char x[32], y[32];
  printf("  %-22s %12s %12s%s%s\n", what, eager > 0 ? b(eager, x) : "-", tiled > 0 ? b(tiled, y) : "-",
         note ? "   " : "", note ? note : "");
}

static void place(const char *name, const fa_io_counts *c, double peak, double bw) {
  const double t_mem = c->total / (bw * 1e9), t_flop = c->flops / (peak * 1e9);
  const double attain = fa_roofline_gflops(c->intensity, peak, bw);
  printf(
      "  %-6s %7.1f FLOP/B -> at most %9.1f GFLOP/s (%5.1f%% of peak): %s-bound;"
      " time >= %.3g ms (memory %.3g ms, compute %.3g ms)\n",
      name, c->intensity, attain, 100.0 * attain / peak, t_mem > t_flop ? "memory" : "compute",
      1e3 * (t_mem > t_flop ? t_mem : t_flop), 1e3 * t_mem, 1e3 * t_flop);
}

int fa_cli_explain(int argc, char **argv) {
  fa_io_problem p;
  memset(&p, 0, sizeof p);
  p.B = 1, p.H = 16, p.L = 4096, p.D = p.Dv = 64, p.block_q = 128, p.block_k = 64;
  fa_dtype dt = FA_F16;
  double peak = 0, bw = 0;
  int threads = 0, dv_given = 0;
  cli_args a;
  cli_args_init(&a, argc, argv);
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help") || strcmp(a.argv[a.i], "-h") == 0) {
      help();
      return 0;
    } else if (cli_is(&a, "l")) {
      p.L = cli_parse_int("--l", cli_value(&a), 1, (int64_t)1 << 24);
    } else if (cli_is(&a, "d")) {
      p.D = cli_parse_int("--d", cli_value(&a), 1, 1 << 16);
      if (!dv_given) p.Dv = p.D;
    } else if (cli_is(&a, "dv")) {
      p.Dv = cli_parse_int("--dv", cli_value(&a), 1, 1 << 16);
      dv_given = 1;
    } else if (cli_is(&a, "dtype")) {
      dt = cli_parse_dtype("--dtype", cli_value(&a));
    } else if (cli_is(&a, "heads") || cli_is(&a, "h")) {
      p.H = cli_parse_int("--heads", cli_value(&a), 1, 1 << 20);
    } else if (cli_is(&a, "batch") || cli_is(&a, "b")) {
      p.B = cli_parse_int("--batch", cli_value(&a), 1, 1 << 20);
    } else if (cli_is(&a, "block-q")) {
      p.block_q = (int)cli_parse_int("--block-q", cli_value(&a), 1, 1 << 16);
    } else if (cli_is(&a, "block-k")) {
      p.block_k = (int)cli_parse_int("--block-k", cli_value(&a), 1, 1 << 16);
    } else if (cli_is(&a, "causal")) {
      cli_flag(&a);
      p.causal = 1;
    } else if (cli_is(&a, "peak-gflops")) {
      peak = cli_parse_double("--peak-gflops", cli_value(&a), 1e-6, 1e12);
    } else if (cli_is(&a, "bandwidth-gbs")) {
      bw = cli_parse_double("--bandwidth-gbs", cli_value(&a), 1e-6, 1e12);
    } else if (cli_is(&a, "threads")) {
      threads = (int)cli_parse_int("--threads", cli_value(&a), 1, 4096);
    } else {
      cli_unknown(&a);
    }
  }
  p.elem = fa_dtype_size(dt);
  char s1[32], s2[32], s3[32], s4[32];
  char dv[32] = "";
  if (p.Dv != p.D) snprintf(dv, sizeof dv, " Dv=%lld", (long long)p.Dv);
  printf("flashattn explain: L=%lld D=%lld%s %s heads=%lld batch=%lld%s, tiles block_q=%d x block_k=%d\n\n",
         (long long)p.L, (long long)p.D, dv, fa_dtype_name(dt), (long long)p.H, (long long)p.B,
         p.causal ? " causal" : "", p.block_q, p.block_k);
  printf("sizes (%s, %zu bytes per element)\n", fa_dtype_name(dt), p.elem);
  printf("  one L x L matrix (S or P of one head)  %s\n", b(fa_bytes_tensor(1, p.L, p.L, p.elem), s1));
  printf("  [H, L, L] probabilities P, all heads   %s   (x batch %lld)\n",
         b(fa_bytes_tensor(p.H, p.L, p.L, p.elem), s2), (long long)p.B);
  printf("  [H, L, Dv] output O                    %s\n", b(fa_bytes_tensor(p.H, p.L, p.Dv, p.elem), s3));
  printf("  Q, K, V together                       %s\n\n",
         b(fa_bytes_tensor(p.H, p.L, 2 * p.D + p.Dv, p.elem) * (double)p.B, s4));

  fa_io_counts e, t;
  fa_io_eager(&p, &e);
  fa_io_tiled(&p, &t);
  const int64_t qtiles = (p.L + p.block_q - 1) / p.block_q;
  char note[96];
  snprintf(note, sizeof note, "tiled: K, V read by each of %lld Q tiles%s", (long long)qtiles,
           p.causal ? " (up to the diagonal)" : "");
  printf("forward FLOPs (4*B*H*L^2*D%s): %.4g GFLOP\n\n", p.causal ? " / 2" : "", e.flops * 1e-9);
  printf("  %-22s %12s %12s\n", "bytes moved", "eager", "tiled");
  row("read Q, K, V", e.read_qkv, t.read_qkv, note);
  row("write S = scale QK^T", e.write_s, 0, "eager: full L x L even when causal");
  row("read S (softmax)", e.read_s, 0, NULL);
  row("write P", e.write_p, 0, NULL);
  row("read P (for P V)", e.read_p, 0, NULL);
  row("write O", e.write_o, t.write_o, NULL);
  row("write LSE (f32)", 0, t.write_lse, "kept for the backward");
  row("total", e.total, t.total, NULL);
  printf("  %-22s %12.3g %12.3g   FLOP per byte\n", "arithmetic intensity", e.intensity, t.intensity);
  printf(
      "  tiled moves %.1fx fewer bytes. (Its K/V re-reads often come from a cache rather than\n"
      "  memory, so its count is an upper bound; larger block_q means fewer re-reads.)\n\n",
      e.total / t.total);

  const int measured = peak == 0 || bw == 0;
  fa_cpu_isa isa = fa_peak_best_isa();
  if (measured) {
    fa_peak m;
    memset(&m, 0, sizeof m);
    fflush(stdout);
    if (peak == 0) {
      fa_peak_measure_flops(&m, threads, 1);
      peak = m.isa[isa].gflops_all;
    }
    if (bw == 0) {
      fa_peak_measure_bandwidth(&m, threads, 0, 1);
      bw = m.triad_gbs;
    }
    if (!(peak > 0) || !(bw > 0)) cli_fail("could not measure this machine; give --peak-gflops and --bandwidth-gbs");
  }
  printf("roofline: peak %.1f GFLOP/s%s, bandwidth %.1f GB/s%s; ridge at %.1f FLOP/byte\n", peak,
         measured ? " (measured FP32 FMA, all threads)" : "", bw, measured ? " (measured triad)" : "", peak / bw);
  place("eager", &e, peak, bw);
  place("tiled", &t, peak, bw);
  printf("  (an intensity below the ridge means the memory, not the arithmetic, sets the time)\n");
  return 0;
}
