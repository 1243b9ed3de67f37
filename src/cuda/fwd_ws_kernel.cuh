// Warp-specialized forward for Hopper (sm_90a), FlashAttention 3's structure:
// a block is one producer warpgroup and kCWG (2 or 3) consumer warpgroups of
// 64 query rows each, and stays resident (one block per multiprocessor),
// taking work tiles of 64 kCWG query rows of one (sequence, head) in turn: tile w of
// B * Hq * row-tiles (fwd_ws_block's order), blocks striding by the grid.
//   producer   one thread issues the bulk tensor copies (TMA, tma.cuh): Q of
//              each work tile into one buffer (refilled once the consumers
//              have issued their last S = Q K^T of the tile before), K and V
//              tile by tile into a ring of kStages slots, each slot guarded
//              by a full and an empty barrier. The next tile's Q and first
//              K / V land while the consumers finish the tile before; its
//              warpgroup gives most of its registers to the consumers.
//   consumers  the loop of fwd_wgmma_kernel's pipelined variant (S of tile
//              it + 1 and P V of tile it issued together, the softmax of
//              it + 1 under P V), waiting on barriers instead of a block-wide
//              __syncthreads, and taking turns: a scheduler barrier lets the
//              warpgroups issue their products in turn, so that one's
//              softmax runs while another's products keep the tensor
//              cores busy.
// Scores, softmax, rescale and epilogue are fwd_tile.cuh's, as in the other
// forward kernels, the scale folded into the exponent (kFold). Band-only
// options (causal, window, lengths: seqlens and packed sequences too) and a
// positive scale (kScoreBand); with kScoreArith the arithmetic options too
// (softcap, ALiBi: score_arith.cuh, the scale applied before the softcap, so
// any scale; with kScoreDrop also dropout: P's dropped elements zeroed
// after the row sums, dropout_tile.cuh's keep bits); with kScoreTile
// also one bias or mask, which the producer
// copies tile by tile (kBM rows x kBN keys, or one row where the tensor is
// the same for every row) into a ring of two slots of its own, read by the
// consumers' scoring (score_tile.cuh), so that S need not wait for it;
// launch_fwd_wgmma.cuh decides. A mask's box is 128 keys (one 128-byte row
// of the swizzle): with 64-key tiles (D = 256) one box serves a pair of
// tiles (even, odd), copied at the pair's first tile of the block and
// released after its last.
#ifndef FA_CUDA_FWD_WS_KERNEL_CUH
#define FA_CUDA_FWD_WS_KERNEL_CUH

#include "dropout_tile.cuh"
#include "fwd_tile.cuh"
#include "fwd_wgmma_step.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kBN, int kStages, int kCWG, int kScore = kScoreBand>
struct fwd_ws_cfg {
  static constexpr int kBM = 64 * kCWG, kThreads = 128 * (kCWG + 1), kConsumers = 128 * kCWG;
  // setmaxnreg shares: the producer's 24 and the consumers' within the
  // 64 Ki registers of the multiprocessor (128 x 24 + 256 x 240, or
  // 128 x 24 + 384 x 160)
  static constexpr int kProducerRegs = 24, kConsumerRegs = kCWG == 2 ? 240 : 160;
  static constexpr uint32_t kQBytes = kBM * kD * 2, kTileBytes = kBN * kD * 2;
  // kScoreTile: a slot of the bias / mask ring holds kBM rows of kBN 16-bit
  // elements (a mask's bytes take half), in atoms of 64 columns. Two slots
  // whatever kStages (three would not fit beside D = 64's three K/V slots).
  static constexpr int kXSlots = score_has_tile(kScore) ? 2 : 0;
  static constexpr uint32_t kXAtomBytes = kBM * 128, kXBytes = kBN / 64 * kXAtomBytes;
  // Q, the K and V rings, the bias / mask ring, the barriers, and 1 KiB to
  // align the tiles to 1024 bytes (the swizzle pattern's period).
  static constexpr size_t smem_bytes = kQBytes + 2 * kStages * (size_t)kTileBytes + kXSlots * (size_t)kXBytes +
                                       8 * (2 + 4 * kStages + 2 * kXSlots) + 1024;
};

