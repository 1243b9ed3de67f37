#include "cpu_plan.h"

#include <stdlib.h>

#include "core/cpuinfo.h"
#include "cpu_gemm.h"
#include "cpu_isa.h"

static int round_down(int x, int m) {
  return x / m * m;
}
static int clampi(int x, int lo, int hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* Asked-for tile sizes are cut to this: no cache holds a larger tile, and
 * padding (fa__cpu_pad) and tile products of sizes near INT_MAX overflow
 * int. The backends cut them to the problem's lengths as well. */
enum { FA_CPU_BLOCK_MAX = 1 << 16 };
static int block_cap(int b) {
  return b > FA_CPU_BLOCK_MAX ? FA_CPU_BLOCK_MAX : b;
}

/* Forward. The query tile is the vector dimension of both products: a
 * whole number of micro-tile widths (48 = 3 AVX-512 vectors = 2 AVX2
 * micro-tiles; 32 for the portable kernels). Its Q^T panel (D x bq) is
 * what the S product re-reads for every K row, so it must stay in L1
 * (24 KiB at D = 128). K and V rows are broadcast once per query tile and
 * need no residency (while a head's K/V stay in L3; past that see
 * fa__cpu_forward_group, which keeps these tiles); the score tile (bk x bq) is written once and read
 * three times (max, exp, P.V), and with the K/V rows in flight it should
 * stay in L2: bk = a quarter of L2 / (D + Dv + bq) floats. Measured on a
 * 1 MiB-L2 Zen 4: flat within noise from bk = 128 to 512 at D = 128, 5%
 * slower at 48, 12% at 32. */
fa__cpu_blocks fa__cpu_blocks_forward(const fa__cpu_kernels *kt, int64_t D, int64_t Dv, int block_q, int block_k) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  fa__cpu_blocks b;
  block_q = block_cap(block_q), block_k = block_cap(block_k);
  /* amx: 64 = two blocks of two 16-column tiles (kernels_amx.c) */
  b.bq = block_q > 0 ? block_q : kt->isa == FA_ISA_GENERIC ? 32 : kt->isa == FA_ISA_AMX ? 64 : 48;
  if (block_k > 0) {
    b.bk = block_k;
  } else {
    const long l2 = (long)ci->l2_bytes / 4; /* floats */
    const long bk = l2 / 4 / (long)(D + Dv + fa__cpu_pad(b.bq));
    b.bk = clampi(round_down((int)(bk > 4096 ? 4096 : bk), 16), 32, 512);
  }
  return b;
}

/* Forward, long keys. A query tile of bq = 48 rows does 4 * 48 * (D + Dv)/2
 * flops per K/V element, 24 flop/byte: enough while the head's K and V stay
 * in L3 from one query tile to the next, not when every tile has to bring
 * them in again. Measured on the 2-core Zen 4 VM (L2 1 MiB, L3 32 MiB), one
 * head, D = 128, non-causal: 102 GFLOP/s per core at L = 4096 (K+V 4 MiB),
 * 77 at L = 16384 (16 MiB), both on one thread, so it is not the two cores
 * contending (L = 8192, 8 MiB: 158 on 2 threads). A taller query tile
 * raises the intensity but its Q^T panel leaves L1 (bq = 192: 190 GFLOP/s
 * on 2 threads, against 167). Instead, once a head's K/V exceed an eighth
 * of L3 (the largest size measured at full speed), `group` query tiles of
 * one head take the keys in turn, a chunk at a time: the chunk (half of
 * L2) comes from L3/memory once per group and from L2 for the other tiles,
 * 8 x 24 = 192 flop/byte. Each tile keeps its own bq x bk steps in the
 * same order, so the tiles fa_cpu_plan_get reports are still the ones the
 * forward runs and the results are bit for bit those of group 1. Measured
 * (L = 16384, D = 128, 2 threads): group 4: 182 GFLOP/s, 8: 197, 16: 197;
 * chunk from bk to 20 bk within 2%. On a Sapphire Rapids-class Xeon VM
 * (2 cores, L2 2 MiB, L3 480 MiB shared with the host's other tenants) the
 * L3 feeds a core far more slowly: group 1 ran D = 128 at L = 4096 (K+V
 * 4 MiB, far below L3 / 8) at 155 GFLOP/s on one thread, group 4 or 8 at
 * 172-175; 2 threads 216 -> 196 ms, and L = 2048 (K+V 2 MiB) 55 -> 50 ms.
 * So f32 products also go in groups once a head's K/V outgrow half of L2 (the
 * other half holds the tile's own working set): the steps are the same, so
 * the cost is only fewer, larger work items (the caller halves the group
 * while that would leave fewer than 4 items per thread). Not on AMD, where
 * this was not measured: Zen keeps the L3 / 8 rule it was tuned with. */
