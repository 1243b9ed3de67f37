/* Threads for the cpu backend: OpenMP when the build has it, one thread
 * otherwise. Work is handed out item by item from an atomic counter, so
 * items are started in increasing order (the deterministic backward relies
 * on that) and uneven items (causal rows) balance dynamically. */
#ifndef FA_CPU_PARALLEL_H
#define FA_CPU_PARALLEL_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/backend.h"
#include "cpu_scratch.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Threads to use for n_items items: the context's count, else OpenMP's. */
static inline int fa__cpu_threads(const fa__problem *p, int64_t n_items) {
  int nt = 1;
#ifdef _OPENMP
  nt = p->threads > 0 ? p->threads : omp_get_max_threads();
#else
  (void)p;
#endif
  if (nt < 1) nt = 1;
  if (n_items < nt) nt = n_items > 0 ? (int)n_items : 1;
  return nt;
}

static inline int fa__cpu_thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* Briefly wait for another thread (deterministic dQ ordering, dQ lock). */
static inline void fa__cpu_relax(unsigned *spins) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
  if (++*spins > 1000) {
    *spins = 0;
    sched_yield();
  }
}

/* The sequence holding item it, where prefix[b] counts the items before
 * sequence b (prefix[0] = 0, non-decreasing, it < prefix[B]): the last b
 * with prefix[b] <= it, so empty sequences are skipped. */
static inline int64_t fa__cpu_seq_of(const int64_t *prefix, int64_t B, int64_t it) {
  int64_t lo = 0, hi = B - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= it)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* A pass's per-thread scratch: carve takes its buffers from the arena and
 * records them in the pass's scratch struct; with a measuring arena (base
 * NULL) it only counts, and the pointers it records are NULL. */
typedef void (*fa__cpu_carve_fn)(fa__cpu_arena *a, const void *ctx, void *scratch);
/* One work item, run with the calling thread's carved scratch. */
typedef void (*fa__cpu_item_fn)(const void *ctx, void *scratch, int64_t it);

/* Runs item(ctx, scratch, it) for it = 0 .. items-1 on fa__cpu_threads(p,
 * items) threads. The slabs are measured with carve and allocated once,
 * before the threads start; each thread carves its own slab into a scratch
 * struct of scratch_size bytes, then takes items from the shared counter
 * until none are left. FA_ERR_OUT_OF_MEMORY, with what naming the pass in
 * the message, if the scratch cannot be allocated (no item runs then). */
fa_status fa__cpu_for_items(const fa__problem *p, int64_t items, const void *ctx, size_t scratch_size,
                            fa__cpu_carve_fn carve, fa__cpu_item_fn item, fa__err *err, const char *what);

#endif
