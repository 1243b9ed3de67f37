#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

void fa__err_set(fa__err *err, const char *fmt, ...) {
  if (!err) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
}

const fa__backend *fa__backend_get(fa_backend id) {
  switch (id) {
    case FA_BACKEND_REF: return &fa__backend_ref;
#ifdef FA_HAVE_CPU
    case FA_BACKEND_CPU: return &fa__backend_cpu;
#endif
#ifdef FA_HAVE_CUDA
    case FA_BACKEND_CUDA: return &fa__backend_cuda;
#endif
    default: return NULL;
  }
}

fa_status fa_backend_available(fa_backend b, char *why, size_t why_size) {
  fa__err err = {{0}};
  fa_status st;
  const fa__backend *be = fa__backend_get(b);
  if (b <= FA_BACKEND_AUTO || b >= FA_BACKEND_COUNT) {
    fa__err_set(&err, "backend: %d is not a backend", (int)b);
    st = FA_ERR_OPTION;
  } else if (!be) {
    fa__err_set(&err, "%s backend is not compiled into this build", fa_backend_name(b));
    st = FA_ERR_NO_BACKEND;
  } else {
    st = be->available(&err);
  }
  if (why && why_size) snprintf(why, why_size, "%s", st == FA_OK ? "" : err.msg);
  return st;
}

#ifndef FA_HAVE_CUDA
/* Without the cuda backend there is no device to describe; with it,
 * src/cuda/cuda_hooks.cu answers. */
fa_status fa_cuda_device_describe(char *out, size_t out_size) {
  if (!out || out_size == 0) return FA_ERR_NULL_POINTER;
  snprintf(out, out_size, "the cuda backend is not compiled into this build");
  return FA_ERR_NO_BACKEND;
}
#endif