void fa__cpu_forward_group(fa__cpu_blocks blk, int64_t D, int64_t Dv, int64_t Lk, size_t elem, int f32_products,
                           int *group, int64_t *chunk) {
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  const size_t l2 = ci->l2_bytes ? ci->l2_bytes : (size_t)1 << 20;
  const size_t l3 = ci->l3_bytes ? ci->l3_bytes : 8 * l2;
  const size_t kv = (size_t)Lk * (size_t)(D + Dv) * elem;
  *group = kv > l3 / 8 || (f32_products && !fa__cpuinfo_get()->vendor_amd && kv > l2 / 2) ? 8 : 1;
  if (blk.bk < 1) blk.bk = 1; /* no keys (Lk = 0): nothing to walk */
  const int64_t keys = (int64_t)(l2 / 2 / ((size_t)(D + Dv) * sizeof(float))) / blk.bk * blk.bk;
  *chunk = keys < blk.bk ? blk.bk : keys;
}

/* FLASHATTN_CPU_FORWARD_GROUP=G[,C] forces groups of G query tiles and K/V
 * chunks of C keys (rounded down to whole key tiles). The test suite's
 * problems are far too small to reach the L3 threshold above, so a ctest
 * entry runs the whole suite with the grouped path forced; it is also a
 * knob for measuring the grouping on other machines. */
void fa__cpu_forward_group_override(int bk, int *group, int64_t *chunk) {
  const char *env = getenv("FLASHATTN_CPU_FORWARD_GROUP");
  if (!env || !*env) return;
  char *end = NULL;
  const long g = strtol(env, &end, 10);
  if (g >= 1 && g <= 1024) *group = (int)g;
  if (end && *end == ',') {
    const long keys = strtol(end + 1, NULL, 10);
    if (keys > 0 && bk > 0) *chunk = keys < bk ? bk : keys / bk * bk;
  }
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
  block_q = block_cap(block_q), block_k = block_cap(block_k);
  b.bq = block_q > 0 ? block_q : 64;
  if (block_k > 0) {
    b.bk = block_k;
  } else {
    const int unit = kt->isa == FA_ISA_GENERIC ? 32 : kt->isa == FA_ISA_AMX ? 64 : 48; /* amx: 2 x 32-column blocks */
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

/* The bf16 forward on the pair kernels (cpu_forward.c): the Q^T pair
 * panel, the K and V tiles in bf16 (read in place), the score tile, P^T and
 * V as pairs, the output accumulator and the row statistics. */
static size_t working_set_bf16(int bq, int bk, int64_t D, int64_t Dv) {
  const size_t np = (size_t)fa__cpu_pad(bq), kp = ((size_t)bk + 1) / 2;
  const size_t qp = ((size_t)D + 1) / 2 * np * 4, kv = (size_t)bk * (size_t)(D + Dv) * 2, s = (size_t)bk * np * 4,
               pp = kp * np * 4, vp = kp * (size_t)Dv * 4, o = (size_t)Dv * np * 4, stats = 3 * np * 4;
  return qp + kv + s + pp + vp + o + stats;
}

fa_status fa_cpu_plan_get_dtype(fa_cpu_isa isa, fa_dtype dt, int64_t D, int64_t Dv, int block_q, int block_k,
                                fa_cpu_plan *out) {
  const fa_status st = fa_cpu_plan_get(isa, D, Dv, block_q, block_k, out);
  if (st != FA_OK) return st;
  if (dt == FA_BF16 && fa__cpu_kernels_get(out->isa)->gemm_bf16)
    out->working_set_bytes = working_set_bf16(out->block_q, out->block_k, D, Dv);
  return FA_OK;
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