// Named barriers of the consumers' turn-taking, 1 ... kCWG (0 is
// __syncthreads'), then the one closing their zeroing of V rows.
constexpr int kWsTurn0 = 1;

// Work tile w of the persistent grid, in one of two orders:
//   heads_inner  row tiles from the last (the causal band's heaviest) across
//                all sequence-heads: every round of the grid takes tiles of
//                about the same cost, so a causal band stays balanced
//                across the blocks (a static round robin cannot balance the
//                other order: with 132 blocks and 11 or 22 row tiles a head,
//                each block got the same row tile of every head, 0.44x
//                cuDNN at D = 64, L = 2048, causal);
//   else         the row tiles of one sequence-head side by side, heaviest
//                first, so that the tiles in flight share a few heads' K and
//                V in L2 (grid_order.cuh says why): at D = 128 without a
//                band 464 -> 572 TFLOP/s at L = 2048 on the H200, but D = 64
//                lost 20% (bench/results/2026-12-01-h200-ws-bwd.txt).
template <int kBM, int kBN>
__device__ __forceinline__ bool fwd_ws_block(const fa__cuda_params &p, int64_t w, int64_t row_tiles, bool heads_inner,
                                             fwd_block *fb) {
  if (heads_inner) {
    const int64_t bh_count = p.B * p.Hq;
    return fwd_block_at<kBM, kBN>(p, w % bh_count, (row_tiles - 1 - w / bh_count) * kBM, fb);
  }
  return fwd_block_at<kBM, kBN>(p, w / row_tiles, (row_tiles - 1 - w % row_tiles) * kBM, fb);
}

