/* Which instruction set a call runs with: probed once, overridable by
 * FLASHATTN_ISA and by the context, and the kernel table that goes with it. */
#ifndef FA_CPU_ISA_H
#define FA_CPU_ISA_H

#include <stddef.h>

#include "flashattn.h"
#include "kernels.h"

/* Is isa compiled into this build and present on this CPU? AUTO: always. */
int fa__cpu_isa_have(fa_cpu_isa isa);

/* The ISA for a request: AUTO follows FLASHATTN_ISA if set, else the best
 * the CPU has. FA_ERR_UNSUPPORTED with a message naming the ISA when the
 * CPU (or build) lacks it or FLASHATTN_ISA names none. */
fa_status fa__cpu_isa_resolve(fa_cpu_isa requested, fa_cpu_isa *out, char *why, size_t why_size);

/* The kernel table of a resolved ISA (never AUTO), built once. */
const fa__cpu_kernels *fa__cpu_kernels_get(fa_cpu_isa isa);

#endif
