// Tensor-core forward for Hopper (sm_90a): the FlashAttention-2 loop of
// fwd_kernel.cuh with both products on wgmma. A block is kWG warpgroups of
// 128 threads, each owning 64 query rows (16 per warp, so the softmax of a
// row stays inside one quad of lanes, exactly as in the mma.sync kernel and
// with the same per-tile code, fwd_tile.cuh). Per key tile:
//   S  = Q K^T   wgmma ss: Q and K from shared memory (both K-major)
//   softmax      on the S accumulators in registers
//   O += P V     wgmma rs: P from registers (the S accumulator layout is the
//                A fragment layout), V from shared memory (N-major)
// A warpgroup's 64 x kBN S and 64 x kD O take kBN / 2 + kD / 2 registers per
// thread, a quarter of what one warp's 16 x ... share costs with mma.sync,
// which is what lets the tiles grow to 128 keys with all warps busy.
// K / V tiles stream through a two-stage cp.async buffer in the 128-byte
// swizzled layout wgmma reads (swz_atoms), one tile ahead of the math.
#ifndef FA_CUDA_FWD_WGMMA_KERNEL_CUH
#define FA_CUDA_FWD_WGMMA_KERNEL_CUH

#include "fwd_tile.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kWG, int kBN>
struct fwd_wgmma_cfg {
  static constexpr int kBM = 64 * kWG;
  static constexpr int kThreads = 128 * kWG;
  // Q, two stages of K and V, and 1 KiB to align the tiles to 1024 bytes
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(kBM * kD + 4 * kBN * kD) + 1024;
};

template <typename E, int kD, int kWG, int kBN, bool kFull>
__global__ void __launch_bounds__(128 * kWG, 1) fwd_wgmma_kernel(const fa__cuda_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = fwd_wgmma_cfg<kD, kWG, kBN>;
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kNB = kBN / 8, kDB = kD / 8;
  static_assert(kD % 64 == 0 && kBN % 64 == 0, "wgmma tiles are whole 64-column atoms");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  T *sQ = reinterpret_cast<T *>(smem);  // [kD / 64][kBM][64]
  T *sK = sQ + kBM * kD;                // [2][kD / 64][kBN][64]
  T *sV = sK + 2 * kBN * kD;            // [2][kD / 64][kBN][64]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  fwd_block fb;
  if (!fwd_block_init<kBM, kBN>(p, &fb)) return;
  const seq_ctx &c = fb.c;
  const int64_t m0 = fb.m0;

  const T *gq = static_cast<const T *>(p.q) + c.seq.bidx * p.qs.b + fb.h * p.qs.h + (c.seq.q_row0 + m0) * p.qs.r;
  const T *gk = static_cast<const T *>(p.k) + c.seq.bidx * p.ks.b + fb.kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const T *gv = static_cast<const T *>(p.v) + c.seq.bidx * p.vs.b + fb.kvh * p.vs.h + c.seq.k_row0 * p.vs.r;

  const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
  load_tile<kBM, kD, kThreads, true>(sQ, gq, p.qs.r, q_valid, p.D, p.q, tid);
  auto load_kv = [&](int it, int stage) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    const int valid = static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
    load_tile<kBN, kD, kThreads, true>(sK + stage * kBN * kD, gk + n0 * p.ks.r, p.ks.r, valid, p.D, p.k, tid);
    load_tile<kBN, kD, kThreads, true>(sV + stage * kBN * kD, gv + n0 * p.vs.r, p.vs.r, valid, p.Dv, p.v, tid);
  };
  if (fb.n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  float o[1][kDB][4];
#pragma unroll
  for (int db = 0; db < kDB; ++db) o[0][db][0] = o[0][db][1] = o[0][db][2] = o[0][db][3] = 0.f;
  float row_m[1][2] = {{-INFINITY, -INFINITY}}, row_l[1][2] = {{0.f, 0.f}};
  const int wrow = warp * 16;  // = 64 wg + 16 (warp % 4): this warp's rows in the block

  // Byte addresses of this warpgroup's Q rows and of the K / V stages; an
  // atom of 64 columns is rows x 128 bytes.
  const uint32_t q_base = smem_addr(sQ) + wg * 64 * 128;
  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  constexpr uint32_t kStage = kBN * kD * 2;

  for (int it = 0; it < fb.n_tiles; ++it) {
    const int stage = it & 1;
    cp_async_wait<0>();  // tile it (and Q) landed; every warp is done with tile it - 1
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < fb.n_tiles) load_kv(it + 1, stage ^ 1);
    cp_async_commit();

    // S = Q K^T: kD / 16 steps of k16; a step inside an atom is 32 bytes on
    float s[1][kNB][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t in_atom = (kk & 3) * 32;
      const uint64_t da = sw128_desc(q_base + (kk >> 2) * (kBM * 128) + in_atom, 0);
      const uint64_t db = sw128_desc(k_base + stage * kStage + (kk >> 2) * (kBN * 128) + in_atom, 0);
      wgmma<E, kBN>::ss(s[0], da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s[0]);

    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    fwd_scores<kFull>(p, c, s, m0 + wrow, n0, g, t);
    fwd_softmax<kFull>(p, c, s, o, row_m, row_l, m0 + wrow, n0, g, t);

    // O += P V: kBN / 16 steps of 16 keys = 16 rows of 128 bytes
    uint32_t pa[kBN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) fwd_p_frag<E>(pa[kk], s[0], kk);
    fence_regs(o[0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint64_t db = sw128_desc(v_base + stage * kStage + kk * 16 * 128, kBN * 128);
      wgmma<E, kD>::rs(o[0], pa[kk], db, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o[0]);
  }
  cp_async_wait<0>();
  fwd_store<E>(p, fb, o, row_m, row_l, m0 + wrow, g, t);
#endif
}

}  // namespace fa_cuda

#endif
