#include "cpu_plan.h"

#include "core/cpuinfo.h"
#include "cpu_gemm.h"
#include "cpu_isa.h"

static int round_down(int x, int m) {
  return x / m * m;
}
static int clampi(int x, int lo, int hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* The query tile is the vector dimension of the forward's products: a
 * whole number of micro-tile widths (3 vectors: 48 floats with AVX-512,
 * 2 x 24 with AVX2). Key tiles: the K/V rows of one step plus the score
 * tile share half of L2 with the Q panel and accumulator, and the score
 * tile (bk x bq) stays within L1 so that the softmax pass reads it warm. */
fa__cpu_blocks fa__cpu_blocks_forward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  fa__cpu_blocks b;
  b.bq = block_q > 0 ? block_q : kt->isa == FA_ISA_GENERIC ? 32 : 48;
  if (block_k > 0) {
    b.bk = block_k;
  } else {
    const int bq = fa__cpu_pad(b.bq);
    const long l1 = (long)ci->l1d_bytes / 4, l2 = (long)ci->l2_bytes / 4; /* in floats */
    const long by_l1 = l1 / 2 / bq;
    const long by_l2 = (l2 / 2 - (long)bq * (D + Dv)) / (D + Dv + bq);
    long bk = by_l1 < by_l2 ? by_l1 : by_l2;
    b.bk = clampi(round_down((int)(bk > 4096 ? 4096 : bk), 16), 16, 512);
  }
  return b;
}

/* Backward: the vector dimension is the key tile (panels of K^T, V^T and
 * the score tiles run along keys), so bk is a whole number of micro-tile
 * widths; the query tile is a multiple of the micro-tile height. */
fa__cpu_blocks fa__cpu_blocks_backward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k) {
  (void)D, (void)Dv;
  fa__cpu_blocks b;
  b.bq = block_q > 0 ? block_q : 64;
  b.bk = block_k > 0 ? block_k : kt->isa == FA_ISA_GENERIC ? 64 : 96;
  return b;
}

size_t fa__cpu_working_set(int bq, int bk, int64_t D, int64_t Dv) {
  const size_t q = (size_t)bq * (size_t)D, kv = (size_t)bk * (size_t)(D + Dv), s = (size_t)bq * (size_t)bk,
               o = (size_t)bq * (size_t)Dv, stats = 3 * (size_t)bq;
  return (q + kv + s + o + stats) * sizeof(float);
}

fa_status fa_cpu_plan_get(fa_cpu_isa isa, int64_t D, int64_t Dv, int block_q, int block_k, fa_cpu_plan *out) {
  if (!out) return FA_ERR_NULL_POINTER;
  if (D <= 0 || Dv <= 0) return FA_ERR_BAD_SIZE;
  if (block_q < 0 || block_k < 0) return FA_ERR_OPTION;
  fa_cpu_isa chosen;
  const fa_status st = fa__cpu_isa_resolve(isa, &chosen, NULL, 0);
  if (st != FA_OK) return st;
  const fa__cpu_blocks b = fa__cpu_blocks_forward(fa__cpu_kernels_get(chosen), D, Dv, block_q, block_k);
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  out->isa = chosen;
  out->block_q = b.bq;
  out->block_k = b.bk;
  out->working_set_bytes = fa__cpu_working_set(b.bq, b.bk, D, Dv);
  out->l1d_bytes = ci->l1d_bytes;
  out->l2_bytes = ci->l2_bytes;
  return FA_OK;
}
