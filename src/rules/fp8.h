/* The FP8 (OCP E4M3FN) rule of the FP8 forward (docs/semantics.md, "FP8
 * (e4m3)"): the element format, and the key block over which the forward
 * rounds P to e4m3. ref and the cuda kernel both read FA__FP8_BLOCK_K, so
 * that ref rounds P in the same block order as the kernel it checks.
 *
 * E4M3FN (torch.float8_e4m3fn): sign, 4 exponent bits (bias 7), 3 mantissa
 * bits; exponent field 0 is subnormal (m * 2^-9); S.1111.111 is NaN; there
 * are no infinities; the largest finite value is 448. */
#ifndef FA_RULES_FP8_H
#define FA_RULES_FP8_H

#include <math.h>
#include <stdint.h>

#include "hd.h"

/* Keys per block of the online softmax whose P the forward rounds to e4m3:
 * the cuda fp8 kernel's key tile (fwd_fp8_kernel.cuh), and ref's default
 * when opt->block_k is 0. */
#define FA__FP8_BLOCK_K 128

/* P is taken as 2^FA__FP8_P_SHIFT * exp(s - m) (in [0, 256]) before it is
 * rounded: FlashAttention 3's max_offset for FP8. e4m3's smallest normal is
 * 2^-6, so without it every P below 2^-6 would lose bits to subnormals and
 * below 2^-10 vanish; with it that happens only below 2^-14 and 2^-18. The
 * row sum l carries the same factor, so o = acc / l is unchanged and
 * lse = m + ln(l) - FA__FP8_P_SHIFT * ln 2. */
#define FA__FP8_P_SHIFT 8

#define FA__E4M3_MAX 448.0

FA_HD double fa__e4m3_to_double(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  double v;
  if (e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, -9);
  else
    v = ldexp((double)(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

/* x rounded to nearest even in e4m3, saturating at +-448 (as PTX's
 * cvt.rn.satfinite.e4m3x2 does: no infinities to round to); NaN stays NaN. */
FA_HD uint8_t fa__double_to_e4m3(double x) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (uint8_t)(sign | 0x7f);
  const double a = fabs(x);
  if (a >= FA__E4M3_MAX) return (uint8_t)(sign | 0x7e);
  if (a == 0.0) return sign;
  int e2;
  (void)frexp(a, &e2);
  int E = e2 - 1;                   /* a in [2^E, 2^(E+1)) */
  if (E < -6) E = -6;               /* subnormals share the quantum 2^-9 */
  double q = rint(ldexp(a, 3 - E)); /* 8..16 for normals, 0..8 below */
  if (q >= 16.0) {
    ++E;
    q = 8.0;
  }
  if (q < 8.0) return (uint8_t)(sign | (uint8_t)q); /* subnormal (E = -6) */
  return (uint8_t)(sign | (uint8_t)((E + 7) << 3) | (uint8_t)(q - 8.0));
}

/* x as e4m3 would store it. */
FA_HD double fa__e4m3_round(double x) {
  return fa__e4m3_to_double(fa__double_to_e4m3(x));
}

#endif
