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

/* Forward. The query tile is the vector dimension of both products: a
 * whole number of micro-tile widths (48 = 3 AVX-512 vectors = 2 AVX2
 * micro-tiles; 32 for the portable kernels). Its Q^T panel (D x bq) is
 * what the S product re-reads for every K row, so it must stay in L1
 * (24 KiB at D = 128). K and V rows are broadcast once per query tile and
 * need no residency; the score tile (bk x bq) is written once and read
 * three times (max, exp, P.V), and with the K/V rows in flight it should
 * stay in L2: bk = a quarter of L2 / (D + Dv + bq) floats. Measured on a
 * 1 MiB-L2 Zen 4: flat within noise from bk = 128 to 512 at D = 128, 5%
 * slower at 48, 12% at 32. */
fa__cpu_blocks fa__cpu_blocks_forward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  fa__cpu_blocks b;
  b.bq = block_q > 0 ? block_q : kt->isa == FA_ISA_GENERIC ? 32 : 48;
  if (block_k > 0) {
    b.bk = block_k;
  } else {
    const long l2 = (long)ci->l2_bytes / 4; /* floats */
    const long bk = l2 / 4 / (long)(D + Dv + fa__cpu_pad(b.bq));
    b.bk = clampi(round_down((int)(bk > 4096 ? 4096 : bk), 16), 32, 512);
  }
  return b;
}

/* Backward. The vector dimension is the key tile (the K^T, V^T panels and
 * the P, dS tiles run along keys), so bk is a whole number of micro-tile
 * widths (48); the five K/V-side panels of an item (scale K^T, V^T, scale
 * K, dK^T, dV^T: bk x (3D + 2Dv) floats) stay in a quarter of L2 while the
 * query tiles stream past. The query tile is a multiple of the micro-tile
 * height; 64 measured best (32..128 within 4%). */
fa__cpu_blocks fa__cpu_blocks_backward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  fa__cpu_blocks b;
  b.bq = block_q > 0 ? block_q : 64;
  if (block_k > 0) {
    b.bk = block_k;
  } else {
    const int unit = kt->isa == FA_ISA_GENERIC ? 32 : 48;
    const long l2 = (long)ci->l2_bytes / 4;
    const long bk = l2 / 4 / (long)(3 * D + 2 * Dv);
    b.bk = clampi(round_down((int)(bk > 4096 ? 4096 : bk), unit), unit, 4 * unit);
  }
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
