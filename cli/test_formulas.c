/* The deterministic numbers of explain and bench, pinned to the figures of
 * the literature and to hand counts. Timings are never tested. */
#include <math.h>
#include <stdio.h>

#include "formulas.h"

static int passed, failed;

static void expect(const char *what, double got, double want) {
  const int ok = fabs(got - want) <= 1e-9 * fabs(want);
  printf("%s %s: got %.17g, want %.17g\n", ok ? "ok  " : "FAIL", what, got, want);
  ok ? ++passed : ++failed;
}

int main(void) {
  const double MiB = 1024.0 * 1024.0;

  /* FlashAttention paper / blog figures */
  expect("L=8192 f16: one L x L matrix is 128 MiB", fa_bytes_tensor(1, 8192, 8192, 2), 128 * MiB);
  expect("L=4096, 16 heads, f16: [H, L, L] is 512 MiB", fa_bytes_tensor(16, 4096, 4096, 2), 512 * MiB);
  expect("L=4096, 16 heads, f16: [H, L, 64] output is 8 MiB", fa_bytes_tensor(16, 4096, 64, 2), 8 * MiB);

  /* standard FLOP count: 4 B H Lq Lk D, halved when causal, backward 2.5x */
  expect("forward FLOPs B=2 H=8 L=1024 D=64", fa_flops_forward(2, 8, 1024, 1024, 64, 64, 0),
         4.0 * 2 * 8 * 1024 * 1024 * 64);
  expect("forward FLOPs causal = half", fa_flops_forward(2, 8, 1024, 1024, 64, 64, 1), 2.0 * 2 * 8 * 1024 * 1024 * 64);
  expect("forward FLOPs Lq != Lk, D != Dv", fa_flops_forward(1, 1, 100, 300, 64, 32, 0), 2.0 * 100 * 300 * (64 + 32));
  expect("backward FLOPs = 2.5 x forward", fa_flops_backward(1, 4, 512, 512, 128, 128, 0),
         2.5 * 4.0 * 4 * 512 * 512 * 128);

  /* eager: Q, K, V read, S and P written and read back (2 L^2 each way), O written */
  fa_io_problem p = {1, 16, 4096, 64, 64, 2, 128, 64, 0};
  fa_io_counts e, t;
  fa_io_eager(&p, &e);
  expect("eager: S and P traffic = 4 x [H, L, L]", e.write_s + e.read_s + e.write_p + e.read_p, 4 * 512 * MiB);
  expect("eager: read Q, K, V = 3 x [H, L, D]", e.read_qkv, 3 * 8 * MiB);
  expect("eager: total", e.total, 4 * 512 * MiB + 4 * 8 * MiB);
  expect("eager: intensity = FLOPs / bytes", e.intensity, 4.0 * 16 * 4096.0 * 4096 * 64 / e.total);

  /* tiled: Q once, K and V once per Q tile (4096 / 128 = 32 tiles), O and f32 LSE */
  fa_io_tiled(&p, &t);
  expect("tiled: read Q once + K, V 32 times", t.read_qkv, 8 * MiB + 32 * 2 * 8 * MiB);
  expect("tiled: write O", t.write_o, 8 * MiB);
  expect("tiled: write LSE (f32)", t.write_lse, 16 * 4096 * 4.0);
  expect("tiled: no S or P traffic", t.write_s + t.read_s + t.write_p + t.read_p, 0);

  /* causal tiled: Q tile q reads key rows up to its last row, rounded up to a key tile */
  fa_io_problem c = {1, 1, 256, 64, 64, 4, 128, 64, 1};
  fa_io_tiled(&c, &t);
  expect("tiled causal L=256 tiles 128x64: K/V rows 128 + 256", t.read_qkv, (256.0 * 64 + (128 + 256) * 128.0) * 4);

  /* roofline */
  expect("roofline: memory-bound below the ridge", fa_roofline_gflops(2.0, 100.0, 10.0), 20.0);
  expect("roofline: compute-bound above it", fa_roofline_gflops(50.0, 100.0, 10.0), 100.0);

  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
