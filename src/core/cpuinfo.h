/* What this CPU is: instruction sets and cache sizes, probed once. */
#ifndef FA_CORE_CPUINFO_H
#define FA_CORE_CPUINFO_H

#include <stddef.h>

typedef struct fa__cpuinfo {
  int has_avx2_fma;   /* AVX2 and FMA, and the OS saves YMM state */
  int has_avx512f;    /* AVX-512F, and the OS saves ZMM state */
  int has_avx512bf16; /* AVX512-BF16 (vdpbf16ps) and AVX512-BW, with has_avx512f */
  int has_amx_bf16;   /* AMX-TILE and AMX-BF16, the OS saves the tile state (XCR0 17, 18), with has_avx512bf16;
                         Linux must still grant the tile data to the process (cpu backend: fa__cpu_amx_usable) */
  size_t l1d_bytes;   /* per core; a default if the OS does not say */
  size_t l2_bytes;    /* per core */
  size_t l3_bytes;    /* shared; 0 if unknown */
  int vendor_amd;     /* AMD (or Hygon, the same cores) x86: where a tuning is vendor-specific (cpu backend:
                         prefetchnta fills L1 only on Zen, which its decode tiles are sized for where L1d is 48 KiB;
                         on Intel it skips L2) */
  int logical_cpus;
  char model[64];
} fa__cpuinfo;

/* Probed on first call (thread-safe), constant afterwards. */
const fa__cpuinfo *fa__cpuinfo_get(void);

#endif
