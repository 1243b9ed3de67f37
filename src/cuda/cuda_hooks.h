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

/* Copies bytes from device memory src to host dst (synchronous). */
fa_status fa__cuda_copy_to_host(void *dst, const void *src, size_t bytes, fa__err *err);

#ifdef __cplusplus
}
#endif
#endif
