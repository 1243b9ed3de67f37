#include "cpu_isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpuinfo.h"

int fa__cpu_isa_have(fa_cpu_isa isa) {
  switch (isa) {
    case FA_ISA_AUTO:
    case FA_ISA_GENERIC: return 1;
#ifdef FA_CPU_X86
    case FA_ISA_AVX2: return fa__cpuinfo_get()->has_avx2_fma;
    case FA_ISA_AVX512: return fa__cpuinfo_get()->has_avx512f;
#ifdef FA_CPU_AVX512BF16
    case FA_ISA_AVX512BF16: return fa__cpuinfo_get()->has_avx512bf16;
#endif
#ifdef FA_CPU_AMX
#ifdef FA_AMX_EMULATE /* development builds: the tile instructions emulated (kernels_amx.c) */
    case FA_ISA_AMX: return fa__cpuinfo_get()->has_avx512bf16 && fa__cpu_amx_usable();
#else
    case FA_ISA_AMX: return fa__cpuinfo_get()->has_amx_bf16 && fa__cpu_amx_usable();
#endif
#endif
#endif
    default: return 0;
  }
}

/* avx512bf16 runs f32 problems with the avx512 kernels (it only adds the
 * bf16 products), so it is the best wherever its bf16 products are faster
 * than f32's FMAs: measured once (fa__cpu_bf16_rate_ratio). On the H200
 * host's Xeon they are not (ratio ~1), and the bf16 forward ran 1.5x slower
 * there on them than converting to f32 (bench/results/2026-11-30-cpu-bf16.txt). */
#ifdef FA_CPU_AVX512BF16
static int g_bf16_pays;
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;
static void bf16_probe(void) {
  g_bf16_pays = fa__cpu_bf16_rate_ratio() >= 1.3;
}
#endif

/* amx: tdpbf16ps does 16 x 16 x 32 multiply-adds, ~16x vdpbf16ps's per
 * cycle on Sapphire Rapids; where the CPU has it, it is the best. (The
 * emulated development build never picks it on its own.) */
static fa_cpu_isa best_isa(void) {
#if defined(FA_CPU_AMX) && !defined(FA_AMX_EMULATE)
  if (fa__cpu_isa_have(FA_ISA_AMX)) return FA_ISA_AMX;
#endif
#ifdef FA_CPU_AVX512BF16
  if (fa__cpu_isa_have(FA_ISA_AVX512BF16)) {
    pthread_once(&g_bf16_once, bf16_probe);
    if (g_bf16_pays) return FA_ISA_AVX512BF16;
  }
#endif
  if (fa__cpu_isa_have(FA_ISA_AVX512)) return FA_ISA_AVX512;
  if (fa__cpu_isa_have(FA_ISA_AVX2)) return FA_ISA_AVX2;
  return FA_ISA_GENERIC;
}

static const char *lacks(fa_cpu_isa isa) {
#ifdef FA_CPU_X86
#ifndef FA_CPU_AVX512BF16
  if (isa == FA_ISA_AVX512BF16) return "this build has no avx512bf16 kernels (its compiler lacks -mavx512bf16)";
#endif
#ifndef FA_CPU_AMX
  if (isa == FA_ISA_AMX) return "this build has no amx kernels (its compiler lacks -mamx-tile -mamx-bf16)";
#else
  if (isa == FA_ISA_AMX && fa__cpuinfo_get()->has_amx_bf16)
    return "Linux did not grant this process the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM failed; "
           "Linux >= 5.16 is needed)";
  if (isa == FA_ISA_AMX) return "this CPU lacks it (AMX-BF16 and AMX-TILE with the OS's tile state)";
#endif
  (void)isa;
  return "this CPU lacks it";
#else
  return isa == FA_ISA_GENERIC ? "" : "this build has no x86 kernels";
#endif
}

