// The per-element tensors of the score -- an additive bias or a boolean
// mask -- read from a tile that the copy engine put in shared memory
// (fwd_ws_kernel.cuh and bwd_ws_kernel.cuh with kScoreTile), for
// fwd_tile.cuh's fwd_scores_arith (row, apply: a thread's column pairs) and
// bwd_tile.cuh's bwd_p_ds_arith (col, term: the backward's transposed walk).
// rules.cuh's score_full reads them from global memory element by element
// with 64-bit index arithmetic (the per-element kernels); here a thread
// reads the pair of adjacent columns it holds in one shared load (the
// backward one element a load), from the tile's 128-byte swizzle (16-byte
// chunk c of row r stored at c ^ (r % 8), the layout TMA writes: the eight
// rows a warp reads at once fall in different banks). The rule is src/rules/score.h's: s += bias[b, h, i, j];
// s = -inf where mask[b, h, i, j] is false.
#ifndef FA_CUDA_SCORE_TILE_CUH
#define FA_CUDA_SCORE_TILE_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "mma.cuh"
#include "rules.cuh"

namespace fa_cuda {

// How the warp-specialized kernels' consumers score (a template argument):
// the band only, the arithmetic options (score_arith.cuh; p.arith_only),
// those and a bias or mask tile (p.fwd_tile, p.bwd_tile), the arithmetic
// options and dropout (dropout_tile.cuh; p.arith_drop), or all of them (a
// tile and dropout: p.fwd_tile, p.bwd_tile with p.has_dropout).
enum { kScoreBand = 0, kScoreArith = 1, kScoreTile = 2, kScoreDrop = 3, kScoreTileDrop = 4 };
constexpr bool score_has_tile(int k) {
  return k == kScoreTile || k == kScoreTileDrop;
}
constexpr bool score_has_drop(int k) {
  return k == kScoreDrop || k == kScoreTileDrop;
}

// A reader's per-row part: the row's address at the thread's first column
// and its swizzle key ((row % 8) << 4), computed once per row.
struct score_tile_row {
  uint32_t addr, key;
};

// The backward's walk (bwd_tile.cuh's bwd_p_ds_arith, which holds S^T): a
// thread's elements of one key column at query rows row0 + 8 mb. Those rows
// share row0's swizzle key, so element mb is at addr + mb * step (step: 8
// rows, 1 KiB; 0 where the tile is one row for all).
struct score_tile_col {
  uint32_t addr, step;
};

// No tensor: the arithmetic score as it is.
struct no_score_tile {
  __device__ __forceinline__ score_tile_row row(int, int) const { return {0u, 0u}; }
  __device__ __forceinline__ void apply(const score_tile_row &, int, float &, float &) const {}
  __device__ __forceinline__ score_tile_col col(int, int) const { return {0u, 0u}; }
  __device__ __forceinline__ float term(const score_tile_col &, int) const { return 0.f; }
};

// The two 16-bit elements of a word as f32.
template <typename E>
__device__ __forceinline__ void pair_to_f32(uint32_t w, float *lo, float *hi) {
  if constexpr (std::is_same<E, bf16_t>::value) {
    *lo = __uint_as_float(w << 16);
    *hi = __uint_as_float(w & 0xffff0000u);
  } else {
    __half2 h;
    memcpy(&h, &w, 4);
    const float2 f = __half22float2(h);
    *lo = f.x;
    *hi = f.y;
  }
}

// A bias tile of E: atoms of 64 columns (128 bytes a row), atom_bytes apart;
// rows_bcast: the bias is the same for every row (its tile is one row).
template <typename E>
struct bias_score_tile {
  uint32_t base, atom_bytes;
  bool rows_bcast;
  // the tile's local row `row`, thread t of its quad (columns 8 nb + 2 t, + 1)
  __device__ __forceinline__ score_tile_row row(int row, int t) const {
    const int r = rows_bcast ? 0 : row;
    return {base + r * 128 + 4 * t, static_cast<uint32_t>(r & 7) << 4};
  }
  // x0, x1 (log2 units) += the bias at the row's columns 8 nb + 2 t, + 1
  __device__ __forceinline__ void apply(const score_tile_row &rw, int nb, float &x0, float &x1) const {
    const uint32_t a = rw.addr + (nb >> 3) * atom_bytes + ((static_cast<uint32_t>(nb & 7) << 4) ^ rw.key);
    uint32_t w;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w) : "r"(a));
    float b0, b1;
    pair_to_f32<E>(w, &b0, &b1);
    x0 = fmaf(b0, kLog2e, x0);
    x1 = fmaf(b1, kLog2e, x1);
  }
  __device__ __forceinline__ score_tile_col col(int row0, int c) const {
    const int r = rows_bcast ? 0 : row0;
    return {base + (c >> 6) * atom_bytes + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2,
            rows_bcast ? 0u : 1024u};
  }
  // the bias at the column's row row0 + 8 mb, in log2 units
  __device__ __forceinline__ float term(const score_tile_col &e, int mb) const {
    uint16_t w;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(w) : "r"(e.addr + mb * e.step));
    float b, unused;
    pair_to_f32<E>(w, &b, &unused);
    return b * kLog2e;
  }
};

// A mask tile of bytes: 128 columns a row (one atom: a tile of 128 keys, or
// with 64-key tiles a pair of them, c0 = 0 or 64 the tile's first column).
struct mask_score_tile {
  uint32_t base;
  bool rows_bcast;
  int c0 = 0;
  __device__ __forceinline__ score_tile_row row(int row, int t) const {
    const int r = rows_bcast ? 0 : row;
    return {base + r * 128 + 2 * t, static_cast<uint32_t>(r & 7) << 4};
  }
  // x0, x1 = -inf where the mask is false at the row's columns 8 nb + 2 t, + 1
  __device__ __forceinline__ void apply(const score_tile_row &rw, int nb, float &x0, float &x1) const {
    const uint32_t a = rw.addr + (nb & 1) * 8 + ((static_cast<uint32_t>((c0 >> 4) + (nb >> 1)) << 4) ^ rw.key);
    uint16_t w;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(w) : "r"(a));
    if (!(w & 0xff)) x0 = -INFINITY;
    if (!(w >> 8)) x1 = -INFINITY;
  }
  __device__ __forceinline__ score_tile_col col(int row0, int c) const {
    const int r = rows_bcast ? 0 : row0;
    c += c0;
    return {base + r * 128 + (((c >> 4) ^ (r & 7)) << 4) + (c & 15), rows_bcast ? 0u : 1024u};
  }
  // 0 where the mask keeps the column's row row0 + 8 mb, else -inf
  __device__ __forceinline__ float term(const score_tile_col &e, int mb) const {
    uint16_t w;
    asm volatile("ld.shared.u8 %0, [%1];\n" : "=h"(w) : "r"(e.addr + mb * e.step));
    return w ? 0.f : -INFINITY;
  }
};

}  // namespace fa_cuda

#endif
