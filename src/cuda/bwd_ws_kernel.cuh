// Warp-specialized backward for Hopper (sm_90a), FlashAttention 3's
// structure around the products of bwd_wgmma_kernel.cuh. A block owns kBN =
// 128 keys of one (sequence, kv head), keeps their dK and dV in registers and
// walks the query tiles of kBM rows (every query head of the group) that can
// see them, as bwd_wgmma_kernel does; what changes is who moves the bytes:
//   producer   one thread: K and V once, then each query tile's Q and dO
//              by bulk tensor copies (TMA, tma.cuh) and its LSE and dsum rows
//              by two bulk copies (from p.ws_stats, the dsum kernel's padded
//              copy) into a ring of kStages slots, each guarded by a full
//              and an empty barrier. Its warpgroup gives most of its
//              registers to the consumers (setmaxnreg).
//   consumers  2 warpgroups of 64 keys: S^T, dP^T, P^T, dV, dS^T, dK as in
//              bwd_wgmma_kernel (bwd_tile.cuh's arithmetic), then dQ = dS K
//              (each warpgroup a 64 x 64 block) into a shared f32 tile, which
//              one thread adds into the dQ accumulator with one bulk tensor
//              reduction (cp.reduce.async.bulk .add) instead of 16
//              red.global.add.v2 per thread; the reduction runs while the
//              next tile's products do.
// No block-wide barrier in the loop: the consumers meet twice a tile on named
// barriers (dS^T complete and the dQ tile's buffer free; the dQ tile
// written), and wait for their slots on the ring's barriers.
//
// Deterministic (kDet): the f32 sums into a dQ row must come in the same
// order every run, so the blocks of one (sequence, kv head) take turns per
// query tile, the highest key tile first. A reduction then has to wait for
// the turn and for its own completion, which no consumer thread can afford,
// so a dQ writer does it: one thread of the producer warpgroup's warp 1,
// handed each filled tile (2 buffers where shared memory allows) on an
// mbarrier pair. It waits until the tile's counter (p.dq_turn: 1 + the last
// key tile that added) says the next higher key tile has added, reduces,
// waits for the reduction to complete and passes the turn on. A block waits only on higher
// key tiles of its head, which the grid numbers, and so starts, before it
// (head_group_block: no block can wait for one that has not started).
// The blocks walk their query tiles first to last, the group's heads
// innermost (bwd_block_tile): a higher key tile's band starts at or after a
// lower one's, so it reaches a shared (head, tile) no later -- under a causal
// band one tile earlier, so the turn is ready when asked for. Where the bands
// start together (no band) the key tiles reach each tile at the same step
// and the turns cost one reduction's skew between neighbours, which adds up
// along a head's key tiles when they start close together; the grid
// interleaves p.head_group heads so that a head's consecutive key tiles
// start that many blocks apart, while as many heads are in flight as
// tile-major order has.
// Per-sequence lengths (seqlens, packed sequences): a sequence's last query
// tile and its last key tile may bring rows past it (the next sequence's, or
// padding), which the consumers zero in shared memory before the products
// (zero_rows); P and dS are 0 there by the band, and the dQ reduction adds
// those zeros to rows that are not the sequence's, which leaves them as they
// are, in any order. Packed sequences' LSE / dsum rows and dQ turns are laid
// out per sequence (fa__cuda_ws_row0, bwd_ws_turn).
// Band-only calls (kScoreBand), with kScoreArith those whose per-element options are
// softcap and ALiBi only (bwd_tile.cuh's bwd_p_ds_arith; with kScoreDrop
// also dropout, dropout_tile.cuh's keep bits), with kScoreTile
// those and one bias or one mask (p.bwd_tile; dBias comes after): the producer
// copies the query tile's rows of it into a ring of its own (one slot at
// D = 64, freed as soon as the consumers have scored; score_tile.cuh
// reads it); backend.cu (p.ws_stats, p.dq_turn) and launch_bwd_wgmma.cuh
// decide.
#ifndef FA_CUDA_BWD_WS_KERNEL_CUH
#define FA_CUDA_BWD_WS_KERNEL_CUH

