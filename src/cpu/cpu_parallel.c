/* The work loop shared by the cpu passes (cpu_parallel.h). */
#include "cpu_parallel.h"

#include <stdlib.h>

fa_status fa__cpu_for_items(const fa__problem *p, int64_t items, const void *ctx, size_t scratch_size,
                            fa__cpu_carve_fn carve, fa__cpu_item_fn item, fa__err *err, const char *what) {
  if (items <= 0) return FA_OK;
  const int nt = fa__cpu_threads(p, items);
  /* Thread t's scratch struct (pointers into its slab) at views + t *
   * view, one cache line apart; the measuring carve writes into thread 0's,
   * which thread 0 carves again. */
  const size_t view = (scratch_size + 63) & ~(size_t)63;
  char *views = (char *)aligned_alloc(64, view * (size_t)nt), *slabs = NULL;
  size_t slab = 0;
  if (views) {
    fa__cpu_arena measure = {NULL, 0};
    carve(&measure, ctx, views);
    slab = fa__cpu_arena_size(&measure);
    slabs = (char *)aligned_alloc(64, slab * (size_t)nt);
  }
  if (!slabs) {
    free(views);
    fa__err_set(err, "%s: cannot allocate %zu bytes of scratch for %d threads", what, (view + slab) * (size_t)nt, nt);
    return FA_ERR_OUT_OF_MEMORY;
  }
  atomic_llong next = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
  {
    const size_t t = (size_t)fa__cpu_thread_id();
    fa__cpu_arena a = {slabs + slab * t, 0};
    void *scratch = views + view * t;
    carve(&a, ctx, scratch);
    for (;;) {
      const int64_t it = atomic_fetch_add(&next, 1);
      if (it >= items) break;
      item(ctx, scratch, it);
    }
  }
  free(slabs);
  free(views);
  return FA_OK;
}