template <typename E, int kD, int kBN, int kStages, int kCWG, int kScore>
__global__ void __launch_bounds__(128 * (kCWG + 1), 1)
    fwd_ws_kernel(const __grid_constant__ fa__cuda_params p, const __grid_constant__ CUtensorMap tq,
                  const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                  const __grid_constant__ CUtensorMap tx, int64_t row_tiles, bool heads_inner) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using cfg = fwd_ws_cfg<kD, kBN, kStages, kCWG, kScore>;
  constexpr bool kTile = score_has_tile(kScore);
  constexpr int kBM = cfg::kBM, kNB = kBN / 8, kDB = kD / 8, kAtoms = kD / 64;
  static_assert(kD % 64 == 0 && kBN % 16 == 0 && kBN <= 256, "wgmma tiles");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = smem_addr(smem_raw), pad = (1024 - (base & 1023)) & 1023;
  const uint32_t sq = base + pad;                      // [kAtoms][kBM][64]
  const uint32_t sk = sq + cfg::kQBytes;               // [kStages][kAtoms][kBN][64]
  const uint32_t sv = sk + kStages * cfg::kTileBytes;  // [kStages][kAtoms][kBN][64]
  const uint32_t sx = sv + kStages * cfg::kTileBytes;  // [kXSlots][kBN / 64][kBM][128 bytes]
  // full_q, empty_q, full_k[], full_v[], empty_k[], empty_v[], full_x[], empty_x[]
  const uint32_t bars = sx + cfg::kXSlots * cfg::kXBytes;
  const uint32_t full_q = bars, empty_q = bars + 8;
  auto full_k = [&](int s) { return bars + 8 * (2 + s); };
  auto full_v = [&](int s) { return bars + 8 * (2 + kStages + s); };
  auto empty_k = [&](int s) { return bars + 8 * (2 + 2 * kStages + s); };
  auto empty_v = [&](int s) { return bars + 8 * (2 + 3 * kStages + s); };
  auto full_x = [&](int s) { return bars + 8 * (2 + 4 * kStages + s); };
  auto empty_x = [&](int s) { return bars + 8 * (2 + 4 * kStages + cfg::kXSlots + s); };
  // the bias / mask tile (kTile): the same for every row (a box of one row)?
  const bool x_rows_bcast = p.tile_s[2] == 0;
  constexpr uint32_t kConsumerWarps = cfg::kConsumers / 32;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t works = p.B * p.Hq * row_tiles;

  if (tid == 0) {
    mbar_init(full_q, 1);
    mbar_init(empty_q, kConsumerWarps);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty_k(s), kConsumerWarps);
      mbar_init(empty_v(s), kConsumerWarps);
    }
    for (int s = 0; s < cfg::kXSlots; ++s) {
      mbar_init(full_x(s), 1);
      mbar_init(empty_x(s), kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp < 4) {
    // Producer warpgroup: one thread issues every copy; the rest leave.
    regs_dealloc<cfg::kProducerRegs>();
    if (warp == 0 && lane == 0) {
      tma_prefetch_map(&tq);
      tma_prefetch_map(&tk);
      tma_prefetch_map(&tv);
      if constexpr (kTile) tma_prefetch_map(&tx);
      int q_round = 0;  // work tiles with keys so far (uses of the Q buffer)
      int kv = 0;       // K / V tiles so far (uses of the ring)
      int xk = 0;       // bias / mask boxes so far (uses of their ring)
      for (int64_t w = blockIdx.x; w < works; w += gridDim.x) {
        fwd_block fb;
        if (!fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb) || fb.n_tiles == 0) continue;
        const int b = static_cast<int>(fb.c.seq.bidx), h = static_cast<int>(fb.h), kvh = static_cast<int>(fb.kvh);
        if (q_round > 0) mbar_wait(empty_q, (q_round - 1) & 1);
        mbar_expect_tx(full_q, cfg::kQBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a)
          tma_load_4d(sq + a * kBM * 128, &tq, a * 64, static_cast<int>(fb.c.seq.q_row0 + fb.m0), h, b, full_q);
        ++q_round;
        for (int it = 0; it < fb.n_tiles; ++it, ++kv) {
          const int s = kv % kStages, use = kv / kStages;
          const int n0 = static_cast<int>(fb.c.seq.k_row0) + (fb.nb_lo + it) * kBN;  // stored row
          if (use > 0) mbar_wait(empty_k(s), (use - 1) & 1);
          mbar_expect_tx(full_k(s), cfg::kTileBytes);
#pragma unroll
          for (int a = 0; a < kAtoms; ++a)
            tma_load_4d(sk + s * cfg::kTileBytes + a * kBN * 128, &tk, a * 64, n0, kvh, b, full_k(s));
          if (use > 0) mbar_wait(empty_v(s), (use - 1) & 1);
          mbar_expect_tx(full_v(s), cfg::kTileBytes);
#pragma unroll
          for (int a = 0; a < kAtoms; ++a)
            tma_load_4d(sv + s * cfg::kTileBytes + a * kBN * 128, &tv, a * 64, n0, kvh, b, full_v(s));
          if constexpr (kTile) {
            // (what follows read from the parameters each time: the producer
            // thread's 24 registers hold little beside its loop)
            const int tile = fb.nb_lo + it;
            const bool x_pair = kBN < 128 && p.fwd_tile == FA_CUDA_TILE_MASK;
            if (!x_pair || it == 0 || tile % 2 == 0) {
              // the bias / mask at the tile's rows and keys of the sequence
              // (logical coordinates; broadcast dims have extent 1)
              const int xs_slot = xk % cfg::kXSlots, xuse = xk / cfg::kXSlots;
              ++xk;
              if (xuse > 0) mbar_wait(empty_x(xs_slot), (xuse - 1) & 1);
              const bool x_mask = p.fwd_tile == FA_CUDA_TILE_MASK;
              const int x_cols = x_mask ? 128 : 64;  // a box's columns: one 128-byte row
              const int boxes = x_pair ? 1 : kBN / x_cols;
              const int xc = (x_pair ? tile & ~1 : tile) * kBN, xr = x_rows_bcast ? 0 : static_cast<int>(fb.m0);
              const int xh = p.tile_s[1] ? h : 0, xb = p.tile_s[0] ? static_cast<int>(fb.c.b) : 0;
              mbar_expect_tx(full_x(xs_slot), boxes * (x_rows_bcast ? 1 : kBM) * 128);
              for (int a = 0; a < boxes; ++a)
                tma_load_4d(sx + xs_slot * cfg::kXBytes + a * cfg::kXAtomBytes, &tx, xc + a * x_cols, xr, xh, xb,
                            full_x(xs_slot));
            }
          }
        }
      }
      // (No copy can still be landing when the block exits: the consumers
      // wait for every one.)
    }
  } else {
    regs_alloc<cfg::kConsumerRegs>();
    const int cw = warp - 4, wg = cw >> 2, g = lane >> 2, t = lane & 3;
    const int wrow = cw * 16;  // this warp's rows in the block
    const uint32_t q_base = sq + wg * 64 * 128;
    int q_round = 0, kv = 0, xk = 0;  // as the producer counts them
    // a mask box for a pair of 64-key tiles (above)
    const bool x_pair = kTile && kBN < 128 && p.fwd_tile == FA_CUDA_TILE_MASK;

    float o[1][kDB][4];
    float row_m[1][2], row_l[1][2], alpha[1][2];
    float s[1][kNB][4];        // S of the next tile, then its P in f32
    uint32_t pa[kBN / 16][4];  // P of the current tile as A fragments

    // Turn-taking: a warpgroup issues its products only in its turn, then
    // hands the turn to the next, round robin (each named barrier: its
    // warpgroup syncs, the one before arrives). Warpgroup 0 has the first turn.
    auto turn_wait = [&]() { named_sync(kWsTurn0 + wg, 256); };
    auto turn_pass = [&]() { named_arrive(kWsTurn0 + (wg + 1) % kCWG, 256); };
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    if (wg == kCWG - 1) named_arrive(kWsTurn0, 256);

    for (int64_t w = blockIdx.x; w < works; w += gridDim.x) {
      fwd_block fb;
      if (!fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb)) continue;
      const seq_ctx &c = fb.c;
      const int64_t m0 = fb.m0;
      const int n = fb.n_tiles;
      // keys of the sequence in its last tile, where zeros must stand for rows past them (below)
      const int v_rows =
          p.seqlens_k || p.cu_k ? static_cast<int>(c.seq.lk - static_cast<int64_t>(fb.nb_lo + n - 1) * kBN) : kBN;
#pragma unroll
      for (int db = 0; db < kDB; ++db) o[0][db][0] = o[0][db][1] = o[0][db][2] = o[0][db][3] = 0.f;
      row_m[0][0] = row_m[0][1] = -INFINITY;
      row_l[0][0] = row_l[0][1] = 0.f;

      auto slot = [&](int it) { return (kv + it) % kStages; };
      auto full_parity = [&](int it) { return static_cast<uint32_t>(((kv + it) / kStages) & 1); };
      auto s_issue = [&](int it) { wgmma_qk<E, kD, kBM, kBN>(s[0], q_base, sk + slot(it) * cfg::kTileBytes); };
      auto pv_issue = [&](int it) { wgmma_pv<E, kD, kBN>(o[0], pa, sv + slot(it) * cfg::kTileBytes); };
      // S of tile it is in: its K slot is free, and after the tile's last S
      // the Q buffer too.
      auto s_done = [&](int it) {
        release(empty_k(slot(it)));
        if (it == n - 1) release(empty_q);
      };
      auto s_softmax = [&](int it) {
        fence_regs(s[0]);
        const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
        if constexpr (kScore != kScoreBand) {
          const arith_score a(p, c.slope);
          auto scores = [&](const auto &x) {
            if (p.softcap > 0.f)
              fwd_scores_arith<true>(c, a, s, m0 + wrow, n0, g, t, x, wrow);
            else
              fwd_scores_arith<false>(c, a, s, m0 + wrow, n0, g, t, x, wrow);
          };
          if constexpr (kTile) {
            const int tile = fb.nb_lo + it;
            const int box = xk + (x_pair ? (it + (fb.nb_lo & 1)) / 2 : it), xslot = box % cfg::kXSlots;
            mbar_wait(full_x(xslot), (box / cfg::kXSlots) & 1);
            const uint32_t xb = sx + xslot * cfg::kXBytes;
            if (p.fwd_tile == FA_CUDA_TILE_MASK)
              scores(mask_score_tile{xb, x_rows_bcast, x_pair ? (tile & 1) * kBN : 0});
            else
              scores(bias_score_tile<E>{xb, cfg::kXAtomBytes, x_rows_bcast});
            if (!x_pair || it == n - 1 || tile % 2 == 1) {
              __syncwarp();  // the warp's reads of the slot are done: it may be refilled
              release(empty_x(xslot));
            }
          } else {
            scores(no_score_tile{});
          }
          fwd_softmax<false>(p, c, s, alpha, row_m, row_l, m0 + wrow, n0, g, t);
          if constexpr (score_has_drop(kScore)) fwd_drop(p, c.bh, s[0], m0 + wrow, n0, g, t);
        } else {
          fwd_scores<false, true>(p, c, s, m0 + wrow, n0, g, t);
          fwd_softmax<false, 0, true>(p, c, s, alpha, row_m, row_l, m0 + wrow, n0, g, t, p.scale_log2);
        }
      };
      auto p_to_frags = [&]() { wgmma_p_frags<E, kBN>(pa, s[0]); };

      if (n > 0) {
        mbar_wait(full_q, q_round & 1);
        mbar_wait(full_k(slot(0)), full_parity(0));
        turn_wait();
        wgmma_fence();
        s_issue(0);
        turn_pass();
        wgmma_wait<0>();
        s_done(0);
        s_softmax(0);
        p_to_frags();
        // Every tile but the last: S of it + 1 with P V of it (the last is
        // peeled off so that every wgmma wait is unconditional).
        for (int it = 0; it + 1 < n; ++it) {
          mbar_wait(full_k(slot(it + 1)), full_parity(it + 1));
          mbar_wait(full_v(slot(it)), full_parity(it));
          turn_wait();
          wgmma_fence();
          s_issue(it + 1);
          pv_issue(it);
          turn_pass();
          wgmma_wait<1>();  // S of it + 1 is in; P V of it may still run
          s_done(it + 1);
          s_softmax(it + 1);
          wgmma_wait<0>();
          release(empty_v(slot(it)));
          fence_regs(o[0]);
          fwd_rescale(o, alpha);
          p_to_frags();
        }
        mbar_wait(full_v(slot(n - 1)), full_parity(n - 1));
        // The last tile may run past the sequence's keys into rows of the
        // next sequence or of the padding (seqlens): P is 0 there, but 0 x
        // Inf or NaN is not, so those rows of V become zeros, as the cp.async
        // loads make them (past the tensor's end the copy engine's zeros do).
        if (v_rows < kBN) {
          zero_rows<kBN, kAtoms, cfg::kConsumers>(sv + slot(n - 1) * cfg::kTileBytes, v_rows, tid - 128);
          fence_proxy_async();
          named_sync(kWsTurn0 + kCWG, cfg::kConsumers);
        }
        turn_wait();
        wgmma_fence();
        pv_issue(n - 1);
        turn_pass();
        wgmma_wait<0>();
        release(empty_v(slot(n - 1)));
        fence_regs(o[0]);
        ++q_round;
        kv += n;
        xk += x_pair ? (n - 1 + (fb.nb_lo & 1)) / 2 + 1 : n;
      }
      // The block's bookkeeping recomputed rather than kept live across the
      // loop (fewer registers under the consumers' 160 with 3 warpgroups).
      fwd_block fb_out;
      fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb_out);
      // (16-byte stores of O at D = 128: 1.02-1.07x on an H100 at L = 2048 -
      // 4096, bench/results/2026-12-06-h100-fwd-epilogue.txt; at D = 64
      // within -2 .. +6%, D = 256 not timed: those keep the 4-byte stores)
      fwd_store<E, 1, kDB, kD == 128>(p, fb_out, o, row_m, row_l, fb_out.m0 + wrow, g, t);
    }
    // The last warpgroup's last pass (or its opening one) is still pending on
    // warpgroup 0's barrier: take it, so none is left behind.
    if (wg == 0) turn_wait();
  }
#endif
}

}  // namespace fa_cuda

#endif
