// dBias of a broadcast bias on tensor cores for Hopper (sm_90a): a bias
// shared by the batch and / or the heads ([1, Hq, Lq, Lk], [B, 1, Lq, Lk],
// [1, 1, Lq, Lk]) gets the sum of dS over the (b, h) pairs that read it;
// one shared by the rows too (a key bias, [., ., 1, Lk]) the sum over the
// rows as well. The wgmma dQ kernel (bwd_dq_wgmma_kernel.cuh, kDBias) walks
// the key tiles of one (b, h); here the sum is the inner loop instead, so
// that it stays in registers: a block owns one dBias tile, kBM query rows
// x kBN keys (or one row x kBN keys), and for each step, a pair (b-major,
// h-minor: generic_bwd.cu's order) and, where rows are summed, a row tile
// of it, copies that step's Q, dO, K and V tiles, computes
//   S = Q K^T, dP = dO V^T    wgmma ss, as the dQ kernel
//   dS                        bwd_tile.cuh's arithmetic form, the bias read
//                             from global memory (score_global.cuh)
// and adds dS into its accumulators; after the last step the sum is stored
// once (summed rows: first over the block's rows, in a fixed order).
// Each element has one writer and a fixed summation order (deterministic),
// the whole tensor is written (no zeroing), and nothing is allocated.
// The next pair's tiles are copied under this pair's products where two
// stages fit (kD <= 128); at kD = 256 one stage, refilled after the products.
// Steps whose band or lengths leave the tile empty are skipped.
#ifndef FA_CUDA_DBIAS_SUM_WGMMA_KERNEL_CUH
#define FA_CUDA_DBIAS_SUM_WGMMA_KERNEL_CUH

#include "bwd_dq_wgmma_kernel.cuh"
#include "bwd_tile.cuh"
#include "score_global.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD>
struct dbias_sum_cfg {
  static constexpr int kBM = 128, kBN = 64, kThreads = 256;
  // Q, dO (kBM rows), K, V (kBN rows)
  static constexpr size_t stage_bytes = sizeof(uint16_t) * (size_t)(2 * (kBM + kBN) * kD);
  static constexpr int kStages = 2 * stage_bytes + 1024 <= 227 * 1024 ? 2 : 1;
  static constexpr size_t smem_bytes = kStages * stage_bytes + 1024;  // 1 KiB to align to 1024 bytes
};

