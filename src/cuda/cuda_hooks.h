/* What the dispatch layer asks of the CUDA runtime, behind a C interface
 * (implemented in cuda_hooks.cu; only compiled when FA_HAVE_CUDA). */
#ifndef FA_CUDA_HOOKS_H
#define FA_CUDA_HOOKS_H

#include <stddef.h>

#include "../core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if p is CUDA device (or managed) memory, 0 if host or unknown. Never
 * fails loudly: with no driver or device it answers 0. */
int fa__cuda_is_device_pointer(const void *p);

/* Copies bytes of the array called name from device memory src to host dst
 * in the order of stream (a cudaStream_t; NULL: the legacy default stream)
 * and waits for it. FA_ERR_UNSUPPORTED, naming the array and adding hint,
 * when the stream is capturing a CUDA graph (nothing is enqueued then, and
 * the capture stays valid). */
fa_status fa__cuda_read_back(void *dst, const void *src, size_t bytes, void *stream, const char *name, const char *hint,
                             fa__err *err);

#ifdef __cplusplus
}
#endif
#endif
