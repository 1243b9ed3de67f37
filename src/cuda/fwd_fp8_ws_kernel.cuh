// Warp-specialized FP8 (e4m3) forward for Hopper (sm_90a): the structure of
// fwd_ws_kernel.cuh (the bf16 warp-specialized forward) with the arithmetic
// of fwd_fp8_kernel.cuh (the rule of docs/semantics.md, "FP8 (e4m3)"):
//   producer warpgroup (setmaxnreg 24)
//     warp 0, one thread   TMA copies, as fwd_ws_kernel's producer: Q of each
//                          work tile into one buffer, K and V (as stored:
//                          [keys][D] bytes) tile by tile into rings of
//                          kStages slots, each slot with a full and an
//                          empty mbarrier.
//     warps 2-3 (64 thr.)  the V transpose: each waits for a V slot, turns
//                          it into a V^T slot ([Dv][kBN keys], the key order
//                          of P's registers) with fwd_fp8_kernel's byte
//                          permutes, fences its writes to the async proxy and
//                          arrives on the V^T slot's full barrier and on the
//                          V slot's empty one (one arrival per thread).
//     warp 1               leaves.
//   kTv 1 (FLASHATTN_CUDA_VARIANT 5-7, launch_fwd_fp8.cuh): warps 1-3
//     transpose instead, with ldmatrix.trans / stmatrix
//     (fp8_ws_transpose_v_ldsm: the same V^T bytes, a quarter of the
//     shared-memory instructions), one arrival per warp; the copying thread
//     hands them each tile's key count through shared memory (v_keys) and
//     a stop after the last, so that they keep no work-tile bookkeeping
//     (which spilled in 24 registers).
//   2 consumer warpgroups (setmaxnreg 240), 64 query rows each
//     the pipelined loop of fwd_ws_kernel (S of tile it + 1 issued with
//     P V of tile it, turns taken on named barriers), with the fp8 kernel's
//     steps: S on wgmma k32, descales, fwd_tile.cuh's scores and softmax
//     with P = 2^(s - m + FA__FP8_P_SHIFT), P to e4m3 in registers
//     (fp8_p_frag), P V of each 128-key tile into a temporary that starts
//     from zero and is added to O in f32 (the two-level accumulation).
// Why the transpose runs on the producer's spare warps (FlashAttention 3
// does the same) rather than on the consumers: the consumers are the
// bottleneck (softmax, e4m3 conversion, the f32 add of each tile), while
// three of the producer's four warps sit idle; on the consumers the
// transpose would also need both warpgroups to meet per tile (V^T is
// shared by them), undoing the turn-taking that keeps one warpgroup's
// softmax under the other's products. With its own warps it is one more
// ring stage (V -> V^T) under plain mbarriers, and a V slot is free for the
// next copy as soon as it is transposed. Rows of V past the sequence's keys
// (the last tile under seqlens / packed sequences, which a box reads from
// the padding or the next sequence) are transposed as zeros, as the
// cp.async kernel's zero-fill makes them: P is 0 there, but 0 x Inf or NaN
// is not.
// Same rule, bit for bit, as fwd_fp8_kernel's D = 128 pipeline: the same S
// chain (D / 32 k32 steps, one group), the same scores and softmax helpers,
// P rounded once per 128-key tile, each tile's P V from zero in 4 k32 steps,
// o = o * alpha + tmp in the same fmaf order, the same epilogue.
// Scope: head-dim bucket 128 (D, Dv <= 128: a row is one 128-byte swizzle
// atom), band-only options (causal, window, offsets, seqlens, packed
// sequences); launch_fwd_fp8.cuh decides (FLASHATTN_CUDA_FP8_WS=1).
#ifndef FA_CUDA_FWD_FP8_WS_KERNEL_CUH
#define FA_CUDA_FWD_FP8_WS_KERNEL_CUH

