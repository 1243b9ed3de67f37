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
// K / V tiles stream through two-slot cp.async buffers in the 128-byte
// swizzled layout wgmma reads (swz_atoms), and the softmax of one tile
// overlaps P V of the one before (see the loop).
#ifndef FA_CUDA_FWD_WGMMA_KERNEL_CUH
#define FA_CUDA_FWD_WGMMA_KERNEL_CUH

#include "fwd_tile.cuh"
#include "fwd_wgmma_step.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kWG, int kBN, int kSlots>
struct fwd_wgmma_cfg {
  static constexpr int kBM = 64 * kWG;
  static constexpr int kThreads = 128 * kWG;
  // Q, kSlots tiles each of K and V, and 1 KiB to align them to 1024 bytes
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(kBM * kD + 2 * kSlots * kBN * kD) + 1024;
};

// kPipe: the software-pipelined loop (else one tile at a time); kSkip:
// warpgroups skip the key tiles outside their rows' band (one-tile-at-a-time
// loop only; the branch costs ~6% at D = 64 when there is no band to skip).
template <typename E, int kD, int kWG, int kBN, int kSlots, bool kPipe, bool kFull, bool kSkip>
__global__ void __launch_bounds__(128 * kWG, 1) fwd_wgmma_kernel(const fa__cuda_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename E::storage;
  using cfg = fwd_wgmma_cfg<kD, kWG, kBN, kSlots>;
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kNB = kBN / 8, kDB = kD / 8;
  static_assert(kD % 64 == 0 && kBN % 64 == 0, "wgmma tiles are whole 64-column atoms");
  static_assert(kSlots == 2 || (kSlots == 3 && !kPipe), "the pipelined loop double-buffers K and V");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  T *sQ = reinterpret_cast<T *>(smem);  // [kD / 64][kBM][64]
  T *sK = sQ + kBM * kD;                // [kSlots][kD / 64][kBN][64]
  T *sV = sK + kSlots * kBN * kD;       // [kSlots][kD / 64][kBN][64]

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
  auto tile_rows = [&](int it) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    return static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
  };
  auto load_k = [&](int it, int slot) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    load_tile<kBN, kD, kThreads, true>(sK + slot * kBN * kD, gk + n0 * p.ks.r, p.ks.r, tile_rows(it), p.D, p.k, tid);
  };
  auto load_v = [&](int it, int slot) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    load_tile<kBN, kD, kThreads, true>(sV + slot * kBN * kD, gv + n0 * p.vs.r, p.vs.r, tile_rows(it), p.Dv, p.v, tid);
  };

  float o[1][kDB][4];
