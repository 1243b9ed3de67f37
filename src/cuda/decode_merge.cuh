// The arithmetic of the split-KV merge, in one place for its three users:
// the combine kernel and fa_merge_states' kernel (decode.cu), and the last
// split block of a decode item, which merges the splits itself
// (merge_splits in decode_parts.cuh). The combine kernel and that block run
// exactly these functions on the same values in the same order, so the two
// paths give the same bits for a given num_splits.
#ifndef FA_CUDA_DECODE_MERGE_CUH
#define FA_CUDA_DECODE_MERGE_CUH

#include <math.h>

namespace fa_dec {

constexpr int kMaxSplits = 256;  // a larger num_splits is taken as this many

// One warp merges the n lse values: m = the largest (exact in any order),
// w[k] = exp(lse_k - m) into shared memory, their sum l (each lane its parts
// lane, lane + 32, ... in order, then a fixed butterfly, lane 0's bits taken:
// the same for a given n on every run), then w[k] /= l; returns m + ln l on
// every lane of the warp. The same function as the left-to-right fold of
// src/rules/online_softmax.h up to rounding in float64, but one exp per part
// in parallel instead of a chain of two per merge: the fold's chain of ~16
// float64 exps was the whole 10 us of a split call's combine kernel (ncu,
// H200, 33 parts). All 32 lanes of the warp must call it.
template <typename F>
__device__ __forceinline__ double merge_weights(int n, F lse_of, double *w) {
  // (the part loops are kept rolled: at most 8 turns for the decode's 256
  // parts, and unrolled they cost the decode kernels' main loops registers,
  // hence spills)
  const int lane = threadIdx.x & 31;
  double m = -INFINITY;
#pragma unroll 1
  for (int k = lane; k < n; k += 32) m = fmax(m, lse_of(k));
  for (int off = 16; off > 0; off >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, off));
  double l = 0.0;
#pragma unroll 1
  for (int k = lane; k < n; k += 32) {
    const double x = lse_of(k);
    const double e = x == -INFINITY || m == -INFINITY ? 0.0 : exp(x - m);
    w[k] = e;
    l += e;
  }
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
  l = __shfl_sync(0xffffffffu, l, 0);  // the lanes summed in different orders: one lane's bits for all
  const double inv = l > 0 ? 1.0 / l : 0.0;
#pragma unroll 1
  for (int k = lane; k < n; k += 32) w[k] *= inv;  // each lane its own parts' weights
  return l > 0 ? m + log(l) : -INFINITY;
}

// One part's term of a merged value, added in part order: acc + w v as one
// float64 fma (written out, so that no contraction choice of the compiler
// can make two callers differ); a part of weight 0 (no keys, or too small to
// count) is skipped, so whatever its values are they do not reach the sum.
__device__ __forceinline__ double merge_step(double acc, double w, float v) {
  return w != 0.0 ? fma(w, static_cast<double>(v), acc) : acc;
}

}  // namespace fa_dec

#endif
