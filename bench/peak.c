/* FP32 FLOP/s per ISA, one thread and all threads: each thread runs the
 * ISA's micro-kernel, the best of three timed runs counts. */
#include "peak.h"

#include <stdio.h>
#include <string.h>

#include "core/cpuinfo.h"
#include "timer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef double (*kernel_fn)(int64_t iters);

static kernel_fn kernel_for(fa_cpu_isa isa) {
  switch (isa) {
    case FA_ISA_GENERIC: return fa_peak_kernel_generic;
#ifdef FA_PEAK_HAVE_AVX2
    case FA_ISA_AVX2: return fa_peak_kernel_avx2;
#endif
#ifdef FA_PEAK_HAVE_AVX512
    case FA_ISA_AVX512: return fa_peak_kernel_avx512;
#endif
#ifdef FA_PEAK_HAVE_AVX512BF16
    case FA_ISA_AVX512BF16: return fa_peak_kernel_avx512bf16;
#endif
#ifdef FA_PEAK_HAVE_AMX
    case FA_ISA_AMX: return fa_peak_kernel_amx;
#endif
    default: return NULL;
  }
}

int fa_peak_isa_present(fa_cpu_isa isa) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  if (!kernel_for(isa)) return 0;
  if (isa == FA_ISA_AVX2) return ci->has_avx2_fma;
  if (isa == FA_ISA_AVX512) return ci->has_avx512f;
  if (isa == FA_ISA_AVX512BF16) return ci->has_avx512bf16;
#ifdef FA_PEAK_HAVE_AMX
  if (isa == FA_ISA_AMX) return ci->has_amx_bf16 && fa_peak_amx_permit();
#endif
  return isa == FA_ISA_GENERIC;
}

fa_cpu_isa fa_peak_best_isa(void) {
  if (fa_peak_isa_present(FA_ISA_AVX512)) return FA_ISA_AVX512;
  if (fa_peak_isa_present(FA_ISA_AVX2)) return FA_ISA_AVX2;
  return FA_ISA_GENERIC;
}

static int all_threads(int threads) {
#ifdef _OPENMP
  return threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

/* One timed run: `threads` threads each run iters rounds. */
typedef struct run {
  double wall;                     /* seconds, from before the threads start to after they all end */
  double cpu[FA_PEAK_MAX_THREADS]; /* each thread's own CPU seconds in its kernel call */
  int ran;                         /* threads that ran the kernel (omp_get_num_threads) */
} run;

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void one_thread(kernel_fn k, int64_t iters, run *r, int t) {
  const double c0 = thread_cpu_now();
  k(iters);
  if (t < FA_PEAK_MAX_THREADS) r->cpu[t] = thread_cpu_now() - c0;
}

static run timed(kernel_fn k, int64_t iters, int threads) {
  run r;
  memset(&r, 0, sizeof r);
  r.ran = 1;
  const double t0 = fa_bench_now();
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      if (t == 0) r.ran = omp_get_num_threads();
      one_thread(k, iters, &r, t);
    }
  } else {
    one_thread(k, iters, &r, 0);
  }
#else
  (void)threads;
  one_thread(k, iters, &r, 0);
#endif
  r.wall = fa_bench_now() - t0;
  return r;
}

/* The least share of the wall time a thread of r spent on a CPU: about 1
 * when every thread had a core of its own throughout, 1/2 when another
 * process (or a sibling thread) held one of the cores half the time. */
static double on_cpu(const run *r) {
  const int n = r->ran < FA_PEAK_MAX_THREADS ? r->ran : FA_PEAK_MAX_THREADS;
  double least = 1.0;
  for (int t = 0; t < n; ++t) {
    const double s = r->wall > 0 ? r->cpu[t] / r->wall : 0;
    if (s < least) least = s;
  }
  return least;
}

