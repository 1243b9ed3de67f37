// Tensor-core dQ on its own for Hopper (sm_90a), the deterministic mode's
// second kernel: bwd_dq_kernel.cuh on wgmma, laid out like the wgmma
// forward. A block is two warpgroups of 64 query rows; per key tile of kBN:
//   S = Q K^T, dP = dO V^T    wgmma ss (Q, dO rows and K, V tiles from
//                             shared memory, all K-major)
//   dS                        bwd_tile.cuh, in registers
//   dQ += dS K                wgmma rs (dS as A fragments, K N-major)
// Each dQ element has one writer and a fixed summation order (key tiles in
// order), so the bits are the same on every run.
// K and V tiles are double-buffered (tile it + 1 copied under tile it's
// products), but at D = 256 two slots of each do not fit beside Q and dO
// (263 KiB): there V has one slot, refilled with tile it + 1 once both
// warpgroups' dP products of tile it are done (under dS and dQ += dS K).
#ifndef FA_CUDA_BWD_DQ_WGMMA_KERNEL_CUH
#define FA_CUDA_BWD_DQ_WGMMA_KERNEL_CUH

#include "bwd_tile.cuh"
#include "fwd_tile.cuh"
#include "score_global.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

// A warp's dS of one key tile into dBias at base (element (b, h, 0, 0)), the
// thread's rows i0, i0 + 8 and columns n0 + 8 nb + 2 t, + 1: those under
// lq rows and lk columns.
template <typename E, int kNB>
__device__ __forceinline__ void bwd_store_dbias(const fa__cuda_params &p, typename E::storage *base, int64_t lq,
                                                int64_t lk, int64_t i0, int64_t n0, const float (&s)[kNB][4], int t) {
  using T = typename E::storage;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + 8 * r;
    if (i >= lq) continue;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      const int64_t j = n0 + nb * 8 + 2 * t;  // even
      T *e = base + i * p.dbias_s[2] + j;     // (dbias_s[3] is 1)
      if (p.dbias_pairs && j + 1 < lk) {
        *reinterpret_cast<uint32_t *>(e) = E::pack(s[nb][2 * r], s[nb][2 * r + 1]);
        continue;
      }
#pragma unroll
      for (int x = 0; x < 2; ++x)
        if (j + x < lk) e[x] = E::from_float(s[nb][2 * r + x]);
    }
  }
}

// S = Q K^T and dP = dO V^T of a warpgroup's 64 query rows against kBN keys,
// every operand K-major in shared memory in atoms of 64 columns (rows x 128
// bytes): Q and dO at q, dO (the warpgroup's rows of kBM-row tiles), K and
// V at k, v (byte addresses); issued, then waited for. kD / 16 steps of
// k16, 32 bytes on inside an atom.
template <typename E, int kD, int kBM, int kBN>
__device__ __forceinline__ void wgmma_s_dp(float (&s)[kBN / 8][4], float (&dp)[kBN / 8][4], uint32_t q, uint32_t k,
                                           uint32_t dO, uint32_t v) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t off_a = (kk >> 2) * (kBM * 128) + (kk & 3) * 32, off_b = (kk >> 2) * (kBN * 128) + (kk & 3) * 32;
    wgmma<E, kBN>::ss(s, sw128_desc_lo(q + off_a, 0), sw128_desc_lo(k + off_b, 0), kk > 0);
  }
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t off_a = (kk >> 2) * (kBM * 128) + (kk & 3) * 32, off_b = (kk >> 2) * (kBN * 128) + (kk & 3) * 32;
    wgmma<E, kBN>::ss(dp, sw128_desc_lo(dO + off_a, 0), sw128_desc_lo(v + off_b, 0), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(s);
  fence_regs(dp);
}

template <int kD, int kBN>
struct dq_wgmma_cfg {
  static constexpr int kBM = 128, kThreads = 256, kVSlots = kD > 128 ? 1 : 2;
  // Q, dO, two slots of K, kVSlots of V; 1 KiB to align the tiles to 1024 bytes
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(2 * kBM * kD + (2 + kVSlots) * kBN * kD) + 1024;
};

