/* The contract between the dispatch layer and a backend. A backend is a
 * table of four functions; dispatch validates and resolves the call into an
 * fa__problem first, so a backend only ever sees well-formed problems. */
#ifndef FA_CORE_BACKEND_H
#define FA_CORE_BACKEND_H

#include <stddef.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A message buffer a backend fills when it fails (or declines). */
typedef struct fa__err {
  char msg[512];
} fa__err;

void fa__err_set(fa__err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

typedef struct fa__backend {
  fa_backend id;
  const char *name;
  /* FA_OK if compiled in and usable on this machine, else FA_ERR_NO_BACKEND
   * and why (e.g. "no CUDA device"). */
  fa_status (*available)(fa__err *err);
  /* FA_OK if the backend can run p (p->pass says which pass), else a status
   * (FA_ERR_UNSUPPORTED, FA_ERR_DTYPE, FA_ERR_MEMORY_SPACE) and the reason,
   * naming the feature. Must not touch the tensors' data. */
  fa_status (*supports)(const fa__problem *p, fa__err *err);
  fa_status (*forward)(const fa__problem *p, fa__err *err);
  fa_status (*backward)(const fa__problem *p, fa__err *err);
  /* fa_forward_kvcache (p->kvcache set): append k_new/v_new, then attend.
   * NULL: the backend does not take the kv-cache call (dispatch refuses it
   * with FA_ERR_UNSUPPORTED). */
  fa_status (*forward_kvcache)(const fa__problem *p, fa__err *err);
  /* fa_merge_states on tensors in this backend's device memory (checked by
   * fa__merge_check), on stream. NULL: only the host merge (ref, cpu). */
  fa_status (*merge_states)(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse,
                            void *stream, fa__err *err);
} fa__backend;

/* The backend compiled in for id, or NULL. */
const fa__backend *fa__backend_get(fa_backend id);

extern const fa__backend fa__backend_ref;
#ifdef FA_HAVE_CPU
extern const fa__backend fa__backend_cpu;
#endif
#ifdef FA_HAVE_CUDA
extern const fa__backend fa__backend_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif
