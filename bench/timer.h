/* Wall-clock time for benchmarks: a monotonic clock, in seconds. */
#ifndef FA_BENCH_TIMER_H
#define FA_BENCH_TIMER_H

#include <time.h>

static inline double fa_bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
