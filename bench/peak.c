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

/* Seconds for `threads` threads to each run iters rounds. */
static double timed(kernel_fn k, int64_t iters, int threads) {
  const double t0 = fa_bench_now();
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    k(iters);
  } else {
    k(iters);
  }
#else
  (void)threads;
  k(iters);
#endif
  return fa_bench_now() - t0;
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
        break;
      }
      if (progress)
        fprintf(stderr, "peak: %s %s, %d thread%s...\n", fa_cpu_isa_name(isas[i]),
                isas[i] == FA_ISA_AVX512BF16 ? "vdpbf16ps"
                : isas[i] == FA_ISA_AMX      ? "tdpbf16ps"
                                             : "FMA",
                nt, nt > 1 ? "s" : "");
      int64_t iters = 1 << 14;
      double t = timed(k, iters, nt);
      while (t < 0.02) {
        iters *= 2;
        t = timed(k, iters, nt);
      }
      iters = (int64_t)((double)iters * 0.1 / t) + 1;
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const double s = timed(k, iters, nt);
        if (s < best) best = s;
      }
      const double gf = (double)nt * work_per_iter * (double)iters / best * 1e-9;
      if (pass == 0)
        r->gflops_1t = gf;
      else
        r->gflops_all = gf;
    }
    /* all threads can do at least what one does: a lower figure is noise
     * from other work on the machine */
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
