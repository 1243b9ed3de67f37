/* Portable C: what the compiler makes of plain multiply-adds with the
 * baseline ISA (SSE2 on x86-64, NEON on arm64): the ceiling of the cpu
 * backend's generic path. 8 rows of 8 lanes: enough independent chains to
 * cover the latency of a multiply followed by an add. */
#include <stdint.h>

#include "peak.h"

#define CHAINS 64

double fa_peak_kernel_generic(int64_t iters) {
  float acc[CHAINS];
  for (int k = 0; k < CHAINS; ++k) acc[k] = (float)k * 1e-3f;
  const float x = 0.9999999f, y = 1e-7f;
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < CHAINS; ++k) acc[k] = acc[k] * x + y;
  float sum = 0;
  for (int k = 0; k < CHAINS; ++k) sum += acc[k];
  volatile float sink = sum; /* keeps the loop alive */
  (void)sink;
  return (double)iters * CHAINS * 2.0;
}
