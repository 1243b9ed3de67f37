/* Per-thread scratch: sized once before the parallel region, one slab per
 * thread, carved into 64-byte aligned buffers. Nothing is allocated inside
 * the tile loops. */
#ifndef FA_CPU_SCRATCH_H
#define FA_CPU_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

/* A bump allocator over one slab; with base NULL it only measures. */
typedef struct fa__cpu_arena {
  char *base;
  size_t used;
} fa__cpu_arena;

static inline void *fa__cpu_take(fa__cpu_arena *a, size_t bytes) {
  const size_t at = (a->used + 63) & ~(size_t)63;
  a->used = at + bytes;
  return a->base ? a->base + at : NULL;
}

static inline float *fa__cpu_take_f(fa__cpu_arena *a, size_t n) {
  return (float *)fa__cpu_take(a, n * sizeof(float));
}

/* Bytes of one slab, rounded to whole cache lines. */
static inline size_t fa__cpu_arena_size(const fa__cpu_arena *a) {
  return (a->used + 63) & ~(size_t)63;
}

#endif
