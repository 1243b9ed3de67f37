// One bias (the inputs' dtype) or one boolean mask read straight from global
// memory, for the D = 256 backward's kernels (bwd_wide_wgmma_kernel.cuh,
// bwd_dq_wgmma_kernel.cuh at kD = 256), whose shared memory has no room for
// score_tile.cuh's tile (the wide kernel uses 226 of 227 KiB). The same two
// interfaces as score_tile.cuh's readers, so bwd_tile.cuh's arithmetic
// forms take either: col / term for the transposed walk (bwd_p_ds_arith),
// row / apply for the row walk (bwd_ds_rows_arith). The rule is
// src/rules/score.h's, at rules.cuh's index (bias_index): s += bias[b, h, i,
// j]; s = -inf where mask[b, h, i, j] is false. A reader is made per tile at
// its origin (i0, j0) in the sequence; elements past the sequence's last row
// or column read that row or column instead (the band hides them: P = 0
// there), so no load leaves the tensor.
#ifndef FA_CUDA_SCORE_GLOBAL_CUH
#define FA_CUDA_SCORE_GLOBAL_CUH

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "params.cuh"
#include "rules.cuh"

namespace fa_cuda {

// The tensor of a call with p.bwd_tile: T is E::storage for a bias, uint8_t
// for a mask; kMask says which rule applies.
template <typename T, bool kMask>
struct global_score_tile {
  const T *base;       // element (b, h, 0, 0)
  int64_t rs, cs;      // row and column strides (0: broadcast)
  int64_t i0, j0;      // the tile's origin in the sequence
  int64_t imax, jmax;  // the sequence's last row and column
  bool pairs;          // the row walk's column pairs are whole aligned words: one load each

  // sequence b (seq: its lengths), query head h, the tile at (i0, j0)
  __device__ __forceinline__ global_score_tile(const fa__cuda_params &p, const fa__seq &seq, int64_t b, int64_t h,
                                               int64_t i0_, int64_t j0_)
      : base(static_cast<const T *>(kMask ? static_cast<const void *>(p.mask) : p.bias) + b * p.tile_s[0] +
             h * p.tile_s[1]),
        rs(p.tile_s[2]),
        cs(p.tile_s[3]),
        i0(i0_),
        j0(j0_),
        imax(seq.lq - 1),
        jmax(seq.lk - 1),
        pairs(cs == 1 && rs % 2 == 0 && reinterpret_cast<uintptr_t>(base) % (2 * sizeof(T)) == 0) {}

  __device__ __forceinline__ int64_t row_of(int64_t i) const { return (i < imax ? i : imax) * rs; }
  __device__ __forceinline__ int64_t col_of(int64_t j) const { return (j < jmax ? j : jmax) * cs; }
  // the element's term in log2 units: the bias times log2 e, or 0 / -inf
  __device__ __forceinline__ float term_of(const T *e) const {
    if constexpr (kMask)
      return *e ? 0.f : -INFINITY;
    else
      return as_f32(*e) * kLog2e;
  }

  // The transposed walk: the column c of the tile at rows row0 + 8 mb.
  struct col_t {
    const T *p;  // the column's element of row 0
    int64_t i;   // row0's row in the sequence
  };
  __device__ __forceinline__ col_t col(int row0, int c) const { return {base + col_of(j0 + c), i0 + row0}; }
  // the term at the column's row row0 + 8 mb
  __device__ __forceinline__ float term(const col_t &e, int mb) const { return term_of(e.p + row_of(e.i + 8 * mb)); }

  // The row walk: row `row` of the tile, its thread t's columns 8 nb + 2 t, + 1.
  struct row_t {
    const T *p;  // the row's element 0
    int64_t j;   // the thread's first column in the sequence
  };
  __device__ __forceinline__ row_t row(int r, int t) const { return {base + row_of(i0 + r), j0 + 2 * t}; }
  // x0, x1 (log2 units) += the terms at the row's columns 8 nb + 2 t, + 1
  // (j is even: tiles start at multiples of 64 keys)
  __device__ __forceinline__ void apply(const row_t &rw, int nb, float &x0, float &x1) const {
    const int64_t j = rw.j + 8 * nb;
    if (pairs && j + 1 <= jmax) {
      float a, b;
      pair_of(rw.p + j, &a, &b);
      x0 += a;
      x1 += b;
      return;
    }
    x0 += term_of(rw.p + col_of(j));
    x1 += term_of(rw.p + col_of(j + 1));
  }
  // the terms of elements e[0], e[1] in one load (term_of's rule on each)
  __device__ __forceinline__ void pair_of(const T *e, float *a, float *b) const {
    struct alignas(2 * sizeof(T)) two {
      T v[2];
    };
    const two w = *reinterpret_cast<const two *>(e);
    *a = term_of(&w.v[0]);
    *b = term_of(&w.v[1]);
  }
};

// The reader of kTile (FA_CUDA_TILE_BIAS, _MASK: p.bwd_tile) for storage type T.
template <typename T, int kTile>
using global_score_tile_of =
    global_score_tile<std::conditional_t<kTile == FA_CUDA_TILE_MASK, uint8_t, T>, kTile == FA_CUDA_TILE_MASK>;

}  // namespace fa_cuda

#endif
