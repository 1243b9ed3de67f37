/* Device memory for the tests of the cuda backend. device.c implements it
 * with the CUDA runtime when the build has CUDA; device_none.c otherwise,
 * where nothing is available and every call fails. */
#ifndef FA_TEST_DEVICE_H
#define FA_TEST_DEVICE_H

#include <stddef.h>

/* 1 if a CUDA device can be used here. */
int tdev_available(void);
/* NULL on failure. */
void *tdev_alloc(size_t bytes);
void tdev_free(void *p);
/* 0 on success. Synchronous. */
int tdev_to_device(void *dst, const void *src, size_t bytes);
int tdev_to_host(void *dst, const void *src, size_t bytes);
/* The last runtime error as text, for failure messages. */
const char *tdev_last_error(void);

#endif