#include "bwd_tile.cuh"
#include "bwd_wgmma_step.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kBM, int kStages, bool kDet, int kScore = kScoreBand>
struct bwd_ws_cfg {
  static constexpr size_t kSmemLimit = 227 * 1024;  // an sm_90 block's opt-in maximum
  static constexpr int kBN = 128, kThreads = 384, kConsumers = 256;
  // setmaxnreg shares of what the launch gives the block (384 x 168): 128 x
  // 24 + 256 x 240; asking for more than that waits forever
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr uint32_t kKVBytes = kBN * kD * 2;  // K (or V)
  static constexpr uint32_t kQBytes = kBM * kD * 2;   // Q (or dO) of one slot
  static constexpr uint32_t kDsBytes = kBN * kBM * 2;
  static constexpr uint32_t kDqBytes = kBM * kD * 4;
  static constexpr uint32_t kStatBytes = 2 * kBM * 4;  // LSE and dsum of one slot
  // kScoreTile: a slot of the bias / mask ring holds the query tile's rows
  // of a bias (16-bit, 2 atoms of 64 keys) or a mask (bytes, 1 atom of 128
  // keys, in the first), kBM of them. Its own ring, with its own barriers:
  // at D = 64 (kBM = 128, 32 KiB a slot) one slot, which the consumers free
  // as soon as they have scored (a second did not fit beside the rest)
  static constexpr uint32_t kXAtomBytes = kBM * 128;
  static constexpr uint32_t kXBytes = score_has_tile(kScore) ? 2 * kXAtomBytes : 0;
  static constexpr int kXSlots = kD == 64 ? 1 : kStages;
  // K, V, the Q and dO rings, dS^T, the dQ tiles, the bias / mask ring, the
  // row statistics, the barriers; 1 KiB to align the tiles to 1024 bytes
  // (the swizzle's period)
  static constexpr size_t bytes_with(int dq_bufs) {
    return 2 * (size_t)kKVBytes + 2 * kStages * (size_t)kQBytes + kDsBytes + dq_bufs * (size_t)kDqBytes +
           kXSlots * (size_t)kXBytes + kStages * (size_t)kStatBytes +
           8 * (1 + 2 * kStages + 2 * dq_bufs + 2 * kXSlots) + 1024;
  }
  // deterministic: a second dQ tile lets the consumers run a tile ahead of
  // the writer
  static constexpr int kDqBufs = kDet && bytes_with(2) <= kSmemLimit ? 2 : 1;
  static constexpr size_t smem_bytes = bytes_with(kDqBufs);
};

// Named barriers of the consumers (0 is __syncthreads'): dS^T complete and
// the dQ buffer free; the dQ tile written; rows past a sequence zeroed.
constexpr int kBwdWsDsReady = 1, kBwdWsDqReady = 2, kBwdWsZeroed = 3;

// Byte offset of element (row, col) in a tile of f32 stored as the copy
// engine's 128-byte swizzle over boxes of 32 columns x kRows rows.
template <int kRows>
__device__ __forceinline__ uint32_t swz_f32(int row, int col) {
  return static_cast<uint32_t>((col >> 5) * kRows * 128 + row * 128 + ((((col & 31) >> 2) ^ (row & 7)) << 4) +
                               (col & 3) * 4);
}

// The first of the dQ turn counters (p.dq_turn) of the block's sequence at
// query head h, for query tiles of kBM rows: per (stored batch, head)
// p.dq_turn_pitch counters; packed sequences share one stored batch, and
// sequence b's tiles start at its first row / kBM + b, which no tile of the
// sequence before it reaches (backend.cu sizes the pitch).
template <int kBM>
__device__ __forceinline__ int64_t bwd_ws_turn(const fa__cuda_params &p, const bwd_block &blk, int64_t h) {
  const int64_t base = (blk.seq.bidx * p.Hq + h) * p.dq_turn_pitch;
  return p.cu_q ? base + blk.seq.q_row0 / kBM + blk.b : base;
}

