#ifndef FA_REF_INTERNAL_H
#define FA_REF_INTERNAL_H

#include "../core/backend.h"

fa_status fa__ref_forward(const fa__problem *p, fa__err *err);
fa_status fa__ref_backward(const fa__problem *p, fa__err *err);
fa_status fa__ref_forward_kvcache(const fa__problem *p, fa__err *err);

#endif
