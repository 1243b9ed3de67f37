// The dropout keep bits of a thread's score fragment, for the
// warp-specialized kernels (fwd_ws_kernel.cuh, bwd_ws_kernel.cuh) and the
// D = 256 backward's (bwd_wide_wgmma_kernel.cuh, bwd_dq_wgmma_kernel.cuh), made
// with one Philox call per four elements instead of one per element or
// pair. The rule is src/rules/dropout.h's (rules.cuh's keep_one): one call
// decides the four columns 4 (jg >> 2) .. + 3 of a row, jg = j + k_off.
// In a wgmma fragment those four columns never belong to one thread: in the
// forward (S: rows are queries, a thread's columns 8 nb + 2 t, + 1) lanes t
// and t ^ 1 hold two each; in the backward (S^T: rows are keys, a thread's
// keys g and g + 8) the four lanes g, g ^ 1, g ^ 2, g ^ 3 of one t hold one
// each. So each lane of such a set makes a different call, keeps the four
// bits as a nibble of a 32-bit word (eight calls a word), and the set
// exchanges words with shuffles (the forward one per word, the backward
// three). The calls then cost a quarter of what per-element calls do, a
// half of what keep_pair's do: Philox's twenty 32 x 32 -> 64-bit multiplies
// a call are what dropout costs on the GPU.
// The columns must start groups where the thread's start them: k_off a
// multiple of 4 (backend.cu: p.arith_drop), tiles at multiples of 16 keys.
#ifndef FA_CUDA_DROPOUT_TILE_CUH
#define FA_CUDA_DROPOUT_TILE_CUH

#include <stdint.h>

#include "rules.cuh"

namespace fa_cuda {

// The keep bits (bit w: column 4 (jg >> 2) + w) of the call at row i and
// column j of the sequence (j: any column of its group).
__device__ __forceinline__ uint32_t keep_nibble(const fa__cuda_params &p, int64_t bh, int64_t i, int64_t j) {
  const fa__u32x4 r = fa__dropout_words(p.seed, p.offset, bh, i + p.q_off, j + p.k_off);
  return static_cast<uint32_t>(r.v[0] < p.threshold) | static_cast<uint32_t>(r.v[1] < p.threshold) << 1 |
         static_cast<uint32_t>(r.v[2] < p.threshold) << 2 | static_cast<uint32_t>(r.v[3] < p.threshold) << 3;
}

// No dropout (bwd_tile.cuh's bwd_p_ds_arith, bwd_ds_rows_arith without it).
struct no_drop {
  static constexpr bool kOn = false;
  float dscale = 1.f;
  __device__ __forceinline__ bool at(int, int) const { return true; }
};

// The keep bits of a fragment held as S (rows are queries: element
// s[nb][2 r + c] at row r0 + g + 8 r, column n0 + 8 nb + 2 t + c of the
// sequence): the forward's P and the dQ kernels' dS (bwd_tile.cuh's
// bwd_ds_rows_arith). Lane t makes the calls of row half r = t & 1, its
// partner t ^ 1 those of the other; element (r, c) is bit 2 (t & 1) + c of
// either. at(nb, e): element s[nb][e].
template <int kNB>
struct rows_keep {
  static_assert(kNB % 8 == 0, "eight calls a word");
  static constexpr bool kOn = true;
  static constexpr int kW = kNB / 8;
  uint32_t h[2][kW];  // row half r's words, shifted to this lane's two bits of each nibble
  float dscale;       // 1 / (1 - p)
  __device__ __forceinline__ bool at(int nb, int e) const {
    return (h[e >> 1][nb / 8] >> (4 * (nb % 8) + (e & 1))) & 1u;
  }
};

template <int kNB>
__device__ __forceinline__ rows_keep<kNB> rows_keep_bits(const fa__cuda_params &p, int64_t bh, int64_t r0, int64_t n0,
                                                         int g, int t) {
  constexpr int kW = rows_keep<kNB>::kW;
  const int v = t & 1;
  const int64_t i = r0 + g + 8 * v, j = n0 + 2 * t;
  rows_keep<kNB> k;
  k.dscale = p.dscale;
#pragma unroll
  for (int w = 0; w < kW; ++w) {
    uint32_t own = 0u;
#pragma unroll
    for (int x = 0; x < 8; ++x) own |= keep_nibble(p, bh, i, j + 8 * (8 * w + x)) << (4 * x);
    const uint32_t other = __shfl_xor_sync(0xffffffffu, own, 1);
    k.h[0][w] = (v ? other : own) >> (2 * v);
    k.h[1][w] = (v ? own : other) >> (2 * v);
  }
  return k;
}

// Forward: P of one m-tile (rows_keep's layout) with the dropped elements
// set to 0 (after the row sums: the softmax is that of the undropped P;
// fwd_store scales by 1 / (1 - p)).
template <int kNB>
__device__ __forceinline__ void fwd_drop(const fa__cuda_params &p, int64_t bh, float (&s)[kNB][4], int64_t r0,
                                         int64_t n0, int g, int t) {
  const rows_keep<kNB> k = rows_keep_bits<kNB>(p, bh, r0, n0, g, t);
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (!k.at(nb, e)) s[nb][e] = 0.f;
}

// Backward: the keep bits of a thread's S^T fragment (st[mb][e], e = 2 r +
// c: key jw + g + 8 r, query m0 + 8 mb + 2 t + c of the sequence), bit
// 4 (mb % 8) of bits[e][mb / 8]. Of the four calls a query pair mb needs
// ((c, r) = (e & 1, e >> 1), each over the keys of g's group of four), lane
// g makes call e = g & 3; element e is bit g & 3 of call e's nibble.
template <int kMB>
struct bwd_keep {
  static constexpr bool kOn = true;
  static constexpr int kW = (kMB + 7) / 8;
  uint32_t bits[4][kW];
  float dscale;  // 1 / (1 - p)
  __device__ __forceinline__ bool at(int mb, int e) const { return (bits[e][mb / 8] >> (4 * (mb % 8))) & 1u; }
};

template <int kMB>
__device__ __forceinline__ bwd_keep<kMB> bwd_keep_bits(const fa__cuda_params &p, int64_t bh, int64_t m0, int64_t jw,
                                                       int g, int t) {
  constexpr int kW = bwd_keep<kMB>::kW;
  const int u = g & 3;
  const int64_t i = m0 + 2 * t + (u & 1), j = jw + (g & ~3) + 8 * (u >> 1);
  bwd_keep<kMB> k;
  k.dscale = p.dscale;
#pragma unroll
  for (int w = 0; w < kW; ++w) {
    uint32_t own = 0u;
#pragma unroll
    for (int x = 0; x < 8 && 8 * w + x < kMB; ++x) own |= keep_nibble(p, bh, i + 8 * (8 * w + x), j) << (4 * x);
    // the word of lane g ^ d (d = 0 .. 3: lanes 4 d apart), which made call u ^ d
    const uint32_t from[4] = {own, __shfl_xor_sync(0xffffffffu, own, 4), __shfl_xor_sync(0xffffffffu, own, 8),
                              __shfl_xor_sync(0xffffffffu, own, 12)};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = e ^ u;
      k.bits[e][w] = (d == 0 ? from[0] : d == 1 ? from[1] : d == 2 ? from[2] : from[3]) >> u;
    }
  }
  return k;
}

}  // namespace fa_cuda

#endif
