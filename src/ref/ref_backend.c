/* The ref backend: float64, scalar, eager; every option, every dtype, host
 * memory. It is the oracle the other backends are compared with. */
#include "ref_internal.h"

static fa_status ref_available(fa__err *err) {
  (void)err;
  return FA_OK;
}

static fa_status ref_supports(const fa__problem *p, fa__err *err) {
  if (p->memory != FA_MEMORY_HOST) {
    fa__err_set(err, "ref runs on the CPU and needs host memory; the tensors are in CUDA device memory");
    return FA_ERR_MEMORY_SPACE;
  }
  return FA_OK;
}

const fa__backend fa__backend_ref = {
    FA_BACKEND_REF,          "ref", ref_available, ref_supports, fa__ref_forward, fa__ref_backward,
    fa__ref_forward_kvcache, NULL};
