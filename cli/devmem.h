/* CUDA device memory for the cli (check and bench feed the cuda backend
 * device pointers, as a user would). devmem_cuda.c implements this with the
 * CUDA runtime when the build has CUDA; devmem_none.c says why not. */
#ifndef FA_CLI_DEVMEM_H
#define FA_CLI_DEVMEM_H

#include <stddef.h>

#include "instance.h"

/* 1 if device memory can be used here; else 0 and why. */
int cli_dev_usable(char *why, size_t n);

/* A device copy of every tensor and array of host (same shapes, dtypes and
 * strides), with memory = FA_MEMORY_CUDA. 0 on success, else -1 and why. */
int cli_dev_mirror(const cli_instance *host, cli_instance *dev, char *why, size_t n);
/* Copies tensor src (device) into dst (host), same shape and strides. */
int cli_dev_download(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n);
/* Copies tensor src (host) into dst (device). */
int cli_dev_upload(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n);
void cli_dev_free(cli_instance *dev);

/* Timing on the device: waits for all work, then measures with events. */
void cli_dev_sync(void);
typedef struct cli_dev_timer cli_dev_timer;
cli_dev_timer *cli_dev_timer_create(void);
void cli_dev_timer_start(cli_dev_timer *t);
double cli_dev_timer_stop_ms(cli_dev_timer *t); /* synchronizes */
void cli_dev_timer_destroy(cli_dev_timer *t);
/* Device memory in use (total - free), for a coarse "extra memory". */
size_t cli_dev_used_bytes(void);

#endif
