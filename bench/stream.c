/* Memory bandwidth as STREAM measures it: copy (c = a, 16 bytes per
 * element of double) and triad (a = b + s*c, 24 bytes), arrays several
 * times the last-level cache so that every byte comes from DRAM. Bytes are
 * counted as STREAM does (write-allocate traffic not included). */
#include <stdio.h>
#include <stdlib.h>

#include "core/cpuinfo.h"
#include "peak.h"
#include "timer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static double best_of(double *a, double *b, double *c, int64_t n, int triad, int threads, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = fa_bench_now();
    if (triad) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    } else {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) c[i] = a[i];
    }
    const double t = fa_bench_now() - t0;
    if (t < best) best = t;
  }
  return best;
}

void fa_peak_measure_bandwidth(fa_peak *p, int threads, size_t array_bytes, int progress) {
#ifdef _OPENMP
  const int nt = threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
  const int nt = 1;
#endif
  if (array_bytes == 0) {
    const size_t l3 = fa__cpuinfo_get()->l3_bytes;
    array_bytes = 4 * l3 > ((size_t)64 << 20) ? 4 * l3 : ((size_t)64 << 20);
  }
  const int64_t n = (int64_t)(array_bytes / sizeof(double));
  double *a = malloc((size_t)n * sizeof(double)), *b = malloc((size_t)n * sizeof(double)),
         *c = malloc((size_t)n * sizeof(double));
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    p->have_bw = 0;
    return;
  }
  if (progress) fprintf(stderr, "peak: memory bandwidth (3 arrays of %zu MiB)...\n", array_bytes >> 20);
    /* first touch by the threads that will stream them (NUMA placement) */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) a[i] = 1.0, b[i] = 2.0, c[i] = 0.5;
  const double gb = 1e-9 * (double)n * sizeof(double);
  p->copy_gbs = 2 * gb / best_of(a, b, c, n, 0, nt, 5);
  p->triad_gbs = 3 * gb / best_of(a, b, c, n, 1, nt, 5);
  p->triad_gbs_1t = nt == 1 ? p->triad_gbs : 3 * gb / best_of(a, b, c, n, 1, 1, 3);
  volatile double sink = a[n / 2] + c[n / 3]; /* keeps the stores alive */
  (void)sink;
  free(a), free(b), free(c);
  p->have_bw = 1;
}
