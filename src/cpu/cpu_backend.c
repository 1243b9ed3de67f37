/* The cpu backend's table: what it takes (host memory; f32, f16, bf16
 * computed in f32; the ISA asked for must be there) and the two passes. */
#include <stdio.h>

#include "core/backend.h"
#include "cpu_isa.h"
#include "cpu_passes.h"

/* Head dims above this would overflow the int tile arithmetic; nobody has them. */
#define FA_CPU_MAX_HEAD_DIM (1 << 20)

static fa_status cpu_available(fa__err *err) {
  (void)err;
  return FA_OK;
}

static fa_status cpu_supports(const fa__problem *p, fa__err *err) {
  if (p->memory == FA_MEMORY_CUDA) {
    fa__err_set(err, "the cpu backend reads host memory; these tensors are in CUDA device memory");
    return FA_ERR_MEMORY_SPACE;
  }
  if (p->dtype == FA_F8_E4M3) {
    fa__err_set(err, "dtype e4m3: the cpu backend has no FP8; use ref or cuda");
    return FA_ERR_DTYPE;
  }
  if (p->dtype != FA_F32 && p->dtype != FA_F16 && p->dtype != FA_BF16) {
    fa__err_set(err,
                "dtype %s: the cpu backend computes in f32 and takes f32, f16 or bf16 tensors; "
                "the ref backend takes f64",
                fa_dtype_name(p->dtype));
    return FA_ERR_DTYPE;
  }
  if (p->lse.data && p->lse.dtype != FA_F32) {
    fa__err_set(err,
                "lse dtype %s: the cpu backend computes in f32 and writes/reads an f32 lse; "
                "the ref backend takes f64",
                fa_dtype_name(p->lse.dtype));
    return FA_ERR_DTYPE;
  }
  if (p->D > FA_CPU_MAX_HEAD_DIM || p->Dv > FA_CPU_MAX_HEAD_DIM || p->Lq > INT32_MAX || p->Lk > INT32_MAX) {
    fa__err_set(err, "head dim or length too large for the cpu backend (D %lld, Dv %lld)", (long long)p->D,
                (long long)p->Dv);
    return FA_ERR_UNSUPPORTED;
  }
  fa_cpu_isa isa;
  char why[256];
  if (fa__cpu_isa_resolve(p->isa, &isa, why, sizeof why) != FA_OK) {
    fa__err_set(err, "%s", why);
    return FA_ERR_UNSUPPORTED;
  }
  return FA_OK;
}

static fa_status cpu_run(const fa__problem *p, fa__err *err) {
  fa_cpu_isa isa;
  char why[256];
  if (fa__cpu_isa_resolve(p->isa, &isa, why, sizeof why) != FA_OK) {
    fa__err_set(err, "%s", why);
    return FA_ERR_UNSUPPORTED;
  }
  const fa__cpu_kernels *kt = fa__cpu_kernels_get(isa);
  if (p->kvcache) return fa__cpu_forward_kvcache(p, kt, err);
  return p->pass == FA__FORWARD ? fa__cpu_forward(p, kt, err) : fa__cpu_backward(p, kt, err);
}

static fa_status cpu_forward(const fa__problem *p, fa__err *err) {
  return cpu_run(p, err);
}
static fa_status cpu_backward(const fa__problem *p, fa__err *err) {
  return cpu_run(p, err);
}

const fa__backend fa__backend_cpu = {FA_BACKEND_CPU, "cpu",        cpu_available, cpu_supports,
                                     cpu_forward,    cpu_backward, cpu_forward,   NULL};
