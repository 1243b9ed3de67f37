/* AMX-BF16: tdpbf16ps on four independent 16 x 16 f32 tiles (tmm0-3) from
 * two A and two B tiles (tmm4-7) loaded once, the 2 x 2 blocking the cpu
 * backend's amx kernel uses. One tdpbf16ps is 16 x 16 x 32 bf16 products,
 * each multiplied and added: 16384 FLOP. The tiles hold zeros (nothing
 * overflows or goes subnormal; the rate does not depend on the values).
 * Compiled with -mamx-tile -mamx-bf16 on x86-64 only; fa_peak_amx_ready()
 * first (the CPU has AMX and Linux granted this process the tile data). */
#define _GNU_SOURCE /* syscall */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../src/cpu/amx_tiles.h"
#include "peak.h"

/* constant: GCC's _tile_loadconfig tells the compiler it reads 8 bytes */
static const fa__amx_cfg g_cfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0}, {16, 16, 16, 16, 16, 16, 16, 16}};
static const uint16_t g_zeros[16 * 32] __attribute__((aligned(64)));

int fa_peak_amx_permit(void) {
  return fa__amx_request_tiles();
}

double fa_peak_kernel_amx(int64_t iters) {
  float out[256] __attribute__((aligned(64)));
  _tile_loadconfig(&g_cfg);
  _tile_loadd(4, g_zeros, 64);
  _tile_loadd(5, g_zeros, 64);
  _tile_loadd(6, g_zeros, 64);
  _tile_loadd(7, g_zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  volatile float sink = out[0]; /* keeps the loop alive */
  (void)sink;
  return (double)iters * 4.0 * 16384.0;
}
