/* The peak table, as `info --peak`, bench and explain print it. */
#include <stdio.h>

#include "peak.h"

void fa_peak_print(FILE *f, const fa_peak *p) {
  if (p->have_flops) {
    fprintf(f, "  FP32 FMA peak     1 thread      %d threads\n", p->threads);
    const fa_cpu_isa isas[] = {FA_ISA_AVX512, FA_ISA_AVX2, FA_ISA_GENERIC};
    for (int i = 0; i < 3; ++i) {
      const fa_peak_isa *r = &p->isa[isas[i]];
      if (!r->measured) {
        fprintf(f, "  %-12s      (not on this CPU or build)\n", fa_cpu_isa_name(isas[i]));
        continue;
      }
      fprintf(f, "  %-12s %9.1f GFLOP/s %9.1f GFLOP/s\n", fa_cpu_isa_name(isas[i]), r->gflops_1t, r->gflops_all);
      if (r->threads_ran != p->threads)
        fprintf(f, "               (the %d-thread run got %d threads from OpenMP)\n", p->threads, r->threads_ran);
      if (r->on_cpu < 0.9 || r->on_cpu_1t < 0.9)
        fprintf(f,
                "               (other work held the cores: a thread ran %.0f%% of the time; the figure counts each\n"
                "               thread's CPU time instead of the wall time)\n",
                100.0 * (r->on_cpu < r->on_cpu_1t ? r->on_cpu : r->on_cpu_1t));
    }
    fprintf(f, "  bf16 peak (vdpbf16ps 64, tdpbf16ps 16384 FLOP per instruction)\n");
    const fa_cpu_isa bf[] = {FA_ISA_AVX512BF16, FA_ISA_AMX};
    for (int i = 0; i < 2; ++i) {
      const fa_peak_isa *r = &p->isa[bf[i]];
      if (r->measured)
        fprintf(f, "  %-12s %9.1f GFLOP/s %9.1f GFLOP/s   (bf16 products; f32 work on it: the avx512 row)\n",
                fa_cpu_isa_name(bf[i]), r->gflops_1t, r->gflops_all);
      else
        fprintf(f, "  %-12s      (not on this CPU or build)\n", fa_cpu_isa_name(bf[i]));
    }
  }
  if (p->have_bw)
    fprintf(f, "  memory bandwidth  copy %.1f GB/s, triad %.1f GB/s (%d threads); triad %.1f GB/s (1 thread)\n",
            p->copy_gbs, p->triad_gbs, p->threads, p->triad_gbs_1t);
}