// Grid: x = key tile + key tiles * (the bias's own (b, h) index), y = row
// tile (1 where rows are summed).
template <typename E, int kD>
__global__ void __launch_bounds__(256, 1) dbias_sum_wgmma_kernel(const fa__cuda_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = dbias_sum_cfg<kD>;
  constexpr int kBM = cfg::kBM, kBN = cfg::kBN, kThreads = cfg::kThreads, kStages = cfg::kStages;
  constexpr int kNB = kBN / 8;
  constexpr uint32_t kStage = static_cast<uint32_t>(cfg::stage_bytes);
  static_assert(kD % 64 == 0, "wgmma tiles are whole 64-column atoms");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  // a stage: Q, dO [kD / 64][kBM][64], then K, V [kD / 64][kBN][64]
  auto stage_q = [&](int st) { return reinterpret_cast<T *>(smem + st * kStage); };

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wrow = warp * 16;
  const int64_t key_tiles = (p.Lk + kBN - 1) / kBN;
  const int64_t own = blockIdx.x / key_tiles;  // the bias's (b, h) index: b_own * (1 or Hq) + h_own
  const int64_t n0 = (blockIdx.x % key_tiles) * kBN;
  const int64_t own_h = p.dbias_sum_h ? 1 : p.Hq;
  const int64_t b_own = p.dbias_sum_b ? 0 : own / own_h, h_own = p.dbias_sum_h ? 0 : own % own_h;
  const int64_t pairs_h = p.dbias_sum_h ? p.Hq : 1, pairs = (p.dbias_sum_b ? p.B : 1) * pairs_h;
  const int64_t row_steps = p.dbias_sum_i ? (p.Lq + kBM - 1) / kBM : 1, steps = pairs * row_steps;

  // step k's context and first row; false where its band and lengths leave the tile nothing
  struct step {
    seq_ctx c;
    int64_t m0;
  };
  auto step_at = [&](int64_t k, step *x) {
    const int64_t pair = k / row_steps;
    const int64_t b = p.dbias_sum_b ? pair / pairs_h : b_own, h = p.dbias_sum_h ? pair % pairs_h : h_own;
    x->c = make_seq_ctx(p, b, h);
    x->m0 = (p.dbias_sum_i ? k % row_steps : static_cast<int64_t>(blockIdx.y)) * kBM;
    const seq_ctx &c = x->c;
    if (x->m0 >= c.seq.lq || n0 >= c.seq.lk) return false;
    int64_t j0, j1;
    fa__band_cols(&c.bd, x->m0, x->m0 + kBM < c.seq.lq ? x->m0 + kBM : c.seq.lq, &j0, &j1);
    return (j0 > n0 ? j0 : n0) < (j1 < n0 + kBN ? j1 : n0 + kBN);
  };
  auto next_step = [&](int64_t k, step *x) {
    while (++k < steps && !step_at(k, x)) {
    }
    return k;
  };
  auto load_step = [&](const step &x, int st) {
    const seq_ctx &c = x.c;
    const int64_t m0 = x.m0;
    T *sq = stage_q(st), *sdo = sq + kBM * kD, *sk = sdo + kBM * kD, *sv = sk + kBN * kD;
    const int64_t row0 = c.seq.q_row0 + m0, key0 = c.seq.k_row0 + n0, kvh = c.h / p.group;
    const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
    const int k_valid = static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
    const T *gq = static_cast<const T *>(p.q) + c.seq.bidx * p.qs.b + c.h * p.qs.h + row0 * p.qs.r;
    const T *gdo = static_cast<const T *>(p.dout) + c.seq.bidx * p.dos.b + c.h * p.dos.h + row0 * p.dos.r;
    const T *gk = static_cast<const T *>(p.k) + c.seq.bidx * p.ks.b + kvh * p.ks.h + key0 * p.ks.r;
    const T *gv = static_cast<const T *>(p.v) + c.seq.bidx * p.vs.b + kvh * p.vs.h + key0 * p.vs.r;
    load_tile<kBM, kD, kThreads, true>(sq, gq, p.qs.r, q_valid, p.D, p.q, tid);
    load_tile<kBM, kD, kThreads, true>(sdo, gdo, p.dos.r, q_valid, p.Dv, p.dout, tid);
    load_tile<kBN, kD, kThreads, true>(sk, gk, p.ks.r, k_valid, p.D, p.k, tid);
    load_tile<kBN, kD, kThreads, true>(sv, gv, p.vs.r, k_valid, p.Dv, p.v, tid);
  };

  float acc[kNB][4];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f;

  step cur, nxt;
  int64_t k = next_step(-1, &cur);
  if (k < steps) load_step(cur, 0);
  cp_async_commit();
  for (int st = 0; k < steps; st = kStages == 2 ? st ^ 1 : 0) {
    const int64_t k_next = next_step(k, &nxt);
    cp_async_wait<0>();  // step k's tiles landed; every warpgroup is done with the other stage
    fence_proxy_async();
    __syncthreads();
    if (kStages == 2) {
      if (k_next < steps) load_step(nxt, st ^ 1);
      cp_async_commit();
    }
    const seq_ctx &c = cur.c;
    const int64_t m0 = cur.m0;
    float lse2[2], dsum[2];
    bwd_row_stats(p, c, c.h, m0 + wrow + g, lse2, dsum);

    const uint32_t q_base = smem_addr(stage_q(st)) + wg * 64 * 128, do_base = q_base + kBM * kD * 2;
    const uint32_t k_base = smem_addr(stage_q(st)) + 2 * kBM * kD * 2, v_base = k_base + kBN * kD * 2;
    float s[kNB][4], dp[kNB][4];
    wgmma_s_dp<E, kD, kBM, kBN>(s, dp, q_base, k_base, do_base, v_base);
    if (kStages == 1) {  // every warpgroup's products are done: the one stage takes the next step
      __syncthreads();
      if (k_next < steps) load_step(nxt, 0);
      cp_async_commit();
    }

    bwd_ds_rows_arith<true>(p, c.bd, arith_score(p, c.slope), s, dp, lse2, dsum, m0 + wrow, n0, g, t,
                            global_score_tile_of<T, FA_CUDA_TILE_BIAS>(p, c.seq, c.b, c.h, m0 + wrow, n0));
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nb][e] += s[nb][e];
    k = k_next;
    cur = nxt;
  }
  cp_async_wait<0>();
  T *base = static_cast<T *>(p.dbias) + b_own * p.dbias_s[0] + h_own * p.dbias_s[1];
  if (!p.dbias_sum_i) {
    bwd_store_dbias<E>(p, base, p.Lq, p.Lk, static_cast<int64_t>(blockIdx.y) * kBM + wrow + g, n0, acc, t);
    return;
  }
  // rows summed: the thread's two rows, the warp's 16 (lanes of equal t), then the 8 warps in order
  __syncthreads();  // (every warpgroup is done with the stages: their memory takes the warps' sums)
  float *part = reinterpret_cast<float *>(smem);  // [8 warps][kBN]
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float v = acc[nb][x] + acc[nb][2 + x];
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (g == 0) part[warp * kBN + nb * 8 + 2 * t + x] = v;
    }
  __syncthreads();
  if (tid < kBN && n0 + tid < p.Lk) {
    float v = part[tid];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) v += part[w * kBN + tid];
    base[n0 + tid] = E::from_float(v);
  }
#endif
}

}  // namespace fa_cuda

#endif
