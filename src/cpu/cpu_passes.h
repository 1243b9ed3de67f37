/* The passes of the cpu backend, called by cpu_backend.c once the problem
 * is known to be supported and the ISA's kernel table is chosen. */
#ifndef FA_CPU_PASSES_H
#define FA_CPU_PASSES_H

#include "core/backend.h"
#include "kernels.h"

fa_status fa__cpu_forward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);
fa_status fa__cpu_backward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);

/* dBias, when asked for: a pass of its own that recomputes dS tile by tile
 * and sums it over the dimensions where the bias broadcasts, each output
 * element owned by one work item (race-free, same bits on any thread
 * count). */
fa_status fa__cpu_dbias(const fa__problem *p, const fa__cpu_kernels *kt, const float *di, fa__err *err);

#endif