// kFull: every per-element option (bwd_ds_rows); kArith (not with kFull):
// softcap and ALiBi only, p.arith_only (bwd_ds_rows_arith), and with kTile
// (FA_CUDA_TILE_BIAS, _MASK: p.bwd_tile) one bias or mask too, read from
// global memory (score_global.cuh); neither: the band. kDBias (with kArith
// and a bias): dBias instead of dQ, each tile's dS (without the softcap's
// derivative) stored into p.dbias, whose elements outside the tiles the band
// lets a block see the caller has zeroed. kDrop (with kArith, with or
// without kTile, not kDBias): dropout too (p.arith_drop, or p.bwd_tile with
// p.has_dropout; dropout_tile.cuh's keep bits).
template <typename E, int kD, int kBN, bool kFull, bool kArith = false, int kTile = 0, bool kDBias = false,
          bool kDrop = false>
__global__ void __launch_bounds__(256, 1) bwd_dq_wgmma_kernel(const fa__cuda_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = dq_wgmma_cfg<kD, kBN>;
  static_assert(!kDrop || (kArith && !kDBias), "the keep bits go with the arithmetic form, without dBias");
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads, kVSlots = cfg::kVSlots;
  constexpr int kNB = kBN / 8, kDB = kD / 8;
  static_assert(kD % 64 == 0 && kBN % 64 == 0, "wgmma tiles are whole 64-column atoms");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  T *sQ = reinterpret_cast<T *>(smem);  // [kD / 64][kBM][64]
  T *sdO = sQ + kBM * kD;               // [kD / 64][kBM][64]
  T *sK = sdO + kBM * kD;               // [2][kD / 64][kBN][64]
  T *sV = sK + 2 * kBN * kD;            // [kVSlots][kD / 64][kBN][64]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  fwd_block fb;  // the same rows / key tiles as the forward's blocks
  if (!fwd_block_init<kBM, kBN>(p, &fb)) return;
  const seq_ctx &c = fb.c;
  const int64_t m0 = fb.m0, h = fb.h;

  const int64_t row0 = c.seq.q_row0 + m0;
  const T *gq = static_cast<const T *>(p.q) + c.seq.bidx * p.qs.b + h * p.qs.h + row0 * p.qs.r;
  const T *gdo = static_cast<const T *>(p.dout) + c.seq.bidx * p.dos.b + h * p.dos.h + row0 * p.dos.r;
  const T *gk = static_cast<const T *>(p.k) + c.seq.bidx * p.ks.b + fb.kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const T *gv = static_cast<const T *>(p.v) + c.seq.bidx * p.vs.b + fb.kvh * p.vs.h + c.seq.k_row0 * p.vs.r;
  const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
  load_tile<kBM, kD, kThreads, true>(sQ, gq, p.qs.r, q_valid, p.D, p.q, tid);
  load_tile<kBM, kD, kThreads, true>(sdO, gdo, p.dos.r, q_valid, p.Dv, p.dout, tid);
  auto tile_rows = [&](int it, int64_t *n0) {
    *n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    return static_cast<int>(c.seq.lk - *n0 < kBN ? c.seq.lk - *n0 : kBN);
  };
  auto load_k = [&](int it, int slot) {
    int64_t n0;
    const int valid = tile_rows(it, &n0);
    load_tile<kBN, kD, kThreads, true>(sK + slot * kBN * kD, gk + n0 * p.ks.r, p.ks.r, valid, p.D, p.k, tid);
  };
  auto load_v = [&](int it, int slot) {
    int64_t n0;
    const int valid = tile_rows(it, &n0);
    load_tile<kBN, kD, kThreads, true>(sV + slot * kBN * kD, gv + n0 * p.vs.r, p.vs.r, valid, p.Dv, p.v, tid);
  };
  if (fb.n_tiles > 0) {
    load_k(0, 0);
    load_v(0, 0);
  }
  cp_async_commit();

  const int wrow = warp * 16;  // = 64 wg + 16 (warp % 4): this warp's rows in the block
  float lse2[2], dsum[2];
  bwd_row_stats(p, c, h, m0 + wrow + g, lse2, dsum);
  float dq[kDB][4];
#pragma unroll
  for (int db = 0; db < kDB; ++db) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.f;

  // Byte addresses; an atom of 64 columns is rows x 128 bytes.
  const uint32_t q_base = smem_addr(sQ) + wg * 64 * 128, do_base = smem_addr(sdO) + wg * 64 * 128;
  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  constexpr uint32_t kSlot = kBN * kD * 2;

  for (int it = 0; it < fb.n_tiles; ++it) {
    const int slot = it & 1;
    cp_async_wait<0>();  // tile it (and Q, dO) landed; every warpgroup is done with tile it - 1
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < fb.n_tiles) {
      load_k(it + 1, slot ^ 1);
      if (kVSlots == 2) load_v(it + 1, slot ^ 1);
    }
    cp_async_commit();
    const uint32_t v_slot = v_base + (kVSlots == 2 ? slot * kSlot : 0);

    float s[kNB][4], dp[kNB][4];
    wgmma_s_dp<E, kD, kBM, kBN>(s, dp, q_base, k_base + slot * kSlot, do_base, v_slot);
    if (kVSlots == 1) {  // both warpgroups' dP read V: its one slot takes the next tile
      __syncthreads();
      if (it + 1 < fb.n_tiles) load_v(it + 1, 0);
      cp_async_commit();
    }

    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    if constexpr (kDBias) {
      static_assert(kArith && kTile == FA_CUDA_TILE_BIAS, "dBias needs the bias reader");
      bwd_ds_rows_arith<true>(p, c.bd, arith_score(p, alibi_slope(p, h)), s, dp, lse2, dsum, m0 + wrow, n0, g, t,
                              global_score_tile_of<T, kTile>(p, c.seq, c.b, h, m0 + wrow, n0));
      bwd_store_dbias<E>(p, static_cast<T *>(p.dbias) + c.b * p.dbias_s[0] + h * p.dbias_s[1], c.seq.lq, c.seq.lk,
                         m0 + wrow + g, n0, s, t);
      continue;
    }
    if constexpr (kArith && kTile != 0 && kDrop)
      bwd_ds_rows_arith(p, c.bd, arith_score(p, alibi_slope(p, h)), s, dp, lse2, dsum, m0 + wrow, n0, g, t,
                        global_score_tile_of<T, kTile>(p, c.seq, c.b, h, m0 + wrow, n0),
                        rows_keep_bits<kNB>(p, c.bh, m0 + wrow, n0, g, t));
    else if constexpr (kArith && kTile != 0)
      bwd_ds_rows_arith(p, c.bd, arith_score(p, alibi_slope(p, h)), s, dp, lse2, dsum, m0 + wrow, n0, g, t,
                        global_score_tile_of<T, kTile>(p, c.seq, c.b, h, m0 + wrow, n0));
    else if constexpr (kArith && kDrop)
      bwd_ds_rows_arith(p, c.bd, arith_score(p, alibi_slope(p, h)), s, dp, lse2, dsum, m0 + wrow, n0, g, t,
                        no_score_tile{}, rows_keep_bits<kNB>(p, c.bh, m0 + wrow, n0, g, t));
    else if constexpr (kArith)
      bwd_ds_rows_arith(p, c.bd, arith_score(p, alibi_slope(p, h)), s, dp, lse2, dsum, m0 + wrow, n0, g, t);
    else
      bwd_ds_rows<kFull>(p, c, s, dp, lse2, dsum, m0 + wrow, n0, g, t);

    // dQ += dS K: kBN / 16 steps of 16 keys = 16 rows of 128 bytes
    uint32_t a[kBN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) c_to_a_frag<E>(a[kk], s[2 * kk], s[2 * kk + 1]);
    fence_regs(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma<E, kD>::template rs<1>(dq, a[kk], sw128_desc_lo(k_base + slot * kSlot + kk * 16 * 128, kBN * 128), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(dq);
  }
  cp_async_wait<0>();
  if constexpr (kDBias) return;

  T *gdq = static_cast<T *>(p.dq) + c.seq.bidx * p.dqs.b + h * p.dqs.h + c.seq.q_row0 * p.dqs.r;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = m0 + wrow + g + r * 8;
    if (i >= fb.rows) continue;
#pragma unroll
    for (int db = 0; db < kDB; ++db) {
      const int d = db * 8 + 2 * t;
      if (d < p.D)
        *reinterpret_cast<uint32_t *>(gdq + i * p.dqs.r + d) =
            E::pack(dq[db][2 * r] * p.scale, dq[db][2 * r + 1] * p.scale);
    }
  }
#endif
}

}  // namespace fa_cuda

#endif
