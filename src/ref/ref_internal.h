#ifndef FA_REF_INTERNAL_H
#define FA_REF_INTERNAL_H

#include "../core/backend.h"

fa_status fa__ref_forward(const fa__problem *p, fa__err *err);
/* The FP8 (e4m3) forward's rule (docs/semantics.md): ref_forward_fp8.c. */
fa_status fa__ref_forward_fp8(const fa__problem *p, fa__err *err);
fa_status fa__ref_backward(const fa__problem *p, fa__err *err);
fa_status fa__ref_forward_kvcache(const fa__problem *p, fa__err *err);

#endif
