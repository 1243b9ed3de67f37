#ifndef FA_CORE_CONTEXT_H
#define FA_CORE_CONTEXT_H

#include "flashattn.h"

/* Everything a context holds. No global mutable state lives elsewhere
 * (the CPU probe is computed once and never changes). */
struct fa_context {
  int threads;
  fa_cpu_isa isa;
  void *stream;
  int device_checks_off; /* fa_context_set_device_checks(ctx, 0) */
  fa_backend last_backend;
  char last_error[512];
  char report[1024];
};

/* Records a failure in ctx (if any) and returns st. */
fa_status fa__fail(fa_context *ctx, fa_status st, const char *msg);

#endif
