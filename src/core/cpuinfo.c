#include "cpuinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashattn.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FA_X86 1
#endif

static size_t sysfs_cache(int index) {
  char path[128], buf[64];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t v = 0;
  if (fgets(buf, sizeof buf, f)) {
    char unit = 0;
    unsigned long n = 0;
    if (sscanf(buf, "%lu%c", &n, &unit) >= 1) {
      v = n;
      if (unit == 'K') v *= 1024;
      if (unit == 'M') v *= 1024 * 1024;
    }
  }
  fclose(f);
  return v;
}

static int sysfs_cache_level(int index, char *type, size_t n) {
  char path[128], buf[32];
  int level = 0;
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (fgets(buf, sizeof buf, f)) level = atoi(buf);
  fclose(f);
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
  f = fopen(path, "r");
  type[0] = '\0';
  if (f) {
    if (fgets(type, (int)n, f)) type[strcspn(type, "\n")] = '\0';
    fclose(f);
  }
  return level;
}

static void probe(fa__cpuinfo *ci) {
  memset(ci, 0, sizeof *ci);
#ifdef FA_X86
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13];
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    v[12] = '\0';
    ci->vendor_amd = strcmp(v, "AuthenticAMD") == 0 || strcmp(v, "HygonGenuine") == 0;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    const int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      ci->has_avx2_fma = ymm && fma && ((b >> 5) & 1);
      ci->has_avx512f = zmm && ci->has_avx2_fma && ((b >> 16) & 1);
      const int bw = (b >> 30) & 1, subleaves = (int)a;   /* leaf 7: EAX of subleaf 0 is the last subleaf */
      const int amx = ((d >> 22) & 1) && ((d >> 24) & 1); /* AMX-BF16, AMX-TILE */
      if (ci->has_avx512f && bw && subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
        ci->has_avx512bf16 = (a >> 5) & 1;
      ci->has_amx_bf16 = ci->has_avx512bf16 && amx && (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    }
  }
  {
    unsigned regs[12];
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
      for (unsigned i = 0; i < 3; ++i)
        __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
      memcpy(ci->model, regs, 48);
      ci->model[48] = '\0';
    }
  }
#endif
  for (int idx = 0; idx < 8; ++idx) {
    char type[32];
    const int level = sysfs_cache_level(idx, type, sizeof type);
    if (!level) continue;
    const size_t sz = sysfs_cache(idx);
    if (level == 1 && strcmp(type, "Instruction") != 0) ci->l1d_bytes = sz;
    if (level == 2) ci->l2_bytes = sz;
    if (level == 3) ci->l3_bytes = sz;
  }
#ifdef _SC_LEVEL1_DCACHE_SIZE
  if (!ci->l1d_bytes) {
    const long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (v > 0) ci->l1d_bytes = (size_t)v;
  }
  if (!ci->l2_bytes) {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (v > 0) ci->l2_bytes = (size_t)v;
  }
#endif
  if (!ci->l1d_bytes) ci->l1d_bytes = 32 * 1024;
  if (!ci->l2_bytes) ci->l2_bytes = 512 * 1024;
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  ci->logical_cpus = n > 0 ? (int)n : 1;
  /* trim trailing spaces of the brand string */
  for (size_t i = strlen(ci->model); i > 0 && ci->model[i - 1] == ' '; --i) ci->model[i - 1] = '\0';
}

#include <pthread.h>
static fa__cpuinfo g_info;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void probe_once(void) {
  probe(&g_info);
}

const fa__cpuinfo *fa__cpuinfo_get(void) {
  pthread_once(&g_once, probe_once);
  return &g_info;
}

#ifndef FA_HAVE_CPU
/* Without the cpu backend no ISA is usable; with it, src/cpu answers. */
int fa_cpu_isa_supported(fa_cpu_isa isa) {
  (void)isa;
  return 0;
}

fa_status fa_cpu_plan_get(fa_cpu_isa isa, int64_t D, int64_t Dv, int block_q, int block_k, fa_cpu_plan *out) {
  (void)isa, (void)D, (void)Dv, (void)block_q, (void)block_k, (void)out;
  return FA_ERR_NO_BACKEND;
}

fa_status fa_cpu_plan_get_dtype(fa_cpu_isa isa, fa_dtype dt, int64_t D, int64_t Dv, int block_q, int block_k,
                                fa_cpu_plan *out) {
  (void)dt;
  return fa_cpu_plan_get(isa, D, Dv, block_q, block_k, out);
}
#endif
