// Tensor-core backward, dQ on its own (the deterministic mode). A block owns
// kBM = 16 * kWarps query rows, like the forward, and walks the key tiles in
// order: S = Q K^T, dP = dO V^T, dS = P * (dP - Dsum), dQ += dS K with dQ in
// registers. Each dQ element has one writer and a fixed summation order, so
// the bits are the same on every run; the price is recomputing S and dP,
// which the dK/dV kernel computes too.
#ifndef FA_CUDA_BWD_DQ_KERNEL_CUH
#define FA_CUDA_BWD_DQ_KERNEL_CUH

#include "bwd_kernel.cuh"
#include "mma.cuh"
#include "rules.cuh"

namespace fa_cuda {

template <int kD, int kWarps, int kBN>
struct dq_cfg {
  static constexpr int kBM = 16 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(2 * kBM * kD + 4 * kBN * kD);
};

template <typename E, int kD, int kWarps, int kBN, bool kFull>
__global__ void __launch_bounds__(32 * kWarps) bwd_dq_kernel(const fa__cuda_params p) {
  using T = typename E::storage;
  using cfg = dq_cfg<kD, kWarps, kBN>;
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kNB = kBN / 8, kDB = kD / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  T *sQ = reinterpret_cast<T *>(smem);  // [kBM][kD]
  T *sdO = sQ + kBM * kD;               // [kBM][kD]
  T *sK = sdO + kBM * kD;               // [2][kBN][kD]
  T *sV = sK + 2 * kBN * kD;            // [2][kBN][kD]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int64_t bh, tile;
  tile_major_block(&bh, &tile);
  const int64_t b = bh / p.Hq, h = bh % p.Hq, kvh = h / p.group;
  const seq_ctx c = make_seq_ctx(p, b, h);
  const int64_t rows = p.varlen ? c.seq.lq : p.Lq;
  const int64_t m0 = static_cast<int64_t>(gridDim.y - 1 - tile) * kBM;
  if (m0 >= rows) return;

  int64_t j0, j1;
  fa__band_cols(&c.bd, m0, m0 + kBM, &j0, &j1);
  const int nb_lo = static_cast<int>(j0 / kBN);
  const int n_tiles = j1 > j0 ? static_cast<int>((j1 + kBN - 1) / kBN) - nb_lo : 0;

  const int64_t row0 = c.seq.q_row0 + m0;
  const T *gq = static_cast<const T *>(p.q) + c.seq.bidx * p.qs.b + h * p.qs.h + row0 * p.qs.r;
  const T *gdo = static_cast<const T *>(p.dout) + c.seq.bidx * p.dos.b + h * p.dos.h + row0 * p.dos.r;
  const T *gk = static_cast<const T *>(p.k) + c.seq.bidx * p.ks.b + kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const T *gv = static_cast<const T *>(p.v) + c.seq.bidx * p.vs.b + kvh * p.vs.h + c.seq.k_row0 * p.vs.r;
  const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
  load_tile<kBM, kD, kThreads>(sQ, gq, p.qs.r, q_valid, p.D, p.q, tid);
  load_tile<kBM, kD, kThreads>(sdO, gdo, p.dos.r, q_valid, p.Dv, p.dout, tid);
  auto load_kv = [&](int it, int stage) {
    const int64_t n0 = static_cast<int64_t>(nb_lo + it) * kBN;
    const int valid = static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
    load_tile<kBN, kD, kThreads>(sK + stage * kBN * kD, gk + n0 * p.ks.r, p.ks.r, valid, p.D, p.k, tid);
    load_tile<kBN, kD, kThreads>(sV + stage * kBN * kD, gv + n0 * p.vs.r, p.vs.r, valid, p.Dv, p.v, tid);
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  const int wrow = warp * 16;
  const int64_t i_base = m0 + wrow + g;
  float lse2[2], dsum[2];
  bwd_row_stats(p, c, h, i_base, lse2, dsum);
  float dq[kDB][4];
#pragma unroll
  for (int db = 0; db < kDB; ++db) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.f;

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    if (it + 1 < n_tiles) load_kv(it + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T *k_s = sK + stage * kBN * kD;
    const T *v_s = sV + stage * kBN * kD;

    float s[kNB][4], dp[kNB][4];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t aq[4], ado[4];
      lds_a<kD>(aq, sQ, wrow, kk * 16, lane);
      lds_a<kD>(ado, sdO, wrow, kk * 16, lane);
#pragma unroll
      for (int nb2 = 0; nb2 < kNB / 2; ++nb2) {
        uint32_t bf[4];
        lds_b_nk<kD>(bf, k_s, nb2 * 16, kk * 16, lane);
        E::mma(s[2 * nb2], aq, bf[0], bf[1]);
        E::mma(s[2 * nb2 + 1], aq, bf[2], bf[3]);
        lds_b_nk<kD>(bf, v_s, nb2 * 16, kk * 16, lane);
        E::mma(dp[2 * nb2], ado, bf[0], bf[1]);
        E::mma(dp[2 * nb2 + 1], ado, bf[2], bf[3]);
      }
    }

    const int64_t n0 = static_cast<int64_t>(nb_lo + it) * kBN;
    bwd_ds_rows<kFull>(p, c, s, dp, lse2, dsum, m0 + wrow, n0, g, t);

    // dQ += dS K
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[4];
      c_to_a_frag<E>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int db2 = 0; db2 < kDB / 2; ++db2) {
        uint32_t bf[4];
        lds_b_kn<kD>(bf, k_s, kk * 16, db2 * 16, lane);
        E::mma(dq[2 * db2], a, bf[0], bf[1]);
        E::mma(dq[2 * db2 + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  T *gdq = static_cast<T *>(p.dq) + c.seq.bidx * p.dqs.b + h * p.dqs.h + c.seq.q_row0 * p.dqs.r;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i_base + r * 8;
    if (i >= rows) continue;
#pragma unroll
    for (int db = 0; db < kDB; ++db) {
      const int d = db * 8 + 2 * t;
      if (d < p.D)
        *reinterpret_cast<uint32_t *>(gdq + i * p.dqs.r + d) =
            E::pack(dq[db][2 * r] * p.scale, dq[db][2 * r + 1] * p.scale);
    }
  }
}

}  // namespace fa_cuda

#endif
