/* What every AMX user here shares (the cpu backend's kernels_amx.c and the
 * peak measurement bench/peak_amx.c): the 64-byte tile configuration of
 * palette 1, and the Linux request for the tile data. */
#ifndef FA_CPU_AMX_TILES_H
#define FA_CPU_AMX_TILES_H

#include <stdint.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* palette 1: byte 0 the palette, bytes 16-47 the bytes per row of tiles
 * 0-15, bytes 48-63 their rows */
typedef struct fa__amx_cfg {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} fa__amx_cfg;
_Static_assert(sizeof(fa__amx_cfg) == 64, "the tile configuration is 64 bytes");

/* ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA (Linux >= 5.16): 1 when
 * granted. The permission is the process's, for every thread; asking again
 * is harmless. Needs _GNU_SOURCE for syscall(). */
static inline int fa__amx_request_tiles(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
  return 0;
#endif
}

#endif
