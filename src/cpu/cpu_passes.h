/* The passes of the cpu backend, called by cpu_backend.c once the problem
 * is known to be supported and the ISA's kernel table is chosen. */
#ifndef FA_CPU_PASSES_H
#define FA_CPU_PASSES_H

#include "core/backend.h"
#include "kernels.h"

fa_status fa__cpu_forward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);
fa_status fa__cpu_backward(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);

/* Decode (cpu_decode.c): few query rows against long keys, split-KV with
 * GQA sharing. fa__cpu_decode_fits: does the plain forward p take it? */
int fa__cpu_decode_fits(const fa__problem *p);
fa_status fa__cpu_decode(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);
/* fa_forward_kvcache: the append, then the decode pass. */
fa_status fa__cpu_forward_kvcache(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err);

/* dBias, when asked for: a pass of its own that recomputes dS tile by tile
 * and sums it over the dimensions where the bias broadcasts, each output
 * element owned by one work item (race-free, same bits on any thread
 * count). */
fa_status fa__cpu_dbias(const fa__problem *p, const fa__cpu_kernels *kt, const float *lse, const float *lse_lo,
                        const float *di, fa__err *err);

/* The backward's row statistics, re-derived from the recomputed P when the
 * stored ones are too coarse: O in f16/bf16 makes Di = rowsum(dO * O)
 * carry the output's rounding (which dS = P (dP - Di) turns into large
 * errors when P is near one-hot), and an f32 LSE of magnitude > 512 carries
 * more than 3e-5 of absolute error into every P of its row. The pass sums
 * P~ = exp(S - LSE) and P~ dP over each row's keys and sets lse_lo =
 * log(sum P~) (LSE + lse_lo is the row's LSE: kept in two parts because an
 * f32 LSE cannot hold the correction) and Di = sum(P~ dP) / sum P~, so P is
 * exactly normalized and Di consistent with it. Costs two of the backward's
 * five products. lse, lse_lo, di: [B][Hq][Lq] by sequence and position. */
int fa__cpu_rowstats_needed(const fa__problem *p, const float *lse, size_t n);
fa_status fa__cpu_rowstats(const fa__problem *p, const fa__cpu_kernels *kt, int bq, int bk, const float *lse,
                           float *lse_lo, float *di, fa__err *err);

#endif
