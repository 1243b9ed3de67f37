/* Builds without CUDA: the cuda backend is never fed, and says why. */
#include <stdio.h>

#include "devmem.h"

int cli_dev_usable(char *why, size_t n) {
  snprintf(why, n, "this build has no CUDA (configure with nvcc present and -DFA_WITH_CUDA=ON)");
  return 0;
}

int cli_dev_mirror(const cli_instance *host, cli_instance *dev, char *why, size_t n) {
  (void)host, (void)dev;
  snprintf(why, n, "this build has no CUDA");
  return -1;
}

int cli_dev_download(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n) {
  (void)dst, (void)src, (void)ndim;
  snprintf(why, n, "this build has no CUDA");
  return -1;
}

int cli_dev_upload(const fa_tensor *dst, const fa_tensor *src, int ndim, char *why, size_t n) {
  (void)dst, (void)src, (void)ndim;
  snprintf(why, n, "this build has no CUDA");
  return -1;
}

void cli_dev_free(cli_instance *dev) {
  (void)dev;
}

void cli_dev_sync(void) {}

cli_dev_timer *cli_dev_timer_create(void) {
  return NULL;
}
void cli_dev_timer_start(cli_dev_timer *t) {
  (void)t;
}
double cli_dev_timer_stop_ms(cli_dev_timer *t) {
  (void)t;
  return 0.0;
}
void cli_dev_timer_destroy(cli_dev_timer *t) {
  (void)t;
}
size_t cli_dev_used_bytes(void) {
  return 0;
}