#include "fwd_fp8_kernel.cuh"
#include "fwd_ws_kernel.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kBN, int kStages>
struct fwd_fp8_ws_cfg {
  static constexpr int kCWG = 2, kBM = 64 * kCWG, kThreads = 128 * (kCWG + 1), kConsumers = 128 * kCWG;
  // warps 2-3 of the producer warpgroup (64 threads, 16 of
  // fp8_transpose_v's 4 x 4 blocks each; 96 do not divide the 1024 blocks
  // of a tile, and the general index arithmetic of a remainder loop cost
  // more instructions than the permutes)
  static constexpr int kTransposers = 64;
  // setmaxnreg shares of the 64 Ki registers: 128 x 24 + 256 x 240
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // one byte an element: Q, a K / V / V^T slot
  static constexpr uint32_t kQBytes = kBM * kD, kTileBytes = kBN * kD;
  static constexpr int kBars = 2 + 6 * kStages;
  // Q, the K, V and V^T rings, the barriers, and 1 KiB to align the tiles
  // to 1024 bytes (the swizzle pattern's period).
  // (+ 4 bytes a V slot: its key count, for the transposers of kTv 1)
  static constexpr size_t smem_bytes = kQBytes + 3 * kStages * (size_t)kTileBytes + 8 * kBars + 4 * kStages + 1024;
};

// fp8_transpose_v (fwd_fp8_kernel.cuh) for kD = kBN = 128 on 64 threads:
// the same 1024 blocks of 4 keys x 4 dims, each read, permuted and written
// exactly as there (block a, b: dims n = 4 a, logical columns c = 4 b, keys
// key0 + {0, 1, 8, 9} with key0 = (b >> 3) 32 + ((b >> 2) & 1) 16 + (b & 3) 2),
// only handed out to the threads in another order, for two reasons:
//   - bank conflicts: fp8_transpose_v's warps write 4-way conflicted words
//     (8 rows whose swizzle leaves 2 chunks), which with wgmma's operand
//     reads made shared memory the bottleneck. Here lane l (bits t0..t4) of
//     warp wq takes, at step (e, s), a = 16 wq + 8 e + 4 t4 + (l & 3) and
//     b = 4 J + ((l >> 2) & 3) with J = (s + t1 + 2 t4) & 7: each of its 4
//     loads and 4 stores hits 32 distinct banks (loads: ((a >> 2) ^ key & 7,
//     a & 3) distinct; stores: (J ^ (4 t0 + r), b & 3) distinct);
//   - registers: the addresses are per-thread constants plus 2048 J (read)
//     and J's chunk (write), so the loop fits the producer's 24 registers
//     (fp8_transpose_v fully unrolled spilled hundreds of bytes there).
// Read (swz_atoms<128>(key, n >> 1) in bytes): key 128 + (((n >> 4) ^ (key &
// 7)) << 4) + (n & 15) = 2048 J + rq[q], e = 1 (n + 32) flipping bit 1 of the
// chunk: rq[q] ^ 32. Write: (n + r) 128 + ((J ^ ((n + r) & 7)) << 4) + (c &
// 15), (n + r) & 7 = 4 t0 + r, e = 1 4096 bytes on. A host program checked
// (2026-12-01) that these steps cover exactly fp8_transpose_v's 1024 (reads,
// writes, keys) and that every warp access is conflict-free. Addresses are
// shared-window byte addresses (V^T at vt, V as loaded at sv). kMask: keys
// >= v_rows written as zeros (the last key tile of a sequence under
// seqlens / packed sequences: the copy read those V rows from the padding or
// the next sequence; P is 0 there, but 0 x Inf or NaN is not).
template <bool kMask>
__device__ __forceinline__ void fp8_ws_transpose_v(uint32_t vt, uint32_t sv, int id, int v_rows) {
  const int l = id & 31, wq = id >> 5;
  const int n0 = 64 * wq + 16 * (l >> 4) + 4 * (l & 3);  // n = 4 a for e = 0
  const int kq = 2 * ((l >> 2) & 3);                     // key0 - 16 J
  // reads of q = 0 and 1 (keys key0, key0 + 1); q = 2, 3 (key + 8: the same
  // key & 7) are 1024 bytes on
  const uint32_t r0 = sv + kq * 128 + ((((n0 >> 4) ^ kq) << 4) | (n0 & 15));
  const uint32_t r1 = sv + (kq + 1) * 128 + ((((n0 >> 4) ^ (kq + 1)) << 4) | (n0 & 15));
  const uint32_t wb = vt + n0 * 128 + kq * 2;  // c & 15 = 4 ((l >> 2) & 3) = 2 kq
  const int x = 4 * (l & 1);                   // (n + r) & 7 - r
  int J = ((l >> 1) & 1) + 2 * (l >> 4);       // s = 0: J = t1 + 2 t4
#pragma unroll 1
  for (int s = 0; s < 8; ++s, J = (J + 1) & 7) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const uint32_t ra[4] = {r0 + 2048 * J, r1 + 2048 * J, r0 + 2048 * J + 1024, r1 + 2048 * J + 1024};
      uint32_t w[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t a = ra[q] ^ (32 * e);  // bit 5 is the chunk's bit 1 (2048 J, 1024 leave it)
        if (kMask) {
          w[q] = 0u;
          if (16 * J + kq + (q & 1) + 8 * (q >> 1) < v_rows)
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w[q]) : "r"(a) : "memory");
        } else {
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w[q]) : "r"(a) : "memory");
        }
      }
      const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
      const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
      const uint32_t out[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                               __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t a = wb + 4096 * e + 128 * r + ((J ^ (x + r)) << 4);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(out[r]) : "memory");
      }
    }
  }
}

