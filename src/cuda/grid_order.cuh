// Which (sequence-head, tile) a CUDA block of a (B * H) x tiles grid takes.
// The hardware starts blocks in linear order, blockIdx.x fastest; with x the
// sequence-head, the blocks running at once would each be a different head
// and stream that head's K and V (or Q and dO) from memory on their own.
// Counting the linear index tile-fastest instead puts the tiles of a few
// heads side by side, so they share those reads in L2 (FlashAttention's
// grids order m_block fastest for the same reason): on the H200 at L = 2048,
// B = 8, the backward was memory-bound the other way
// (bench/results/2026-12-01-h200-ws-bwd.txt).
#ifndef FA_CUDA_GRID_ORDER_CUH
#define FA_CUDA_GRID_ORDER_CUH

#include <stdint.h>

namespace fa_cuda {

// The sequence-head and tile (0 = the first the grid starts) of this block
// of a grid dim3(B * H, tiles).
__device__ __forceinline__ void tile_major_block(int64_t *bh, int64_t *tile) {
  const int64_t l = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  *bh = l / gridDim.y;
  *tile = l % gridDim.y;
}

// The same with the sequence-heads in groups of g (the last group may have
// fewer): within a group the heads take turns, tile by tile, so that a
// head's consecutive tiles start g blocks apart; each head's tiles first to
// last, or with desc last first. The deterministic backward's dQ turns
// (bwd_ws_kernel.cuh) want desc: its blocks wait for the head's next higher
// tile, which must have started before them, and wait less the later they
// start. Without desc, under a causal band (key tile 0 the heaviest: it
// sees every query) a group's heaviest tiles start first and its lightest
// fill the end, where tile-major order started a head's heaviest tile as
// late as its lightest.
__device__ __forceinline__ void head_group_block(int64_t g, bool desc, int64_t *bh, int64_t *tile) {
  const int64_t l = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t span = g * gridDim.y, first = l / span * g, r = l % span;
  const int64_t n = gridDim.x - first < g ? gridDim.x - first : g;
  *bh = first + r % n;
  *tile = desc ? gridDim.y - 1 - r / n : r / n;
}

}  // namespace fa_cuda

#endif
