/* The peak measurement runs the thread counts it reports: `flashattn info
 * --peak` once printed the 1-thread FMA rate for 2 threads on a 2-core
 * Xeon (the 2-thread run had lost a core to another process and the
 * "all threads >= one" floor hid it), so `bench` showed 125% of peak. No
 * timing is asserted, not even a ratio of two rates (the machine may be
 * busy in one run and not the other): that the all-threads run had its
 * threads, that each thread's on-CPU share is a share, and that the rates
 * are positive. */
#include <stdio.h>

#include "peak.h"

int main(void) {
  int fails = 0;
  for (int threads = 1; threads <= 2; ++threads) {
    fa_peak p;
    fa_peak_measure_flops(&p, threads, 0);
    if (p.threads != threads) {
      fprintf(stderr, "FAIL: asked for %d threads, the measurement says %d\n", threads, p.threads);
      ++fails;
    }
    for (int isa = FA_ISA_GENERIC; isa <= FA_ISA_AMX; ++isa) {
      const fa_peak_isa *r = &p.isa[isa];
      if (!r->measured) continue;
      const char *name = fa_cpu_isa_name((fa_cpu_isa)isa);
#ifdef _OPENMP
      const int want = threads;
#else
      const int want = 1;
#endif
      if (r->threads_ran != want) {
        fprintf(stderr, "FAIL: %s: the %d-thread measurement ran %d threads\n", name, threads, r->threads_ran);
        ++fails;
      }
      if (!(r->gflops_1t > 0) || !(r->gflops_all > 0)) {
        fprintf(stderr, "FAIL: %s: %.1f GFLOP/s on 1 thread, %.1f on %d\n", name, r->gflops_1t, r->gflops_all, threads);
        ++fails;
      }
      if (!(r->on_cpu > 0 && r->on_cpu <= 1.05 && r->on_cpu_1t > 0 && r->on_cpu_1t <= 1.05)) {
        fprintf(stderr, "FAIL: %s: on-CPU shares %.3f (1 thread), %.3f\n", name, r->on_cpu_1t, r->on_cpu);
        ++fails;
      }
      printf("%-11s threads %d (ran %d): %8.1f / %8.1f GFLOP/s, on CPU %.2f / %.2f\n", name, threads, r->threads_ran,
             r->gflops_1t, r->gflops_all, r->on_cpu_1t, r->on_cpu);
    }
  }
  if (fails) return 1;
  printf("peak measurement: ok\n");
  return 0;
}
