/* f16 and bf16 <-> f32, bit-exact and portable (round to nearest even), for
 * host code of every backend. CUDA device code uses its own intrinsics. */
#ifndef FA_RULES_HALF_H
#define FA_RULES_HALF_H

#include <stdint.h>
#include <string.h>

#include "hd.h"

FA_HD float fa__bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
FA_HD uint32_t fa__f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

FA_HD float fa__bf16_to_f32(uint16_t h) {
  return fa__bits_to_f32((uint32_t)h << 16);
}

FA_HD uint16_t fa__f32_to_bf16(float f) {
  uint32_t u = fa__f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

FA_HD float fa__f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return fa__bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return fa__bits_to_f32(sign);
    /* subnormal: normalize */
    exp = 1;
    while (!(man & 0x400u)) {
      man <<= 1;
      --exp;
    }
    man &= 0x3ffu;
  }
  return fa__bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

FA_HD uint16_t fa__f32_to_f16(float f) {
  const uint32_t u = fa__f32_to_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (a < 0x38800000u) {                                   /* subnormal or zero in f16 */
    if (a < 0x33000000u) return sign;                      /* below half the smallest subnormal */
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

#endif