#pragma unroll
  for (int db = 0; db < kDB; ++db) o[0][db][0] = o[0][db][1] = o[0][db][2] = o[0][db][3] = 0.f;
  float row_m[1][2] = {{-INFINITY, -INFINITY}}, row_l[1][2] = {{0.f, 0.f}}, alpha[1][2];
  const int wrow = warp * 16;  // = 64 wg + 16 (warp % 4): this warp's rows in the block

  // Byte addresses of this warpgroup's Q rows and of the K / V slots; an
  // atom of 64 columns is rows x 128 bytes.
  const uint32_t q_base = smem_addr(sQ) + wg * 64 * 128;
  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  constexpr uint32_t kSlot = kBN * kD * 2;

  float s[1][kNB][4];        // S of the next tile, then its P in f32
  uint32_t pa[kBN / 16][4];  // P of the current tile as A fragments
  // S = Q K^T of tile it (K in slot it % kSlots), one wgmma group
  auto s_issue = [&](int it) { wgmma_qk<E, kD, kBM, kBN>(s[0], q_base, k_base + (it % kSlots) * kSlot); };
  // Once S of tile it is in: scores and softmax (P in s, alpha for O).
  auto s_softmax = [&](int it) {
    fence_regs(s[0]);
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    fwd_scores<kFull, false, true>(p, c, s, m0 + wrow, n0, g, t);
    fwd_softmax<kFull>(p, c, s, alpha, row_m, row_l, m0 + wrow, n0, g, t);
  };
  auto p_to_frags = [&]() { wgmma_p_frags<E, kBN>(pa, s[0]); };

  auto tile_ready = [&]() {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
  };
  // O += P V of tile it (V in slot it % kSlots), one wgmma group
  auto pv_issue = [&](int it) { wgmma_pv<E, kD, kBN>(o[0], pa, v_base + (it % kSlots) * kSlot); };

  if constexpr (kPipe) {
    // Software pipeline (FlashAttention-3's intra-warpgroup overlap): the
    // softmax of tile it + 1 runs on the CUDA cores while the tensor cores
    // do P V of tile it. K and V have two slots each: K of tile it + 2 may
    // load as soon as S of tile it is done, V of tile it + 1 once P V of
    // tile it - 1 is; each load has a whole iteration to land.
    if (fb.n_tiles > 0) {
      load_k(0, 0);
      load_v(0, 0);
      if (fb.n_tiles > 1) load_k(1, 1);
    }
    cp_async_commit();
    if (fb.n_tiles > 0) {
      tile_ready();
      wgmma_fence();
      s_issue(0);
      wgmma_wait<0>();
      s_softmax(0);
      fwd_rescale(o, alpha);
      p_to_frags();
    }
    // Every tile but the last: S of it + 1 with P V of it. (The last is
    // peeled off so that every wait is unconditional: ptxas serializes all
    // wgmma when it cannot prove an accumulator is read only after its wait.)
    for (int it = 0; it + 1 < fb.n_tiles; ++it) {
      tile_ready();  // K of it + 1, V of it landed; all are done with K of it, V of it - 1
      if (it + 2 < fb.n_tiles) load_k(it + 2, it & 1);
      load_v(it + 1, (it + 1) & 1);
      cp_async_commit();
      wgmma_fwd_pipe_step(
          it, s_issue, pv_issue, [] {}, s_softmax, p_to_frags, o, alpha);
    }
    if (fb.n_tiles > 0) {
      tile_ready();
      wgmma_fence();
      pv_issue(fb.n_tiles - 1);
      wgmma_wait<0>();
      fence_regs(o[0]);
    }
  } else {
    // One tile at a time, K and V of the next tile loading meanwhile: S,
    // softmax, P V. Fewer live registers (no S beside P). A warpgroup skips
    // the tiles its own 64 rows cannot see (below a causal diagonal, outside
    // a window, rows past the end): the block's tiles cover the union of its
    // warpgroups' bands, and a skipped tile would add exactly P = 0.
    int it_lo = 0, it_hi = 0;  // this warpgroup's tiles: [it_lo, it_hi)
    if (kSkip) fwd_wg_tiles<kBN>(fb, m0 + wg * 64, &it_lo, &it_hi);
      // With kSlots = 3 the loads run two tiles ahead of the math.
#pragma unroll
    for (int i = 0; i < kSlots - 1; ++i) {
      if (i < fb.n_tiles) {
        load_k(i, i);
        load_v(i, i);
      }
      cp_async_commit();
    }
    for (int it = 0; it < fb.n_tiles; ++it) {
      cp_async_wait<kSlots - 2>();  // tile it landed
      fence_proxy_async();
      __syncthreads();  // ... for every thread; and all are done with tile it - 1
      const int ahead = it + kSlots - 1;
      if (ahead < fb.n_tiles) {
        load_k(ahead, ahead % kSlots);
        load_v(ahead, ahead % kSlots);
      }
      cp_async_commit();
      if (kSkip && (it < it_lo || it >= it_hi)) continue;  // uniform over the warpgroup
      wgmma_fwd_step(it, s_issue, s_softmax, p_to_frags, pv_issue, o, alpha);
    }
  }
  cp_async_wait<0>();
  if constexpr (kSkip || kPipe) {
    fwd_store<E>(p, fb, o, row_m, row_l, m0 + wrow, g, t);
  } else {
    // The block's bookkeeping recomputed rather than kept live across the
    // loop: ptxas -v on the D = 64 kernel, 3 warpgroups at 168 registers,
    // goes from 64 bytes of spills in the loop to none (152 registers).
    fwd_block fb_out;
    fwd_block_init<kBM, kBN>(p, &fb_out);
    fwd_store<E>(p, fb_out, o, row_m, row_l, fb_out.m0 + wrow, g, t);
  }
#endif
}

}  // namespace fa_cuda

#endif