// transposing warps of fp8_ws_transpose_v_ldsm (kTv 1): warps 1-3 of the
// producer warpgroup
constexpr int kFp8TvWarps = 3;

__device__ __forceinline__ void st_shared_s32(uint32_t addr, int v) {
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// The same V^T slot (byte for byte) from ldmatrix.trans / stmatrix, as
// FlashAttention 3's producer transposes FP8 V (LDSM.T + byte permutes +
// STSM): 4x fewer shared-memory instructions than fp8_ws_transpose_v (an
// x4 moves 512 bytes a warp, a 32-bit access 128) and half its permutes.
// The V^T slot's chunk J (16 bytes) of row n holds keys 16 J .. 16 J + 15 in
// P's order: bytes 4 i .. 4 i + 3 are keys 16 J + 2 i + {0, 1, 8, 9}
// (fp8_transpose_v's blocks b = 4 J + i). A unit (J, dq) is keys 16 J ..
// 16 J + 15 x dims 32 dq .. 32 dq + 31, one ldmatrix.x4.trans (b16, so one
// element is 2 dims): matrix mi = keys 16 J + 8 (mi & 1) + 0..7, dims
// 32 dq + 16 (mi >> 1) + 0..15; lane (g, q) (g = lane / 4, q = lane % 4)
// gets of each the keys 2 q, 2 q + 1 (low, high half) of dims 2 g, 2 g + 1
// (low, high byte). Keys 2 q, 2 q + 1 of matrices 0 and 1 (keys + 8),
// bytes 0 2 4 6 (__byte_perm 0x6420) are row 2 g's 4 bytes at 4 q, bytes
// 1 3 5 7 (0x7531) row 2 g + 1's; matrices 2, 3 the same 16 dims on. The
// stmatrix.x4 (non-trans: lane (g, q) gives each matrix's row g, bytes
// 4 q ..) takes for matrix 0 rows 2 g (g < 4) and 2 g + 1 (g >= 4), matrix
// 1 the others, so that each matrix's 8 rows have 8 distinct row & 7 and
// their chunks J ^ (row & 7) 8 distinct bank groups (rows 2 g alone would
// be 2-way conflicted): the choice is only the permute's selector. Reads:
// key & 7 = the matrix row, so the 8 rows' chunks are distinct too. A host
// emulation (2026-12-01) checked the 32 units against fp8_transpose_v's
// bytes, each V^T byte written once, and both sides conflict-free. The 32
// units are dealt to the kFp8TvWarps warps (wq = 0, 1, 2: units wq, wq + 3,
// ...), two loads in flight a warp. No lane state beyond a few addresses, so
// that the loop fits the producer's 24 registers. kMask as fp8_ws_transpose_v
// (keys >= v_rows written as zeros): each unit's V rows past v_rows are
// zeroed in the V slot before its ldmatrix (only that warp reads them; the
// copy that next fills the slot waits for the fence and arrival after).
template <bool kMask>
__device__ __forceinline__ void fp8_ws_transpose_v_ldsm(uint32_t vt, uint32_t sv, int wq, int lane, int v_rows) {
  const int mi = lane >> 3, ri = lane & 7, h = mi >> 1;
  // read row of unit (J, dq): sv + 2048 J + (8 (mi & 1) + ri) 128 +
  // (((2 dq + h) ^ ri) << 4), and 2 dq + h = 2 dq | h
  const uint32_t rd = sv + (8 * (mi & 1) + ri) * 128 + ((h ^ (ri & 1)) << 4);
  // write row of matrix mi, row ri: 32 dq + 16 h + 2 ri + d, d = 1 for
  // (mi even, ri >= 4) and (mi odd, ri < 4); chunk J ^ (row & 7)
  const int nr = 2 * ri + ((mi & 1) ? (ri < 4) : (ri >= 4));
  const uint32_t wr = vt + (16 * h + nr) * 128, nx = (nr & 7) << 4;
  const uint32_t sel0 = (lane >> 2) < 4 ? 0x6420u : 0x7531u;
  // units u = 8 dq + J of this warp: wq, wq + 3, ...; two a step, the second's
  // load issued before the first's store
#pragma unroll 1
  for (int u0 = wq; u0 < 32; u0 += 2 * kFp8TvWarps) {
    const int nu = u0 + kFp8TvWarps < 32 ? 2 : 1;  // the same for the whole warp
    uint32_t r[2][4];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int u = u0 + x * kFp8TvWarps, J = u & 7, dq = u >> 3;
      if (x < nu) {
        if (kMask) {
          // the unit's 16 keys x 2 chunks, one (key, chunk) a lane: keys
          // >= v_rows zeroed in the V slot first (only this warp reads them)
          const int k = 16 * J + (lane >> 1), c = 2 * dq + (lane & 1);
          if (k >= v_rows)
            asm volatile("st.shared.v4.u32 [%0], {%1,%1,%1,%1};\n" ::"r"(sv + k * 128 + ((c ^ (k & 7)) << 4)), "r"(0)
                         : "memory");
          __syncwarp();
        }
        ldmatrix_x4_trans(r[x], rd + 2048 * J + ((((2 * dq) ^ ri) & 6) << 4));
      }
    }
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int u = u0 + x * kFp8TvWarps, J = u & 7, dq = u >> 3;
      if (x < nu) {
        const uint32_t w0 = __byte_perm(r[x][0], r[x][1], sel0), w1 = __byte_perm(r[x][0], r[x][1], sel0 ^ 0x1111u);
        const uint32_t w2 = __byte_perm(r[x][2], r[x][3], sel0), w3 = __byte_perm(r[x][2], r[x][3], sel0 ^ 0x1111u);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(
                         wr + 4096 * dq + ((static_cast<uint32_t>(J) << 4) ^ nx)),
                     "r"(w0), "r"(w1), "r"(w2), "r"(w3)
                     : "memory");
      }
    }
  }
}