void fa_peak_measure_flops(fa_peak *p, int threads, int progress) {
  p->threads = all_threads(threads);
  const fa_cpu_isa isas[] = {FA_ISA_GENERIC, FA_ISA_AVX2, FA_ISA_AVX512, FA_ISA_AVX512BF16, FA_ISA_AMX};
  for (int i = 0; i < 5; ++i) {
    fa_peak_isa *r = &p->isa[isas[i]];
    memset(r, 0, sizeof *r);
    if (!fa_peak_isa_present(isas[i])) continue;
    const kernel_fn k = kernel_for(isas[i]);
    const double work_per_iter = k(1); /* flops of one round (one thread) */
    for (int pass = 0; pass < 2; ++pass) {
      const int nt = pass == 0 ? 1 : p->threads;
      if (pass == 1 && nt == 1) {
        r->gflops_all = r->gflops_1t;
        r->threads_ran = 1;
        r->on_cpu = r->on_cpu_1t;
        break;
      }
      if (progress)
        fprintf(stderr, "peak: %s %s, %d thread%s...\n", fa_cpu_isa_name(isas[i]),
                isas[i] == FA_ISA_AVX512BF16 ? "vdpbf16ps"
                : isas[i] == FA_ISA_AMX      ? "tdpbf16ps"
                                             : "FMA",
                nt, nt > 1 ? "s" : "");
      int64_t iters = 1 << 14;
      run t = timed(k, iters, nt);
      while (t.wall < 0.02) {
        iters *= 2;
        t = timed(k, iters, nt);
      }
      iters = (int64_t)((double)iters * 0.1 / t.wall) + 1;
      /* The best of 3 runs; while the best one had a thread off its CPU
       * for over a tenth of the time (other processes on a shared
       * machine: with 2 threads on 2 cores, one core taken by a compiler
       * gives the 2-thread run the 1-thread rate), up to 12 more. */
      run best;
      best.wall = 1e30;
      best.ran = 0;
      for (int rep = 0; rep < 15; ++rep) {
        const run s = timed(k, iters, nt);
        if (s.wall < best.wall) best = s;
        if (rep >= 2 && on_cpu(&best) >= 0.9) break;
      }
      double gf = (double)nt * work_per_iter * (double)iters / best.wall * 1e-9;
      const double share = on_cpu(&best);
      if (share < 0.9) {
        /* still not every thread on a core of its own: count each
         * thread's rounds over its own CPU time instead (the rate while it
         * ran, which is what the hardware does when nothing else runs) */
        double sum = 0;
        const int n = best.ran < FA_PEAK_MAX_THREADS ? best.ran : FA_PEAK_MAX_THREADS;
        for (int x = 0; x < n; ++x)
          if (best.cpu[x] > 0) sum += work_per_iter * (double)iters / best.cpu[x] * 1e-9;
        if (sum > gf) gf = sum;
      }
      if (pass == 0) {
        r->gflops_1t = gf;
        r->on_cpu_1t = share;
      } else {
        r->gflops_all = gf;
        r->threads_ran = best.ran;
        r->on_cpu = share;
      }
    }
    /* all threads can do at least what one does: a lower figure is noise */
    if (r->gflops_all < r->gflops_1t) r->gflops_all = r->gflops_1t;
    r->measured = 1;
  }
  p->have_flops = 1;
}

double fa_peak_gflops_for(const fa_peak *p, fa_cpu_isa isa, int threads) {
  if (!p->have_flops || isa <= FA_ISA_AUTO || isa > FA_ISA_AMX || !p->isa[isa].measured) return 0;
  const fa_peak_isa *r = &p->isa[isa];
  if (threads <= 0 || threads >= p->threads) return r->gflops_all;
  if (threads == 1) return r->gflops_1t;
  const double scaled = r->gflops_1t * threads;
  return scaled < r->gflops_all ? scaled : r->gflops_all;
}

double fa_peak_gflops_for_dtype(const fa_peak *p, fa_cpu_isa isa, int bf16_products, int threads) {
  if ((isa == FA_ISA_AVX512BF16 || isa == FA_ISA_AMX) && !bf16_products) isa = FA_ISA_AVX512;
  return fa_peak_gflops_for(p, isa, threads);
}
