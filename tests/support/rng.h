/* A tiny deterministic generator for test data: splitmix64, so that every
 * case produces the same inputs on every machine and every run. */
#ifndef FA_TEST_RNG_H
#define FA_TEST_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct trng {
  uint64_t s;
} trng;

static inline uint64_t trng_u64(trng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static inline double trng_uniform(trng *r) {
  return (double)(trng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* standard normal (Box-Muller; one value per call keeps the stream simple) */
static inline double trng_normal(trng *r) {
  const double u1 = 1.0 - trng_uniform(r), u2 = trng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
