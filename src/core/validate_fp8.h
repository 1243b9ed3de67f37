/* The FP8 forward's own checks (validate_fp8.c), for fa__problem_build. */
#ifndef FA_CORE_VALIDATE_FP8_H
#define FA_CORE_VALIDATE_FP8_H

#include "checks.h"
#include "validate.h"

/* The dtypes of an e4m3 call (k, v e4m3; o bf16 or f16; forward only) and
 * the options it refuses (mask, bias, dropout); for any other dtype, that
 * no descale is given. */
fa_status fa__fp8_check_call(const fa__call *c, const fa_options *o, fa__err *err);

/* The descale tensors (memory already resolved; p->B and p->Hkv set):
 * f32 [B, Hkv] with broadcasting, copied into p with stride 0 on
 * broadcast dims; each adds its byte range to ins[*ni] (inputs). */
fa_status fa__fp8_descales(fa__problem *p, fa_tensor *qd, fa_tensor *kd, fa_tensor *vd, fa__extent *ins, int *ni,
                           fa__err *err);

#endif