template <typename E, int kD, int kBM, int kStages, bool kDet, int kScore>
__global__ void __launch_bounds__(384, 1)
    bwd_ws_kernel(const __grid_constant__ fa__cuda_params p, const __grid_constant__ CUtensorMap tq,
                  const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                  const __grid_constant__ CUtensorMap tdo, const __grid_constant__ CUtensorMap tdq,
                  const __grid_constant__ CUtensorMap tx) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using cfg = bwd_ws_cfg<kD, kBM, kStages, kDet, kScore>;
  constexpr bool kTile = score_has_tile(kScore);
  constexpr int kBN = cfg::kBN, kMB = kBM / 8, kDB = kD / 8, kAtoms = kD / 64;
  static_assert((kBM == 128 && kD == 64) || (kBM == 64 && kD == 128), "tile shapes with a 64 x 64 dQ block each");
  // D = 64 (128 query rows): S^T and dP^T are 64 registers each, so P^T and
  // dS^T are made together before dV is issued, not P^T under dP^T, which
  // spilled 48 bytes at the consumers' 240 registers
  constexpr bool kEarlyDs = kD == 64;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  unsigned char *smem = smem_raw + pad;
  const uint32_t sk = smem_addr(smem);                               // [kAtoms][kBN][64]
  const uint32_t sv = sk + cfg::kKVBytes;                            // [kAtoms][kBN][64]
  const uint32_t sq = sv + cfg::kKVBytes;                            // [kStages][kAtoms][kBM][64]
  const uint32_t sdo = sq + kStages * cfg::kQBytes;                  // [kStages][kAtoms][kBM][64]
  const uint32_t sds = sdo + kStages * cfg::kQBytes;                 // [kBM / 64][kBN][64]: dS^T [key][query]
  const uint32_t sdq = sds + cfg::kDsBytes;                          // [kDqBufs][kD / 32][kBM][32] f32, swz_f32
  const uint32_t sx = sdq + cfg::kDqBufs * cfg::kDqBytes;            // [kXSlots][2 atoms][kBM][128 bytes]
  const uint32_t stats_off = sx + cfg::kXSlots * cfg::kXBytes - sk;  // [kStages][LSE kBM, dsum kBM] f32
  float *stats = reinterpret_cast<float *>(smem + stats_off);
  const uint32_t bars = sk + stats_off + kStages * cfg::kStatBytes;
  const uint32_t full_kv = bars;
  auto full = [&](int s) { return bars + 8 * (1 + s); };
  auto empty = [&](int s) { return bars + 8 * (1 + kStages + s); };
  auto dq_full = [&](int b) { return bars + 8 * (1 + 2 * kStages + b); };                 // the consumers filled tile b
  auto dq_free = [&](int b) { return bars + 8 * (1 + 2 * kStages + cfg::kDqBufs + b); };  // the writer read it
  auto full_x = [&](int x) { return bars + 8 * (1 + 2 * kStages + 2 * cfg::kDqBufs + x); };
  auto empty_x = [&](int x) { return bars + 8 * (1 + 2 * kStages + 2 * cfg::kDqBufs + cfg::kXSlots + x); };

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // tile-major (grid_order.cuh): the blocks running at once share a few
  // heads' Q, dO and dQ rows in L2; deterministic, a few heads interleaved
  // and each head's key tiles highest first (the turns, above); with
  // FLASHATTN_CUDA_BWD_GROUP (an A/B instrument, launch_bwd_wgmma.cuh)
  // p.head_group heads interleaved, each head's key tiles lowest first
  int64_t bkv, kt;
  if (kDet || p.head_group > 0)
    head_group_block(p.head_group, kDet, &bkv, &kt);
  else
    tile_major_block(&bkv, &kt);
  bwd_block blk;
  if (!bwd_block_init<kBN, kBM>(p, &blk, bkv, kt)) return;  // the same for every thread of the block
  const fa__seq &seq = blk.seq;
  const int total = blk.total;

  if (tid == 0) {
    mbar_init(full_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), cfg::kConsumers / 32);
    }
    if (kDet)
      for (int b = 0; b < cfg::kDqBufs; ++b) {
        mbar_init(dq_full(b), 1);
        mbar_init(dq_free(b), 1);
      }
    if (kTile)
      for (int x = 0; x < cfg::kXSlots; ++x) {
        mbar_init(full_x(x), 1);
        mbar_init(empty_x(x), cfg::kConsumers / 32);
      }
    mbar_init_fence();
  }
  __syncthreads();

  // the bulk reduction of dQ tile src (kBM rows of head h from row m0) into
  // the accumulator, as one bulk group
  auto reduce_dq = [&](uint32_t src, int64_t h, int64_t m0) {
    const int row = static_cast<int>(seq.q_row0 + m0);
#pragma unroll
    for (int c = 0; c < kD / 32; ++c)
      if (c * 32 < p.D)
        tma_reduce_add_4d(&tdq, src + c * kBM * 128, c * 32, row, static_cast<int>(h), static_cast<int>(seq.bidx));
    bulk_commit();
  };

  if (warp < 4) {
    regs_dealloc<cfg::kProducerRegs>();
    const int b = static_cast<int>(seq.bidx);
    if (warp == 0 && lane == 0) {
      tma_prefetch_map(&tq);
      tma_prefetch_map(&tdo);
      if constexpr (kTile) tma_prefetch_map(&tx);
      if (total > 0) {
        const int n0 = static_cast<int>(seq.k_row0 + blk.n0), kvh = static_cast<int>(blk.kvh);
        mbar_expect_tx(full_kv, 2 * cfg::kKVBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          tma_load_4d(sk + a * kBN * 128, &tk, a * 64, n0, kvh, b, full_kv);
          tma_load_4d(sv + a * kBN * 128, &tv, a * 64, n0, kvh, b, full_kv);
        }
      }
      for (int it = 0; it < total; ++it) {
        const int s = it % kStages, use = it / kStages;
        int64_t h, m0;
        bwd_block_tile<kBM, kDet>(p, blk, it, &h, &m0);
        if (use > 0) mbar_wait(empty(s), (use - 1) & 1);
        const int row = static_cast<int>(seq.q_row0 + m0);
        mbar_expect_tx(full(s), 2 * cfg::kQBytes + cfg::kStatBytes);
        const float *st =
            p.ws_stats + (seq.bidx * p.Hq + h) * 2 * p.ws_pitch + fa__cuda_ws_row0(p, blk.b, seq.q_row0) + m0;
        const uint32_t ss = sk + stats_off + s * cfg::kStatBytes;
        bulk_load(ss, st, kBM * 4, full(s));
        bulk_load(ss + kBM * 4, st + p.ws_pitch, kBM * 4, full(s));
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          tma_load_4d(sq + s * cfg::kQBytes + a * kBM * 128, &tq, a * 64, row, static_cast<int>(h), b, full(s));
          tma_load_4d(sdo + s * cfg::kQBytes + a * kBM * 128, &tdo, a * 64, row, static_cast<int>(h), b, full(s));
        }
        if constexpr (kTile) {
          // the bias / mask rows of the query tile at the block's keys
          // (logical coordinates; broadcast dims have extent 1, a tile the
          // same for every row is one row), into its own ring
          const int xs_slot = it % cfg::kXSlots, xuse = it / cfg::kXSlots;
          if (xuse > 0) mbar_wait(empty_x(xs_slot), (xuse - 1) & 1);
          const int64_t *xs = p.tile_s;
          const int x_cols = p.bwd_tile == FA_CUDA_TILE_MASK ? 128 : 64, x_rows = xs[2] ? kBM : 1;
          mbar_expect_tx(full_x(xs_slot), kBN / x_cols * x_rows * 128);
          for (int a = 0; a < kBN / x_cols; ++a)
            tma_load_4d(sx + xs_slot * cfg::kXBytes + a * cfg::kXAtomBytes, &tx, static_cast<int>(blk.n0) + a * x_cols,
                        xs[2] ? static_cast<int>(m0) : 0, xs[1] ? static_cast<int>(h) : 0,
                        xs[0] ? static_cast<int>(blk.b) : 0, full_x(xs_slot));
        }
      }
    } else if (kDet && warp == 1 && lane == 0) {
      // the dQ writer. The query tiles the next higher key tile reduces into
      // (bwd_block_init's band, for it): there this block's turn comes after its
      int64_t prev_lo = 0, prev_hi = 0;
      {
        int64_t i0, i1;
        fa__band_rows(&blk.bd, blk.n0 + kBN, blk.n0 + 2 * kBN, &i0, &i1);
        if (i1 > i0) {
          prev_lo = i0 / kBM;
          prev_hi = (i1 + kBM - 1) / kBM;
        }
      }
      for (int it = 0; it < total; ++it) {
        const int buf = it % cfg::kDqBufs;
        int64_t h, m0;
        bwd_block_tile<kBM, kDet>(p, blk, it, &h, &m0);
        const int64_t mt = m0 / kBM;
        int *turn = p.dq_turn + bwd_ws_turn<kBM>(p, blk, h) + mt;
        if (mt >= prev_lo && mt < prev_hi) turn_wait(turn, static_cast<int>(kt) + 2);
        mbar_wait(dq_full(buf), static_cast<uint32_t>((it / cfg::kDqBufs) & 1));
        reduce_dq(sdq + buf * cfg::kDqBytes, h, m0);
        bulk_wait<0>();                             // the sums are in memory: the next key tile may add
        turn_pass(turn, static_cast<int>(kt) + 1);  // 1 + this key tile
        mbar_arrive(dq_free(buf));
      }
    }
  } else {
    regs_alloc<cfg::kConsumerRegs>();
    const int cw = warp - 4, wg = cw >> 2, g = lane >> 2, t = lane & 3;
    const int wkey = cw * 16;        // = 64 wg + 16 (cw % 4): this warp's keys in the block
    const bool leader = tid == 128;  // reduces the dQ tiles, or hands them to the writer
    // this warpgroup's dQ block: query rows dq_r0.., head-dim columns dq_c0..
    const int dq_r0 = kBM == 128 ? wg * 64 : 0, dq_c0 = kBM == 64 ? wg * 64 : 0;

    float dk[kDB][4], dv[kDB][4];
    bwd_zero_dkdv(dk, dv);
    // per-sequence lengths: the boxes may bring rows past the sequence (the
    // next one's, or padding), zeroed before any product reads them (P and
    // dS are 0 there, but 0 x Inf or NaN is not 0)
    const bool lengths_q = p.seqlens_q || p.cu_q;
    if (total > 0) {
      mbar_wait(full_kv, 0);
      if ((p.seqlens_k || p.cu_k) && blk.k_valid < kBN) {
        zero_rows<kBN, kAtoms, cfg::kConsumers>(sk, blk.k_valid, tid - 128);
        zero_rows<kBN, kAtoms, cfg::kConsumers>(sv, blk.k_valid, tid - 128);
        fence_proxy_async();
        named_sync(kBwdWsZeroed, cfg::kConsumers);
      }
    }

    for (int it = 0; it < total; ++it) {
      const int s = it % kStages;
      mbar_wait(full(s), static_cast<uint32_t>((it / kStages) & 1));
      int64_t h, m0;
      bwd_block_tile<kBM, kDet>(p, blk, it, &h, &m0);
      const float *l_s = stats + s * 2 * kBM;
      const float *ds_s = l_s + kBM;
      const uint32_t q_st = sq + s * cfg::kQBytes, do_st = sdo + s * cfg::kQBytes;
      if (lengths_q && seq.lq - m0 < kBM) {
        const int from = static_cast<int>(seq.lq - m0);
        zero_rows<kBM, kAtoms, cfg::kConsumers>(q_st, from, tid - 128);
        zero_rows<kBM, kAtoms, cfg::kConsumers>(do_st, from, tid - 128);
        fence_proxy_async();
        named_sync(kBwdWsZeroed, cfg::kConsumers);
      }

      // S^T = K Q^T and dP^T = V dO^T as two groups (P^T under dP^T)
      float st[kMB][4], dpt[kMB][4];
      bwd_wgmma_kt<E, kD, kBM, kBN>(st, sk, q_st, wg);
      bwd_wgmma_kt<E, kD, kBM, kBN>(dpt, sv, do_st, wg);
      uint32_t ap[kBM / 16][4], as[kBM / 16][4];
      if constexpr (kEarlyDs || kScore != kScoreBand) {
        // dropout's keep bits while the products run (dropout_tile.cuh)
        const auto keep = [&] {
          if constexpr (score_has_drop(kScore))
            return bwd_keep_bits<kMB>(p, blk.b * p.Hq + h, m0, blk.n0 + wkey, g, t);
          else
            return no_drop{};
        }();
        // P^T and dS^T both before dV: S^T and dP^T die sooner (and the
        // softcap's tanh is at hand for dS^T)
        wgmma_wait<0>();
        fence_regs(st);
        fence_regs(dpt);
        if constexpr (kScore != kScoreBand) {
          const arith_score a(p, alibi_slope(p, h));
          auto p_ds = [&](const auto &x) {
            if (p.softcap > 0.f)
              bwd_p_ds_arith<true>(blk.bd, a, st, dpt, l_s, ds_s, m0, blk.n0 + wkey, g, t, x, wkey, keep);
            else
              bwd_p_ds_arith<false>(blk.bd, a, st, dpt, l_s, ds_s, m0, blk.n0 + wkey, g, t, x, wkey, keep);
          };
          if constexpr (kTile) {
            const int xs_slot = it % cfg::kXSlots;
            mbar_wait(full_x(xs_slot), static_cast<uint32_t>((it / cfg::kXSlots) & 1));
            const uint32_t xb = sx + xs_slot * cfg::kXBytes;
            const bool rows_bcast = p.tile_s[2] == 0;
            if (p.bwd_tile == FA_CUDA_TILE_MASK)
              p_ds(mask_score_tile{xb, rows_bcast});
            else
              p_ds(bias_score_tile<E>{xb, cfg::kXAtomBytes, rows_bcast});
            __syncwarp();  // the warp's reads of the slot are done: it may be refilled
            if (lane == 0) mbar_arrive(empty_x(xs_slot));
          } else {
            p_ds(no_score_tile{});
          }
        } else {
          bwd_p_band(blk.bd, st, l_s, p.scale_log2, m0, blk.n0 + wkey, g, t);
          bwd_ds_band(st, dpt, ds_s, t);
        }
#pragma unroll
        for (int kk = 0; kk < kBM / 16; ++kk) {
          c_to_a_frag<E>(ap[kk], st[2 * kk], st[2 * kk + 1]);
          c_to_a_frag<E>(as[kk], dpt[2 * kk], dpt[2 * kk + 1]);
        }
        bwd_wgmma_acc<E, kD, kBM>(dv, ap, do_st);
      } else {
        // P^T, then dV += P^T dO while dS^T is computed
        wgmma_wait<1>();
        fence_regs(st);
        bwd_p_band(blk.bd, st, l_s, p.scale_log2, m0, blk.n0 + wkey, g, t);
#pragma unroll
        for (int kk = 0; kk < kBM / 16; ++kk) c_to_a_frag<E>(ap[kk], st[2 * kk], st[2 * kk + 1]);
        bwd_wgmma_acc<E, kD, kBM>(dv, ap, do_st);
        wgmma_wait<1>();
        fence_regs(dpt);
        bwd_ds_band(st, dpt, ds_s, t);
#pragma unroll
        for (int kk = 0; kk < kBM / 16; ++kk) c_to_a_frag<E>(as[kk], dpt[2 * kk], dpt[2 * kk + 1]);
      }
      // dS^T -> shared memory (free: the last tile's dQ products are done,
      // see the dQ barrier below), then dK += dS^T Q
      bwd_store_ds_t<kBM, kBN>(sds, as, wkey, g, t);
      fence_proxy_async();
      bwd_wgmma_acc<E, kD, kBM>(dk, as, q_st);

      // all of dS^T is in; the dQ buffer this tile fills has been read
      const int buf = it % cfg::kDqBufs;
      if (leader) {
        if constexpr (kDet) {
          if (it >= cfg::kDqBufs) mbar_wait(dq_free(buf), static_cast<uint32_t>((it / cfg::kDqBufs - 1) & 1));
        } else {
          bulk_wait_read<0>();
        }
      }
      named_sync(kBwdWsDsReady, cfg::kConsumers);

      // dQ block = dS K over the block's kBN keys
      float dq[8][4];
      bwd_wgmma_dq<E, kBN>(dq, sds, sk, dq_r0, dq_c0);
      wgmma_wait<0>();
      fence_regs(dq);
      fence_regs(dv);
      fence_regs(dk);
      if (lane == 0) mbar_arrive(empty(s));  // every product of the tile is done with Q and dO

#pragma unroll
      for (int r = 0; r < 2; ++r) {  // the block of dQ -> the shared f32 tile
        const int il = dq_r0 + (cw & 3) * 16 + g + r * 8;
#pragma unroll
        for (int x = 0; x < 8; ++x)
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sdq + buf * cfg::kDqBytes +
                                                                  swz_f32<kBM>(il, dq_c0 + x * 8 + 2 * t)),
                       "f"(dq[x][2 * r]), "f"(dq[x][2 * r + 1])
                       : "memory");
      }
      fence_proxy_async();
      // the dQ tile is written and every dQ product is done with dS^T
      named_sync(kBwdWsDqReady, cfg::kConsumers);
      if (leader) {
        if constexpr (kDet)
          mbar_arrive(dq_full(buf));
        else
          reduce_dq(sdq, h, m0);
      }
    }
    if (!kDet && leader) bulk_wait<0>();
    bwd_store_dkdv<E, kDB, true>(p, blk, blk.n0 + wkey + g, dk, dv, t);
  }
#endif
}

}  // namespace fa_cuda

#endif
