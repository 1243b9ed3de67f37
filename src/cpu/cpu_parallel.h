/* Threads for the cpu backend: OpenMP when the build has it, one thread
 * otherwise. Work is handed out item by item from an atomic counter, so
 * items are started in increasing order (the deterministic backward relies
 * on that) and uneven items (causal rows) balance dynamically. */
#ifndef FA_CPU_PARALLEL_H
#define FA_CPU_PARALLEL_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/problem.h"

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

#endif