fa_status fa__cpu_isa_resolve(fa_cpu_isa requested, fa_cpu_isa *out, char *why, size_t why_size) {
  fa_cpu_isa isa = requested;
  if (isa == FA_ISA_AUTO) {
    const char *env = getenv("FLASHATTN_ISA");
    if (env && *env) {
      if (strcmp(env, "generic") == 0) {
        isa = FA_ISA_GENERIC;
      } else if (strcmp(env, "avx2") == 0) {
        isa = FA_ISA_AVX2;
      } else if (strcmp(env, "avx512") == 0) {
        isa = FA_ISA_AVX512;
      } else if (strcmp(env, "avx512bf16") == 0) {
        isa = FA_ISA_AVX512BF16;
      } else if (strcmp(env, "amx") == 0) {
        isa = FA_ISA_AMX;
      } else if (strcmp(env, "auto") == 0) {
        isa = best_isa();
      } else {
        if (why)
          snprintf(why, why_size, "FLASHATTN_ISA=%s is not one of generic, avx2, avx512, avx512bf16, amx, auto", env);
        return FA_ERR_UNSUPPORTED;
      }
      if (!fa__cpu_isa_have(isa)) {
        if (why)
          snprintf(why, why_size, "FLASHATTN_ISA=%s asks for ISA %s, but %s", env, fa_cpu_isa_name(isa), lacks(isa));
        return FA_ERR_UNSUPPORTED;
      }
    } else {
      isa = best_isa();
    }
  } else if (isa < FA_ISA_GENERIC || isa > FA_ISA_AMX) {
    if (why) snprintf(why, why_size, "isa %d is not an fa_cpu_isa value", (int)isa);
    return FA_ERR_UNSUPPORTED;
  } else if (!fa__cpu_isa_have(isa)) {
    if (why) snprintf(why, why_size, "ISA %s was asked for, but %s", fa_cpu_isa_name(isa), lacks(isa));
    return FA_ERR_UNSUPPORTED;
  }
  *out = isa;
  return FA_OK;
}

/* One table per ISA: generic first, each ISA overriding the one below. */
static fa__cpu_kernels g_tables[FA_ISA_AMX + 1];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
  fa__cpu_kernels_generic(&g_tables[FA_ISA_GENERIC]);
  g_tables[FA_ISA_AVX2] = g_tables[FA_ISA_GENERIC];
  g_tables[FA_ISA_AVX512] = g_tables[FA_ISA_GENERIC];
  g_tables[FA_ISA_AVX512BF16] = g_tables[FA_ISA_GENERIC];
  g_tables[FA_ISA_AMX] = g_tables[FA_ISA_GENERIC];
#ifdef FA_CPU_X86
  if (fa__cpu_isa_have(FA_ISA_AVX2)) {
    fa__cpu_kernels_avx2(&g_tables[FA_ISA_AVX2]);
    g_tables[FA_ISA_AVX512] = g_tables[FA_ISA_AVX2];
  }
  if (fa__cpu_isa_have(FA_ISA_AVX512)) {
    fa__cpu_kernels_avx512(&g_tables[FA_ISA_AVX512]);
    g_tables[FA_ISA_AVX512BF16] = g_tables[FA_ISA_AVX512];
  }
#ifdef FA_CPU_AVX512BF16
  if (fa__cpu_isa_have(FA_ISA_AVX512BF16)) {
    fa__cpu_kernels_avx512bf16(&g_tables[FA_ISA_AVX512BF16]);
    g_tables[FA_ISA_AMX] = g_tables[FA_ISA_AVX512BF16];
  }
#endif
#ifdef FA_CPU_AMX
  if (fa__cpu_isa_have(FA_ISA_AMX)) fa__cpu_kernels_amx(&g_tables[FA_ISA_AMX]);
#endif
#endif
}

const fa__cpu_kernels *fa__cpu_kernels_get(fa_cpu_isa isa) {
  pthread_once(&g_once, build_tables);
  if (isa < FA_ISA_GENERIC || isa > FA_ISA_AMX) isa = FA_ISA_GENERIC;
  return &g_tables[isa];
}

int fa_cpu_isa_supported(fa_cpu_isa isa) {
  if (isa < FA_ISA_AUTO || isa > FA_ISA_AMX) return 0;
  return fa__cpu_isa_have(isa);
}
