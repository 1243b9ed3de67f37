// What the two decode kernels share (decode_kernel.cuh on CUDA cores,
// decode_mma_kernel.cuh on tensor cores; decode.cuh has the design): which
// keys a block owns, the K/V tile stream, the query rows, the final merge
// of the block's partial softmax states into o (or the split's partial o),
// and the merge of the splits by the last split block of an item.
#ifndef FA_CUDA_DECODE_PARTS_CUH
#define FA_CUDA_DECODE_PARTS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "../rules/kv_address.h"
#include "../rules/visibility.h"
#include "decode.cuh"
#include "decode_merge.cuh"
#include "decode_trace.cuh"
#include "mma.cuh"
#include "pdl.cuh"

namespace fa_dec {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_f32(float x) {
  return x;
}
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float from_f32(float x) {
  return x;
}

// 8 consecutive elements of the head dim as f32, from 16 aligned bytes
// (shared memory: the K/V tiles; global memory: the query rows).
template <typename T>
struct chunk8;
template <>
struct chunk8<__nv_bfloat16> {
  static __device__ __forceinline__ void get(const __nv_bfloat16 *s, float f[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(s);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      f[2 * t] = __uint_as_float(w[t] << 16);
      f[2 * t + 1] = __uint_as_float(w[t] & 0xffff0000u);
    }
  }
};
template <>
struct chunk8<__half> {
  static __device__ __forceinline__ void get(const __half *s, float f[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(s);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      __half2 h;
      memcpy(&h, &w[t], 4);
      const float2 x = __half22float2(h);
      f[2 * t] = x.x;
      f[2 * t + 1] = x.y;
    }
  }
};
template <>
struct chunk8<float> {
  static __device__ __forceinline__ void get(const float *s, float f[8]) {
    const float4 a = *reinterpret_cast<const float4 *>(s), b = *reinterpret_cast<const float4 *>(s + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};

// A block's work: row block rb of kv head kvh of sequence b, and split sp's
// share of the keys [jlo, jhi) the band lets those rows see, in whole tiles
// of BK keys: tile t of the block starts at key j0 + t * step, keys from j1
// on are past the share. Two ways to share (so the split boundaries, hence
// the bits for a given num_splits, depend on BK and on the way):
//   - interleaved (p.interleave; caches without a block table): split sp
//     takes tiles sp, sp + nsplit, sp + 2 nsplit, ... of the row (step =
//     nsplit * BK, j1 = jhi), so at any moment the splits of a kv head read
//     neighbouring tiles, one region of memory, instead of nsplit regions a
//     chunk apart (H200, B = 1, 32k keys in [B, Hkv, L, D]: 15% faster a
//     call; decode.cu's interleave_splits has the figures);
//   - runs (paged caches, where interleaving measured slower): split sp
//     takes the sp-th run of ceil(span / nsplit) keys rounded up to whole
//     tiles.
struct block_work {
  int rb, sp, ntiles;
  int64_t kvh, b, len, j0, j1, step;
  fa__band bd;
};

__device__ __forceinline__ block_work block_work_of(const fa__dec_params &p, int BK) {
  block_work w;
  // 32-bit divisions (the grid is under 2^31 blocks): a 64-bit one is a
  // called subroutine of ~100 instructions at every block's start
  uint32_t x = blockIdx.x;
  const uint32_t nrb = static_cast<uint32_t>(p.nrb), ns = static_cast<uint32_t>(p.nsplit),
                 hkv = static_cast<uint32_t>(p.Hkv);
  w.rb = static_cast<int>(x % nrb);
  x /= nrb;
  w.sp = static_cast<int>(x % ns);
  x /= ns;
  w.kvh = x % hkv;
  w.b = x / hkv;
  w.len = p.cache_seqlens ? fa__dec_clamp(p.cache_seqlens[w.b], p.bounds.max_len) : p.fixed_len;
  const int64_t lk = w.len + p.L_new;
  w.bd.lq = p.Lq;
  w.bd.lk = lk;
  w.bd.left = p.wl;
  w.bd.right = p.wr;
  w.bd.diag_shift = p.top_left ? 0 : lk - p.Lq;
  int64_t jlo, jhi;
  fa__band_cols(&w.bd, 0, p.Lq, &jlo, &jhi);
  if (p.interleave) {
    w.step = static_cast<int64_t>(p.nsplit) * BK;
    w.j0 = jlo + static_cast<int64_t>(w.sp) * BK;
    w.j1 = jhi;
    w.ntiles = w.j0 < jhi ? static_cast<int>((jhi - w.j0 + w.step - 1) / w.step) : 0;
    return w;
  }
  const int64_t span = jhi > jlo ? jhi - jlo : 0;
  int64_t chunk = (span + p.nsplit - 1) / p.nsplit;
  chunk = (chunk + BK - 1) / BK * BK;
  w.step = BK;
  w.j0 = jlo + w.sp * chunk < jhi ? jlo + w.sp * chunk : jhi;
  w.j1 = w.j0 + chunk < jhi ? w.j0 + chunk : jhi;
  w.ntiles = static_cast<int>((w.j1 - w.j0 + BK - 1) / BK);
  return w;
}

// Streams a block's K and V tiles of BK rows through a STAGES-deep ring of
// shared memory with 16-byte cp.async copies (keys past j1 and columns past
// D / Dv zero-filled). Thread tid copies column tid % UPR of the UPT
// consecutive rows (tid / UPR) * UPT + i of a tile: a warp still reads whole
// rows, and a thread's rows lie in one page unless they straddle a page
// boundary (pages of 8 or more rows, tiles starting on a multiple of 8), so
// the thread finds them with one block-table read and one base address
// (kv_address.h's rule: key j of sequence b is row j % page_size of page
// block_table[b][j / page_size]; contiguous: row j of "page" b); straddling
// threads go row by row. Rows are found one tile ahead of their copies, so
// the block-table reads are in flight during a tile's arithmetic: the
// loop's instruction count is what bounds a decode block's speed. A run's
// page index is kept as loaded and turned into offsets only when its tile
// is issued: offsets computed at once made the warp wait there for the
// load every tile (an L1 hit mostly; with pages of 16 rows a new line of
// the block table every 8 tiles), on a loop that takes ~1 us a tile on its
// own instructions. H200, pages of 16, GQA 32/8: B = 8, 8k keys 0.0783 /
// 0.0794 -> 0.0729 / 0.0720 ms a call (contiguous [B, L, Hkv, D]: 0.0713),
// MHA 0.289 -> 0.252; pages of 256 unchanged
// (bench/results/2026-12-02-h200-decode-paged.txt).
// Tiles are [BK][KD] row-major, or with mma.cuh's XOR swizzle (kSwizzle)
// for ldmatrix.
template <typename T, int KD, int BK, int STAGES, bool kSwizzle>
struct kv_stream {
  static constexpr int EPU = 16 / static_cast<int>(sizeof(T));  // elements per unit
  static constexpr int UPR = KD / EPU;                          // units per row
  static constexpr int UPT = BK * UPR / kThreads;               // rows (units) per thread per K (or V) tile
  static constexpr size_t tile_bytes = static_cast<size_t>(BK) * KD * sizeof(T);
  static constexpr size_t stage_bytes = 2 * tile_bytes;
  static constexpr size_t bytes = STAGES * stage_bytes;
  static_assert(kThreads % UPR == 0, "a thread's units share one column");
  static_assert(BK * UPR % kThreads == 0, "whole units per thread");

  const T *kbase, *vbase;
  int64_t ks0, ks2, vs0, vs2, pages;
  const int32_t *bt_row;         // NULL: contiguous
  uint32_t psz, pshift, pipe_s;  // pshift: log2 of the page size when a power of two, else 0
  int64_t seq, j0, j1, step;     // sequence b, the split's tiles (block_work)
  int ntiles, cu, r0;            // r0: the thread's first row in a tile
  bool kcol, vcol;
  bool same;        // K and V caches share their page and row strides
  uint64_t policy;  // L2 policy of the copies (fa__dec_params::kv_policy)
  // where the thread's rows of the next tile are: a run from element offsets
  // fk / fv (nvalid of its UPT rows inside the split; paged: from row
  // run_row of page run_page, the block-table entry as loaded, offsets made
  // at issue), or row by row (koff / voff, -1 past the split)
  bool run;
  int nvalid;
  int64_t fk, fv;
  int32_t run_page;
  uint32_t run_row;
  int64_t koff[UPT], voff[UPT];

  __device__ __forceinline__ void init(const fa__dec_params &p, const block_work &w, const T *pipe, int tid) {
    cu = tid % UPR;
    r0 = tid / UPR * UPT;
    kcol = cu * EPU < p.D;
    vcol = cu * EPU < p.Dv;
    kbase = static_cast<const T *>(p.k) + w.kvh * p.ks[1] + cu * EPU;
    vbase = static_cast<const T *>(p.v) + w.kvh * p.vs[1] + cu * EPU;
    ks0 = p.ks[0];
    ks2 = p.ks[2];
    vs0 = p.vs[0];
    vs2 = p.vs[2];
    same = ks0 == vs0 && ks2 == vs2;
    pages = p.bounds.pages;
    bt_row = p.map.block_table ? p.map.block_table + w.b * p.map.bt_stride : nullptr;
    psz = static_cast<uint32_t>(p.map.page_size);
    pshift = (psz & (psz - 1)) == 0 ? static_cast<uint32_t>(__ffs(static_cast<int>(psz)) - 1) : 0;
    pipe_s = fa_cuda::smem_addr(pipe);
    policy = p.kv_policy;
    seq = w.b;
    j0 = w.j0;
    j1 = w.j1;
    step = w.step;
    ntiles = w.ntiles;
    locate(0);
  }

  __device__ __forceinline__ void locate(int t) {
    const int64_t jr = j0 + static_cast<int64_t>(t) * step + r0;  // the thread's first key
    const int64_t left = j1 - jr;
    nvalid = left <= 0 ? 0 : left >= UPT ? UPT : static_cast<int>(left);
    if (!bt_row) {
      run = true;
      fk = seq * ks0 + jr * ks2;
      fv = seq * vs0 + jr * vs2;
      return;
    }
    const uint32_t j = static_cast<uint32_t>(nvalid > 0 ? jr : 0);
    const uint32_t idx0 = pshift ? j >> pshift : j / psz, row0 = j - idx0 * psz;
    run = row0 + UPT <= psz;
    if (run) {
      run_page = __ldg(bt_row + idx0);  // used in issue(), a tile later
      run_row = row0;
      return;
    }
#pragma unroll
    for (int i = 0; i < UPT; ++i) {
      uint32_t row = row0 + static_cast<uint32_t>(i), idx = idx0;
      if (pshift) {
        idx += row >> pshift;
        row &= psz - 1;
      } else {
        while (row >= psz) {  // pages of fewer rows than UPT: several steps
          row -= psz;
          ++idx;
        }
      }
      const bool ok = i < nvalid;
      const int64_t page = ok ? fa__dec_clamp(__ldg(bt_row + idx), pages - 1) : 0;
      koff[i] = ok ? page * ks0 + row * ks2 : -1;
      voff[i] = !ok ? -1 : same ? koff[i] : page * vs0 + row * vs2;
    }
  }

  // byte offset of the thread's row r0 + i, column unit cu, in a tile
  __device__ __forceinline__ uint32_t smem_off(int i) const {
    const int el = kSwizzle ? fa_cuda::swz<KD>(r0 + i, cu * EPU) : (r0 + i) * KD + cu * EPU;
    return static_cast<uint32_t>(el * sizeof(T));
  }

  // Issues tile t into its stage (nothing past the last tile), then finds the
  // rows of tile t + 1; always commits a group so that waits count evenly.
  __device__ __forceinline__ void issue(int t) {
    if (t < ntiles) {
      if (bt_row && run) {
        const int64_t page = fa__dec_clamp(run_page, pages - 1);
        fk = page * ks0 + run_row * ks2;
        fv = page * vs0 + run_row * vs2;
      }
      // the stage's address through a shuffle: ptxas then keeps it in a
      // per-thread register, out of the copies' addressing, where with the
      // L2 policy it miscompiles (mma.cuh, cp_async16_policy)
      const uint32_t ks = __shfl_sync(0xffffffffu, pipe_s + static_cast<uint32_t>((t % STAGES) * stage_bytes), 0);
      const uint32_t vs = ks + static_cast<uint32_t>(tile_bytes);
      if (run && nvalid == UPT) {
        // A whole run (every tile but a split's last, contiguous or inside
        // one page): one pointer per cache and no per-row choice. The general
        // loop below chose between run and row offsets for every row in
        // 64-bit selects: 262 of the ~560 instructions a warp spends on a
        // tile went to the 16 copies (scripts/gpu/sass.sh); here ~80, and a
        // block alone streams 13-15% faster on the H200 (0.85 us a tile;
        // bench/results/2026-12-02-h200-decode-splits.txt).
        const T *kp = kbase + fk, *vp = vbase + fv;
        const int kn = kcol ? 16 : 0, vn = vcol ? 16 : 0;
#pragma unroll
        for (int i = 0; i < UPT; ++i) {
          fa_cuda::cp_async16_policy(ks + smem_off(i), kp + i * ks2, kn, policy);
          fa_cuda::cp_async16_policy(vs + smem_off(i), vp + i * vs2, vn, policy);
        }
      } else {
#pragma unroll
        for (int i = 0; i < UPT; ++i) {
          const bool ok = run ? i < nvalid : koff[i] >= 0;
          const int64_t ko = !ok ? 0 : run ? fk + i * ks2 : koff[i];
          const int64_t vo = !ok ? 0 : run ? fv + i * vs2 : voff[i];
          fa_cuda::cp_async16_policy(ks + smem_off(i), kbase + ko, ok && kcol ? 16 : 0, policy);
          fa_cuda::cp_async16_policy(vs + smem_off(i), vbase + vo, ok && vcol ? 16 : 0, policy);
        }
      }
      if (t + 1 < ntiles) locate(t + 1);
    }
    fa_cuda::cp_async_commit();
  }

  __device__ __forceinline__ const T *k_tile(const T *pipe, int t) const {
    return pipe + (t % STAGES) * (stage_bytes / sizeof(T));
  }
  __device__ __forceinline__ const T *v_tile(const T *pipe, int t) const {
    return k_tile(pipe, t) + BK * KD;
  }
};

// Columns c .. c + 7 (c a multiple of 8) of query row r (head kvh * group +
// r / Lq, new token r % Lq) of sequence b as f32, rotated at position len +
// r % Lq when the call rotates (src/rules/rotary.h's rule), unscaled; 0 past
// R rows or D columns. One 16-byte load where the row allows it. The
// chunk's loads do not depend on each other, and the kernels load all of a
// thread's chunks before they store any: with a store to shared memory
// between them every chunk cost a round trip of its own, ~10 us at the start
// of each tensor-core decode block (16 rows: 16 chunks a thread, one after
// another).
template <typename T>
__device__ __forceinline__ void query_chunk(const fa__dec_params &p, const block_work &w, int r, int c, float x[8]) {
  if (r >= p.R) {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = 0.f;
    return;
  }
  const int lq = static_cast<int>(p.Lq);  // <= R: 32-bit divisions
  const int hi = r / lq, i = r - hi * lq;
  const T *qrow = static_cast<const T *>(p.q) + w.b * p.qs[0] + (w.kvh * p.group + hi) * p.qs[1] + i * p.qs[2];
  if (c + 8 <= p.D && (reinterpret_cast<uintptr_t>(qrow + c) & 15) == 0) {
    chunk8<T>::get(qrow + c, x);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = c + e < p.D ? to_f32(qrow[c + e]) : 0.f;
  }
  if (!p.rot_cos || c >= p.rot_dim) return;
  const int half = p.rot_dim / 2;
  const int64_t at = fa__dec_clamp(w.len + i, p.bounds.rot_len - 1);
  const float *cr = p.rot_cos + at * half, *sr = p.rot_sin + at * half;
  float y[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int d = c + e;
    if (d >= p.rot_dim) {
      y[e] = x[e];
    } else if (p.rot_interleaved) {  // pairs (2t, 2t + 1): both in the chunk
      const int t = d / 2;
      const float pair = x[e ^ 1];
      y[e] = (e & 1) ? pair * sr[t] + x[e] * cr[t] : x[e] * cr[t] - pair * sr[t];
    } else if (d < half) {
      y[e] = x[e] * cr[d] - to_f32(qrow[d + half]) * sr[d];
    } else {
      y[e] = to_f32(qrow[d - half]) * sr[d - half] + x[e] * cr[d - half];
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = y[e];
}

// The block's RB query rows as chunks of 8 columns (query_chunk's), thread
// tid's chunks e = tid + i kThreads of the RB x KD / 8 (row e / (KD / 8),
// columns 8 (e % (KD / 8)) ...): all loaded before the kernel stores any.
template <typename T, int RB, int KD>
struct query_chunks {
  static constexpr int kChunks = RB * KD / 8, kPer = (kChunks + kThreads - 1) / kThreads;
  float x[kPer][8];
  static __device__ __forceinline__ bool has(int e) { return kChunks % kThreads == 0 || e < kChunks; }
  __device__ __forceinline__ void load(const fa__dec_params &p, const block_work &w, int tid) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = tid + i * kThreads;
      if (has(e)) query_chunk<T>(p, w, w.rb * RB + e / (KD / 8), e % (KD / 8) * 8, x[i]);
    }
  }
  // f(e, chunk e's 8 values) for each of thread tid's chunks
  template <typename F>
  __device__ __forceinline__ void each(int tid, F f) const {
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (has(tid + i * kThreads)) f(tid + i * kThreads, x[i]);
  }
};

// The rows of a block's work, as store_merged and merge_splits index them
// (each computes its rows' merge weights its own way: store_merged over the
// block's groups, merge_splits over the splits with split_weights):
//   - block_rows<RB>: how many of row block w.rb's RB rows lie below R
//     (>= 1: row blocks start below R);
//   - row r of item (w.b, w.kvh) is query row r % Lq of query head
//     w.kvh * group + r / Lq: it starts at row_o in o, its lse is at row_lse
//     (lq: Lq as an int, <= R, so that the divisions are 32-bit, not 64-bit
//     subroutine calls).
template <int RB>
__device__ __forceinline__ int block_rows(const fa__dec_params &p, const block_work &w) {
  const int r0 = w.rb * RB;
  return p.R - r0 < RB ? p.R - r0 : RB;
}
__device__ __forceinline__ int64_t row_o(const fa__dec_params &p, const block_work &w, int lq, int r) {
  return w.b * p.os[0] + (w.kvh * p.group + r / lq) * p.os[1] + (r % lq) * p.os[2];
}
__device__ __forceinline__ int64_t row_lse(const fa__dec_params &p, const block_work &w, int lq, int r) {
  return w.b * p.lses[0] + (w.kvh * p.group + r / lq) * p.lses[1] + (r % lq) * p.lses[2];
}

// The block's NG partial states of its RB rows (state g of row rr: running
// max ms[g * RB + rr] in log2 units, sum ls[...], accumulator as[(g * RB +
// rr) * KD + d]) merged in g order; o = acc / l, lse = m ln 2 + log l, to o
// and lse (one split) or to the split's partial rows. Two steps: thread rr
// turns row rr's maxima into the groups' weights 2^(m_g - M) (in place of
// ms) and sums l (into ls[rr]), storing the row's lse; then each value sums
// its groups' accumulators with those weights. (Each value used to redo its
// row's weights, l and log: at 16 rows of 128 values, ~4 us of a split
// call's critical path on the H200, the block's last step before the merge.)
template <typename T, int NG, int RB, int KD>
__device__ __forceinline__ void store_merged(const fa__dec_params &p, const block_work &w, float *ms, float *ls,
                                             const float *as, int tid) {
  const int64_t item = w.b * p.Hkv + w.kvh;
  const int lq = static_cast<int>(p.Lq);  // <= R: 32-bit divisions, not 64-bit subroutine calls
  const int nr = block_rows<RB>(p, w);
  if (tid < nr) {
    const int rr = tid, r = w.rb * RB + rr;
    float M = -INFINITY;
#pragma unroll
    for (int g = 0; g < NG; ++g) M = fmaxf(M, ms[g * RB + rr]);
    float L = 0.f;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      const float mg = ms[g * RB + rr];
      const float f = M == -INFINITY || mg == -INFINITY ? 0.f : exp2f(mg - M);
      L += f * ls[g * RB + rr];
      ms[g * RB + rr] = f;
    }
    ls[rr] = L;  // (ls[rr] is group 0's, read above)
    const float lse = L > 0.f ? M * kLn2 + logf(L) : -INFINITY;
    if (p.nsplit == 1) {
      if (p.lse) p.lse[row_lse(p, w, lq, r)] = lse;
    } else {
      p.part_lse[(item * p.nsplit + w.sp) * p.R + r] = lse;
    }
  }
  __syncthreads();
  for (int e = tid; e < nr * KD; e += kThreads) {
    const int rr = e / KD, d = e % KD, r = w.rb * RB + rr;  // KD: a power of two
    if (d >= p.Dv) continue;
    float O = 0.f;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      const float f = ms[g * RB + rr];
      if (f != 0.f) O += f * as[(g * RB + rr) * KD + d];
    }
    const float L = ls[rr];
    const float o = L > 0.f ? O / L : 0.f;
    if (p.nsplit == 1) {
      static_cast<T *>(p.o)[row_o(p, w, lq, r) + d] = from_f32<T>(o);
    } else {
      p.part_o[((item * p.nsplit + w.sp) * p.R + r) * p.Dv + d] = o;
    }
  }
}

// Shared memory merge_splits needs at least (a kernel's whole dynamic
// shared memory is free by then, and must hold this): the rows' output
// offsets, the weights and lse values of RB rows of kMaxSplits parts, the
// rows' merged lse, and one split's values of the RB rows.
constexpr size_t merge_splits_min_smem(int RB, int KD) {
  return RB * sizeof(int64_t) + (2 * static_cast<size_t>(RB) * kMaxSplits + RB) * sizeof(float) + 16 +
         static_cast<size_t>(RB) * KD * sizeof(float);
}

// The last split block of an item (rows w.rb * RB .. of kv head w.kvh of
// sequence w.b) merges every split's partial rows into o and lse, with the
// arithmetic of the combine kernel (decode.cu) on the same values in the same
// order, so the bits are the combine's. It runs at the end of the call's
// critical path, so its round trips to L2 overlap and its 128 threads share
// the work:
//   - split k's partial values of the block's nr rows are one contiguous run
//     of nr * Dv floats in part_o; the runs are copied into shared memory
//     with cp.async, as many splits at a time as fit (all of them but for
//     many splits of long rows); meanwhile
//   - the nr x nsplit lse values are loaded (one load each, all in flight)
//     into shared memory, and then warp rr % 4 computes row rr's weights
//     from there (split_weights) while the values still arrive;
//   - thread t owns the merged values t, t + 128, ... of the nr x Dv rows
//     (register accumulators) and sums the splits in split order.
// Partials of other blocks are read from L2 only (__ldcg, cp.async.cg): a
// line this multiprocessor's L1 holds may predate their stores.
// smem / smem_bytes: the kernel's dynamic shared memory, free at this point
// (merge_splits_min_smem at least), 16-byte aligned. live false: a dry run
// (finish_splits says why) over split 0's partial rows alone, storing
// nothing: the same instructions, whatever the values.
template <typename T, int RB, int KD>
__device__ __forceinline__ void merge_splits(const fa__dec_params &p, const block_work &w, unsigned char *smem,
                                             size_t smem_bytes, int tid, bool live) {
  constexpr int MAXO = (RB * KD + kThreads - 1) / kThreads;  // merged values per thread (Dv <= KD)
  const int n = live ? p.nsplit : 1, Dv = p.Dv, r0 = w.rb * RB;
  const int nr = block_rows<RB>(p, w);
  const int run = nr * Dv, upr = run / 4;  // floats and 16-byte units of one split's rows (Dv % 8 == 0)
  const int64_t item = w.b * p.Hkv + w.kvh, kstride = static_cast<int64_t>(p.R) * Dv;
  const float *plse = p.part_lse + item * n * p.R + r0;     // split k, row r0 + rr: plse[k * R + rr]
  const float *po = p.part_o + (item * n * p.R + r0) * Dv;  // split k's run: po + k * kstride
  int64_t *orow = reinterpret_cast<int64_t *>(smem);        // [nr]: where row r0 + rr of o starts
  float *wts = reinterpret_cast<float *>(orow + nr);        // [nr][n]
  float *lse = wts + nr * n;                                // [nr]: the merged rows' lse
  float *lsv = lse + nr;                                    // [nr][n]: the splits' lse
  const size_t hdr = (nr * sizeof(int64_t) + (2 * static_cast<size_t>(nr) * n + nr) * sizeof(float) + 15) / 16 * 16;
  float *staged = reinterpret_cast<float *>(smem + hdr);  // [kc][run]
  const int kc = static_cast<int>((smem_bytes - hdr) / (static_cast<size_t>(run) * sizeof(float)));
  const int lq = static_cast<int>(p.Lq);  // <= R: 32-bit divisions
  int row[MAXO];                          // the row (0 .. nr - 1) of each owned value
  float acc[MAXO];
#pragma unroll
  for (int i = 0; i < MAXO; ++i) {
    const int o = tid + i * kThreads;
    row[i] = o < run ? o / Dv : 0;
    acc[i] = 0.0f;
  }
  for (int k0 = 0; k0 < n; k0 += kc) {
    const int kn = n - k0 < kc ? n - k0 : kc;
    for (int u = tid; u < kn * upr; u += kThreads) {
      const int k = u / upr, c = (u - k * upr) * 4;
      fa_cuda::cp_async16(fa_cuda::smem_addr(staged + k * run + c), po + (k0 + k) * kstride + c, 16);
    }
    fa_cuda::cp_async_commit();
    if (k0 == 0) {
      for (int e = tid; e < nr * n; e += kThreads) {
        const int k = e / nr, rr = e - k * nr;
        lsv[rr * n + k] = __ldcg(plse + static_cast<int64_t>(k) * p.R + rr);
      }
      if (tid < nr) orow[tid] = row_o(p, w, lq, r0 + tid);
      __syncthreads();
      for (int rr = tid >> 5; rr < nr; rr += kThreads / 32) {  // whole warps: split_weights shuffles
        const float *lr = lsv + rr * n;
        const float l = split_weights<true>(
            n, [&](int k) { return lr[k]; }, wts + rr * n);
        if ((tid & 31) == 0) lse[rr] = l;
      }
      if (live) trace_mark(kMarkMergeWeights);
    }
    fa_cuda::cp_async_wait<0>();
    __syncthreads();
    if (live && k0 == 0) trace_mark(kMarkMergeValues);
      // (kept rolled: unrolled, it costs the decode kernels' main loops registers)
#pragma unroll 1
    for (int k = 0; k < kn; ++k) {
      const float *sk = staged + k * run;
#pragma unroll
      for (int i = 0; i < MAXO; ++i) {
        const int o = tid + i * kThreads;
        if (o < run) acc[i] = split_step(acc[i], wts[row[i] * n + k0 + k], sk[o]);
      }
    }
    __syncthreads();  // the next chunk's copies overwrite staged
  }
#pragma unroll
  for (int i = 0; i < MAXO; ++i) {
    const int o = tid + i * kThreads;
    if (live && o < run) static_cast<T *>(p.o)[orow[row[i]] + (o - row[i] * Dv)] = from_f32<T>(acc[i]);
  }
  if (live && tid < nr && p.lse) p.lse[row_lse(p, w, lq, r0 + tid)] = lse[tid];
}

// After store_merged, with splits and counters (p.counters): the block
// counts itself on its item's counter (a semaphore, as CUTLASS's serial
// split-K and stream-K fix-up do); the block that arrives last, when every
// split's partial rows are in memory, merges them (merge_splits) and puts the
// counter back to 0 for the next call on the stream. Every thread of the
// block calls it (it has barriers); blocks never leave the kernel early, so
// every split of an item arrives. Ordering: each thread's partial stores are
// fenced (__threadfence, device scope) before the barrier that precedes
// thread 0's atomic; the last block fences again after its atomic and reads
// the other splits' partials only through L2 (__ldcg, cp.async.cg).
// With p.warm_merge every other split block, once counted, runs the merge
// dry (merge_splits with live false) before it leaves, so that the merge's
// code is in L2 and in some multiprocessors' instruction caches when the
// last blocks run it for real: code that runs once a call otherwise waits
// for DRAM line by line (the K/V stream evicts it from L2), which made the
// fused merge's tail ~6 us at B = 8 and ~20 us at B = 1 (H200,
// decode_trace.cuh).
template <typename T, int RB, int KD>
__device__ __forceinline__ void finish_splits(const fa__dec_params &p, const block_work &w, unsigned char *smem,
                                              size_t smem_bytes, int tid) {
  if (p.nsplit == 1 || !p.counters) return;
  unsigned *const counter = p.counters + (w.b * p.Hkv + w.kvh) * p.nrb + w.rb;
  __threadfence();
  __syncthreads();  // every thread's partial rows stored and fenced; store_merged's shared reads done
  int last = 0;
  if (tid == 0) {
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.nsplit - 1);
    if (last) {
      atomicExch(counter, 0u);  // every split has counted: free for the next call
      __threadfence();
    }
  }
  const bool merger = __syncthreads_or(last);
  if (!merger && !p.warm_merge) return;
  if (merger) {
    __threadfence();
    trace_mark(kMarkMergeStart);
  }
  // (one call for both: the dry run must be the merger's instructions)
  merge_splits<T, RB, KD>(p, w, smem, smem_bytes, tid, merger);
}

}  // namespace fa_dec

#endif
