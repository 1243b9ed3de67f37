/* A build without CUDA: no device memory; the cuda cases skip. */
#include "device.h"

int tdev_available(void) {
  return 0;
}
void *tdev_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void tdev_free(void *p) {
  (void)p;
}
int tdev_to_device(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return -1;
}
int tdev_to_host(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return -1;
}
const char *tdev_last_error(void) {
  return "this build has no CUDA";
}