// The consumers' order within an iteration (both issue S of tile it + 1
// with P V of tile it in one turn): P V first; its add into O once it is in
// (S may still run), then the softmax of it + 1 (fwd_fp8_kernel's kPipe 1).
// FlashAttention 3's order (S first, the softmax under P V, the add after)
// keeps O, the temporary, S and P live at once: it spilled in the
// consumers and was slower on the H200 (2026-12-01), so it is gone.
// kTurns false: no turn-taking, each warpgroup issues its products as soon
// as its operands are in (the same products, so the same bits; for A/B
// timing against the turns).
template <typename E, int kD, int kBN, int kStages, int kTv = 0, bool kTurns = true>
__global__ void __launch_bounds__(384, 1)
    fwd_fp8_ws_kernel(const __grid_constant__ fa__cuda_params p, const __grid_constant__ CUtensorMap tq,
                      const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, int64_t row_tiles,
                      bool heads_inner) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using cfg = fwd_fp8_ws_cfg<kD, kBN, kStages>;
  constexpr int kBM = cfg::kBM, kCWG = cfg::kCWG, kNB = kBN / 8, kDB = kD / 8;
  static_assert(kD == 128, "Q, K, V rows are one 128-byte swizzle atom (head-dim bucket 128)");
  static_assert(kBN == FA__FP8_BLOCK_K, "the key tile is the block of the FP8 rule (src/rules/fp8.h)");
  static_assert(kStages >= 2, "configuration");
  static_assert(cfg::kTransposers == 64, "fp8_ws_transpose_v's thread count");
  static_assert(kTv == 0 || kTv == 1, "transposer");
  // arrivals on a V^T slot's full barrier and a V slot's empty one: one per
  // transposing thread (kTv 0), one per transposing warp (kTv 1)
  constexpr uint32_t kTvArrivals = kTv ? kFp8TvWarps : cfg::kTransposers;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = smem_addr(smem_raw), pad = (1024 - (base & 1023)) & 1023;
  const uint32_t sq = base + pad;                         // [kBM][128 bytes]
  const uint32_t sk = sq + cfg::kQBytes;                  // [kStages][kBN][128 bytes]
  const uint32_t sv = sk + kStages * cfg::kTileBytes;     // [kStages][kBN][128 bytes], V as stored
  const uint32_t svt = sv + kStages * cfg::kTileBytes;    // [kStages][kD][kBN bytes], V^T in P's key order
  const uint32_t bars = svt + kStages * cfg::kTileBytes;  // full_q, empty_q, then per slot:
  const uint32_t full_q = bars, empty_q = bars + 8;       // full_k, full_v, full_vt, empty_k, empty_v, empty_vt
  auto full_k = [&](int s) { return bars + 8 * (2 + s); };
  auto full_v = [&](int s) { return bars + 8 * (2 + kStages + s); };
  auto full_vt = [&](int s) { return bars + 8 * (2 + 2 * kStages + s); };
  auto empty_k = [&](int s) { return bars + 8 * (2 + 3 * kStages + s); };
  auto empty_v = [&](int s) { return bars + 8 * (2 + 4 * kStages + s); };
  auto empty_vt = [&](int s) { return bars + 8 * (2 + 5 * kStages + s); };
  // kTv 1: the keys of the sequence in V slot s (128 but in a sequence's
  // last tile), written by the copying thread before it arms the slot's
  // full barrier (its arrival releases the write, the transposers' wait
  // acquires it); -1 after the last tile: the transposers stop
  auto v_keys = [&](int s) { return bars + 8 * cfg::kBars + 4 * s; };
  constexpr uint32_t kConsumerWarps = cfg::kConsumers / 32;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t works = p.B * p.Hq * row_tiles;

  if (tid == 0) {
    mbar_init(full_q, 1);
    mbar_init(empty_q, kConsumerWarps);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(full_vt(s), kTvArrivals);
      mbar_init(empty_k(s), kConsumerWarps);
      mbar_init(empty_v(s), kTvArrivals);
      mbar_init(empty_vt(s), kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp < 4) {
    regs_dealloc<cfg::kProducerRegs>();
    if (warp == 0) {
      // The copies: fwd_ws_kernel's producer, one atom per row.
      if (lane == 0) {
        tma_prefetch_map(&tq);
        tma_prefetch_map(&tk);
        tma_prefetch_map(&tv);
        int q_round = 0;  // work tiles with keys so far (uses of the Q buffer)
        int kv = 0;       // K / V tiles so far (uses of the rings)
        for (int64_t w = blockIdx.x; w < works; w += gridDim.x) {
          fwd_block fb;
          if (!fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb) || fb.n_tiles == 0) continue;
          const int b = static_cast<int>(fb.c.seq.bidx), h = static_cast<int>(fb.h), kvh = static_cast<int>(fb.kvh);
          if (q_round > 0) mbar_wait(empty_q, (q_round - 1) & 1);
          mbar_expect_tx(full_q, cfg::kQBytes);
          tma_load_4d(sq, &tq, 0, static_cast<int>(fb.c.seq.q_row0 + fb.m0), h, b, full_q);
          ++q_round;
          for (int it = 0; it < fb.n_tiles; ++it, ++kv) {
            const int s = kv % kStages, use = kv / kStages;
            const int n0 = static_cast<int>(fb.c.seq.k_row0) + (fb.nb_lo + it) * kBN;  // stored row
            if (use > 0) mbar_wait(empty_k(s), (use - 1) & 1);
            mbar_expect_tx(full_k(s), cfg::kTileBytes);
            tma_load_4d(sk + s * cfg::kTileBytes, &tk, 0, n0, kvh, b, full_k(s));
            if (use > 0) mbar_wait(empty_v(s), (use - 1) & 1);  // transposed
            if constexpr (kTv == 1) {
              const int64_t left = fb.c.seq.lk - static_cast<int64_t>(fb.nb_lo + it) * kBN;
              st_shared_s32(v_keys(s), left < kBN ? (left > 0 ? static_cast<int>(left) : 0) : kBN);
            }
            mbar_expect_tx(full_v(s), cfg::kTileBytes);
            tma_load_4d(sv + s * cfg::kTileBytes, &tv, 0, n0, kvh, b, full_v(s));
          }
        }
        if constexpr (kTv == 1) {
          // the transposers' stop: slot kv's next use, once they are done with its last
          const int s = kv % kStages, use = kv / kStages;
          if (use > 0) mbar_wait(empty_v(s), (use - 1) & 1);
          st_shared_s32(v_keys(s), -1);
          mbar_arrive(full_v(s));
        }
        // (No copy can still be landing when the block exits: the
        // transposers wait for every V, the consumers for every Q and K.)
      }
    } else if (kTv == 1) {
      // The transposers of kTv 1: V slot -> V^T slot, tile by tile in the
      // copying thread's order, each tile's key count from it (v_keys): no
      // work-tile bookkeeping here, so that the loop fits 24 registers.
      for (int kv = 0;; ++kv) {
        const int s = kv % kStages, use = kv / kStages;
        mbar_wait(full_v(s), use & 1);
        // lane 0 reads the count (and alone arrives on empty_v below, after
        // the __syncwarp), the others take it by shuffle: the word's next
        // write, after the copying thread's wait on empty_v, is then ordered
        // after its only read by one thread's arrive -> wait (read by all 32
        // lanes, racecheck reported the write as a WAR hazard: it does not
        // follow __syncwarp into the arrival of another lane)
        int v_rows = lane == 0 ? ld_shared_s32(v_keys(s)) : 0;
        v_rows = __shfl_sync(0xffffffffu, v_rows, 0);
        if (v_rows < 0) break;
        if (use > 0) mbar_wait(empty_vt(s), (use - 1) & 1);  // the consumers' P V of its last use is done
        const uint32_t vt_s = svt + s * cfg::kTileBytes, v_s = sv + s * cfg::kTileBytes;
        if (v_rows < kBN)
          fp8_ws_transpose_v_ldsm<true>(vt_s, v_s, warp - 1, lane, v_rows);
        else
          fp8_ws_transpose_v_ldsm<false>(vt_s, v_s, warp - 1, lane, kBN);
        fence_proxy_async();  // every lane its own st.shared to V^T -> wgmma's proxy
        __syncwarp();         // the warp's stores and V reads, then one arrival for it
        if (lane == 0) {
          mbar_arrive(full_vt(s));
          mbar_arrive(empty_v(s));
        }
      }
    } else if (warp >= 2) {
      // The transposers: V slot -> V^T slot, tile by tile in the producer's order.
      const int id = tid - 64;
      int kv = 0;
      for (int64_t w = blockIdx.x; w < works; w += gridDim.x) {
        int n = 0, last_rows = kBN;
        {
          fwd_block fb;
          if (!fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb)) continue;
          n = fb.n_tiles;
          // keys of the sequence in the block's last tile
          if (n > 0) {
            const int64_t left = fb.c.seq.lk - static_cast<int64_t>(fb.nb_lo + n - 1) * kBN;
            last_rows = left < kBN ? static_cast<int>(left) : kBN;
          }
        }
        for (int it = 0; it < n; ++it, ++kv) {
          const int s = kv % kStages, use = kv / kStages;
          mbar_wait(full_v(s), use & 1);
          if (use > 0) mbar_wait(empty_vt(s), (use - 1) & 1);  // the consumers' P V of its last use is done
          const int v_rows = it == n - 1 ? last_rows : kBN;
          const uint32_t vt_s = svt + s * cfg::kTileBytes, v_s = sv + s * cfg::kTileBytes;
          if (v_rows < kBN)
            fp8_ws_transpose_v<true>(vt_s, v_s, id, v_rows);
          else
            fp8_ws_transpose_v<false>(vt_s, v_s, id, kBN);
          fence_proxy_async();  // this thread's st.shared to V^T -> wgmma's proxy (and its V reads before the copy's
                                // writes)
          mbar_arrive(full_vt(s));
          mbar_arrive(empty_v(s));
        }
      }
    }
  } else {
    regs_alloc<cfg::kConsumerRegs>();
    const int cw = warp - 4, wg = cw >> 2, g = lane >> 2, t = lane & 3;
    const int wrow = cw * 16;  // this warp's rows in the block
    const uint32_t q_base = sq + wg * 64 * 128;
    int q_round = 0, kv = 0;  // as the producer counts them

    float o[1][kDB][4];
    float row_m[1][2], row_l[1][2], alpha[1][2];
    float s[1][kNB][4];        // S of the next tile, then its P in f32
    uint32_t pa[kBN / 32][4];  // P of the current tile as e4m3 A fragments
    float tmp[1][kDB][4];      // P V of one tile (from zero)

    // Turn-taking as in fwd_ws_kernel: a warpgroup issues its products only
    // in its turn, then hands the turn to the other.
    auto turn_wait = [&]() {
      if constexpr (kTurns) named_sync(kWsTurn0 + wg, 256);
    };
    auto turn_pass = [&]() {
      if constexpr (kTurns) named_arrive(kWsTurn0 + (wg + 1) % kCWG, 256);
    };
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    if (kTurns && wg == kCWG - 1) named_arrive(kWsTurn0, 256);

    for (int64_t w = blockIdx.x; w < works; w += gridDim.x) {
      fwd_block fb;
      if (!fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb)) continue;
      const seq_ctx &c = fb.c;
      const int64_t m0 = fb.m0;
      const int n = fb.n_tiles;
      const float qk_descale =
          fp8_descale(p.q_descale, p.qds, fb.b, fb.kvh) * fp8_descale(p.k_descale, p.kds, fb.b, fb.kvh);
#pragma unroll
      for (int db = 0; db < kDB; ++db) o[0][db][0] = o[0][db][1] = o[0][db][2] = o[0][db][3] = 0.f;
      row_m[0][0] = row_m[0][1] = -INFINITY;
      row_l[0][0] = row_l[0][1] = 0.f;

      auto slot = [&](int it) { return (kv + it) % kStages; };
      auto full_parity = [&](int it) { return static_cast<uint32_t>(((kv + it) / kStages) & 1); };
      // S = Q K^T of tile it: k32 steps of 32 bytes within the atom (fwd_fp8_kernel's
      // s_issue), the first one overwriting s (wgmma_e4m3_128_first: S's old values are dead)
      auto s_issue = [&](int it) {
        const uint32_t k_base = sk + slot(it) * cfg::kTileBytes;
        wgmma_e4m3_128_first::ss(s[0], sw128_desc_lo(q_base, 0), sw128_desc_lo(k_base, 0));
#pragma unroll
        for (int kk = 1; kk < kD / 32; ++kk)
          wgmma<e4m3_t, kBN>::ss(s[0], sw128_desc_lo(q_base + kk * 32, 0), sw128_desc_lo(k_base + kk * 32, 0), 1);
        wgmma_commit();
      };
      // P V of tile it into tmp: 32 keys = 32 bytes of every V^T row a step,
      // the first overwriting tmp (fwd_fp8_kernel's pv_issue; the last tile's
      // tmp is dead once added into O)
      auto pv_issue = [&](int it) {
        const uint32_t vt = svt + slot(it) * cfg::kTileBytes;
        wgmma_e4m3_128_first::rs(tmp[0], pa[0], sw128_desc_lo(vt, 0));
#pragma unroll
        for (int kk = 1; kk < kBN / 32; ++kk) wgmma<e4m3_t, kD>::rs(tmp[0], pa[kk], sw128_desc_lo(vt + kk * 32, 0), 1);
        wgmma_commit();
      };
      // S of tile it is in: its K slot is free, and after the tile's last S the Q buffer too.
      auto s_done = [&](int it) {
        release(empty_k(slot(it)));
        if (it == n - 1) release(empty_q);
      };
      auto s_softmax = [&](int it) {
        fence_regs(s[0]);
        fp8_scores_softmax<false>(p, c, s, alpha, row_m, row_l, qk_descale, m0 + wrow,
                                  static_cast<int64_t>(fb.nb_lo + it) * kBN, g, t);
      };
      auto p_to_frags = [&]() {
#pragma unroll
        for (int kk = 0; kk < kBN / 32; ++kk) fp8_p_frag(pa[kk], s[0], kk);
      };
      // once P V of a tile is in: o = o * a + tmp (a: that tile's alpha)
      auto pv_add = [&](const float(&a)[2]) {
        fence_regs(tmp[0]);
        fp8_pv_add(o, tmp, 0, a);
      };

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
          mbar_wait(full_vt(slot(it)), full_parity(it));
          turn_wait();
          wgmma_fence();  // pa written, tmp read by pv_add, s read by p_to_frags
          pv_issue(it);
          s_issue(it + 1);
          turn_pass();
          wgmma_wait<1>();  // P V of it (the older group) is in; S may still run
          release(empty_vt(slot(it)));
          pv_add(alpha[0]);  // tile it's alpha: the softmax of it + 1 has not run yet
          wgmma_wait<0>();
          s_done(it + 1);
          s_softmax(it + 1);
          p_to_frags();
        }
        mbar_wait(full_vt(slot(n - 1)), full_parity(n - 1));
        turn_wait();
        wgmma_fence();
        pv_issue(n - 1);
        turn_pass();
        wgmma_wait<0>();
        release(empty_vt(slot(n - 1)));
        pv_add(alpha[0]);
        ++q_round;
        kv += n;
      }
      // The block's bookkeeping recomputed rather than kept live across the loop.
      fwd_block fb_out;
      fwd_ws_block<kBM, kBN>(p, w, row_tiles, heads_inner, &fb_out);
      fp8_store<E>(p, fb_out, o, row_m, row_l, fb_out.m0 + wrow, g, t);
    }
    // The last warpgroup's last pass (or its opening one) is still pending on
    // warpgroup 0's barrier: take it, so none is left behind.
    if (kTurns && wg == 0) turn_wait();
  }
#endif
}

}  // namespace fa_cuda

#endif
