/* flashattn info: what this build and this machine offer. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "core/cpuinfo.h"
#include "peak.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static void help(void) {
  printf(
      "usage: flashattn info [--peak] [--threads N]\n"
      "\n"
      "Prints the version, the backends compiled into this build and whether each\n"
      "is usable here (and why not), the CPU (model, instruction sets, caches),\n"
      "how the cpu backend would tile D = 64 and D = 128, and the GPU backend.\n"
      "\n"
      "  --peak        also measure this machine (about 2 s): FP32 FMA FLOP/s per\n"
      "                instruction set on 1 thread and on all threads, and memory\n"
      "                bandwidth (STREAM copy and triad). bench and explain use the\n"
      "                same measurement to say how close to the peak a run gets.\n"
      "  --threads N   threads for 'all threads' (default: OpenMP's)\n");
}

static void print_backends(void) {
  printf("backends (compiled into this build, usable on this machine):\n");
  for (int b = FA_BACKEND_REF; b < FA_BACKEND_COUNT; ++b) {
    char why[512];
    const fa_status st = fa_backend_available((fa_backend)b, why, sizeof why);
    if (st == FA_OK)
      printf("  %-5s usable\n", fa_backend_name((fa_backend)b));
    else
      printf("  %-5s not usable: %s\n", fa_backend_name((fa_backend)b), why);
  }
}

static void print_cpu(void) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  char l1[32], l2[32], l3[32];
  printf("cpu: %s\n", ci->model[0] ? ci->model : "(model not reported)");
  printf("  logical CPUs      %d", ci->logical_cpus);
#ifdef _OPENMP
  printf(" (OpenMP uses %d threads)\n", omp_get_max_threads());
#else
  printf(" (built without OpenMP: one thread)\n");
#endif
  printf("  instruction sets  avx2+fma %s, avx512f %s, avx512_bf16 %s, amx_bf16 %s\n", ci->has_avx2_fma ? "yes" : "no",
         ci->has_avx512f ? "yes" : "no", ci->has_avx512bf16 ? "yes" : "no", ci->has_amx_bf16 ? "yes" : "no");
  printf("  cpu backend ISAs ");
  const fa_cpu_isa isas[] = {FA_ISA_GENERIC, FA_ISA_AVX2, FA_ISA_AVX512, FA_ISA_AVX512BF16, FA_ISA_AMX};
  for (int i = 0; i < 5; ++i)
    printf(" %s %s%s", fa_cpu_isa_name(isas[i]), fa_cpu_isa_supported(isas[i]) ? "yes" : "no", i < 4 ? "," : "");
  printf("\n");
  if (ci->has_amx_bf16 && !fa_cpu_isa_supported(FA_ISA_AMX))
    printf(
        "  amx               the CPU has it, but this build has no amx kernels or Linux did not grant\n"
        "                    the tile data (arch_prctl ARCH_REQ_XCOMP_PERM; Linux >= 5.16)\n");
  if (fa_cpu_isa_supported(FA_ISA_AVX512BF16))
    printf(
        "  bf16 products     avx512bf16: bf16 forward and backward products on vdpbf16ps (P, dS rounded\n"
        "                    to bf16 as on GPUs); f32 and f16 run the avx512 kernels\n");
  if (fa_cpu_isa_supported(FA_ISA_AMX))
    printf(
        "                    amx: the same products on AMX tiles (tdpbf16ps, 16 x 16 x 32 a instruction),\n"
        "                    the same rounding; the default on this CPU\n");
  printf("  caches            L1d %s, L2 %s per core; L3 %s\n", cli_fmt_bytes((double)ci->l1d_bytes, l1, sizeof l1),
         cli_fmt_bytes((double)ci->l2_bytes, l2, sizeof l2),
         ci->l3_bytes ? cli_fmt_bytes((double)ci->l3_bytes, l3, sizeof l3) : "unknown");
}

static void print_plan(void) {
  printf("cpu backend tile plan (fa_cpu_plan_get, default tiles):\n");
  const int64_t dims[] = {64, 128};
  /* bf16 on avx512bf16 or amx runs other kernels with other panels: its own line */
  const int bf16 = fa_cpu_isa_supported(FA_ISA_AVX512BF16);
  for (int k = 0; k < 2 * (1 + bf16); ++k) {
    const int i = k % 2;
    const fa_dtype dt = k < 2 ? FA_F32 : FA_BF16;
    fa_cpu_plan plan;
    const fa_status st = fa_cpu_plan_get_dtype(FA_ISA_AUTO, dt, dims[i], dims[i], 0, 0, &plan);
    if (st != FA_OK) {
      printf("  D=%-3lld no plan: %s\n", (long long)dims[i],
             st == FA_ERR_NO_BACKEND ? "the cpu backend is not in this build" : fa_status_name(st));
      continue;
    }
    char ws[32], l1[32], l2[32];
    const char *fits = plan.working_set_bytes <= plan.l1d_bytes  ? "fits L1d"
                       : plan.working_set_bytes <= plan.l2_bytes ? "fits L2"
                                                                 : "exceeds L2";
    printf("  D=%-3lld %-4s isa %s, block_q %d x block_k %d; one tile step keeps %s hot (L1d %s, L2 %s): %s\n",
           (long long)dims[i], fa_dtype_name(dt), fa_cpu_isa_name(plan.isa), plan.block_q, plan.block_k,
           cli_fmt_bytes((double)plan.working_set_bytes, ws, sizeof ws),
           cli_fmt_bytes((double)plan.l1d_bytes, l1, sizeof l1), cli_fmt_bytes((double)plan.l2_bytes, l2, sizeof l2),
           fits);
  }
}

static void print_gpu(void) {
  char why[512], dev[256];
  if (fa_backend_available(FA_BACKEND_CUDA, why, sizeof why) == FA_OK) {
    if (fa_cuda_device_describe(dev, sizeof dev) != FA_OK) snprintf(dev, sizeof dev, "a CUDA device is present");
    printf("gpu: %s (the cuda backend is usable)\n", dev);
  } else {
    printf("gpu: none usable: %s\n", why);
  }
}

int fa_cli_info(int argc, char **argv) {
  int peak = 0, threads = 0;
  cli_args a;
  cli_args_init(&a, argc, argv);
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help") || strcmp(a.argv[a.i], "-h") == 0) {
      help();
      return 0;
    } else if (cli_is(&a, "peak")) {
      cli_flag(&a);
      peak = 1;
    } else if (cli_is(&a, "threads")) {
      threads = (int)cli_parse_int("--threads", cli_value(&a), 1, 4096);
    } else {
      cli_unknown(&a);
    }
  }
  printf("flashattn %d.%d.%d\n", FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
  print_backends();
  print_cpu();
  print_plan();
  print_gpu();
  if (peak) {
    fa_peak p;
    memset(&p, 0, sizeof p);
    fflush(stdout);
    fa_peak_measure_flops(&p, threads, 1);
    fa_peak_measure_bandwidth(&p, threads, 0, 1);
    printf("measured peak (best of 3 runs each):\n");
    fa_peak_print(stdout, &p);
    const fa_cpu_isa best = fa_peak_best_isa();
    if (p.have_bw && p.triad_gbs > 0)
      printf("  roofline ridge    %.1f FLOP/byte (%s, all threads): below it a kernel is memory-bound\n",
             p.isa[best].gflops_all / p.triad_gbs, fa_cpu_isa_name(best));
  }
  return 0;
}
