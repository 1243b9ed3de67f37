#ifndef FA_CORE_VALIDATE_H
#define FA_CORE_VALIDATE_H

#include "backend.h"

/* The arguments of one public call, as given. */
typedef struct fa__call {
  fa__pass pass;
  const fa_tensor *q, *k, *v, *o, *lse, *dout;
  const fa_tensor *dq, *dk, *dv, *dbias;
  const fa_options *opt;
  int kvcache;             /* fa_forward_kvcache */
  const fa_kvcache *cache; /* its cache */
  int trust_device_values; /* device-resident lengths / block table taken unread (fa_context_set_device_checks) */
  void *stream;            /* the context's CUDA stream: device-resident values are read back in its order */
} fa__call;

/* Checks c and fills p; on failure returns the status and err names the
 * argument. Reads seqlens/cu_seqlens (copying them from the device if need
 * be) to check their values. */
fa_status fa__problem_build(fa__problem *p, const fa__call *c, fa__err *err);

/* fa__problem_build for fa_forward_kvcache (validate_kvcache.c). */
fa_status fa__kv_problem_build(fa__problem *p, const fa__call *c, fa__err *err);

/* fa_merge_states's checks: n parts of equal shape, the outputs apart from
 * the inputs. Fills *memory with where the tensors live. */
fa_status fa__merge_check(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, const fa_tensor *o,
                          const fa_tensor *lse, fa_memory *memory, fa__err *err);

#endif
