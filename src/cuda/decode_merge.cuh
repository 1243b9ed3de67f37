// The arithmetic of the merges of partial softmax results, in one place
// for their users: fa_merge_states' kernel (decode.cu: float64, any number
// of parts, as docs/semantics.md gives it), and the split-KV merge of the
// decode, which the combine kernel (decode.cu) and the last split block of
// a decode item (merge_splits in decode_parts.cuh) both run: f32, exactly
// these functions on the same values in the same order, so the two paths
// give the same bits for a given num_splits.
#ifndef FA_CUDA_DECODE_MERGE_CUH
#define FA_CUDA_DECODE_MERGE_CUH

#include <math.h>

namespace fa_dec {

constexpr int kMaxSplits = 256;  // a larger num_splits is taken as this many

// The end of both weight functions below: each lane's partial sum l of
// the weights summed over the warp (a fixed butterfly; the lanes summed in
// different orders, so lane 0's bits are taken for all: the same for a
// given n on every run), then each lane's own parts' w[k] /= l; returns l.
template <typename T>
__device__ __forceinline__ T normalize_weights(T l, int n, T *w) {
  const int lane = threadIdx.x & 31;
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
  l = __shfl_sync(0xffffffffu, l, 0);
  const T inv = l > T(0) ? T(1) / l : T(0);
#pragma unroll 1
  for (int k = lane; k < n; k += 32) w[k] *= inv;
  return l;
}

// fa_merge_states' weights, in float64. One warp merges the n lse values:
// m = the largest (exact in any order), w[k] = exp(lse_k - m) into shared
// memory, their sum l (each lane its parts lane, lane + 32, ... in order,
// then a fixed butterfly, lane 0's bits taken: the same for a given n on
// every run), then w[k] /= l; returns m + ln l on every lane of the warp.
// The same function as the left-to-right fold of src/rules/online_softmax.h
// up to rounding in float64, but one exp per part in parallel instead of a
// chain of two per merge. All 32 lanes of the warp must call it.
template <typename F>
__device__ __forceinline__ double merge_weights(int n, F lse_of, double *w) {
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
  l = normalize_weights(l, n, w);
  return l > 0 ? m + log(l) : -INFINITY;
}

// The split-KV merge's weights, in f32: the decode's partial o and lse are
// f32 already, and a float64 merge only lengthened the call's tail (the
// combine kernel's 8.5 us, ncu at the locked clock, H200, 33 parts: a chain
// of float64 exps and log and one L2 round trip per part's lse). One warp:
// lane l takes parts l, l + 32, ... (at most kMaxSplits / 32 of them, all
// loads issued before any is used when ROLLED is false), m = the largest,
// w[k] = exp(lse_k - m) into w (shared memory), their sum l (each lane its
// parts in order, then a fixed butterfly, lane 0's bits taken: the same
// for a given n on every run), then w[k] /= l; returns m + ln l on every
// lane of the warp. ROLLED keeps the part loop rolled (same sums in the
// same order, so the same bits): the decode kernels' merge_splits runs it
// from shared memory, where unrolled loops cost their main loops registers.
// All 32 lanes of the warp must call it.
template <bool ROLLED, typename F>
__device__ __forceinline__ float split_weights(int n, F lse_of, float *w) {
  constexpr int kPer = kMaxSplits / 32;
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  const int lane = threadIdx.x & 31;
  float x[kPer];
  float m = -INFINITY;
  if (ROLLED) {
#pragma unroll 1
    for (int k = lane; k < n; k += 32) m = fmaxf(m, lse_of(k));
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) x[i] = lane + 32 * i < n ? lse_of(lane + 32 * i) : -INFINITY;
#pragma unroll
    for (int i = 0; i < kPer; ++i) m = fmaxf(m, x[i]);
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float l = 0.0f;
  if (ROLLED) {
#pragma unroll 1
    for (int k = lane; k < n; k += 32) {
      const float v = lse_of(k);
      const float e = v == -INFINITY || m == -INFINITY ? 0.0f : exp2f((v - m) * kLog2e);
      w[k] = e;
      l += e;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const float e = x[i] == -INFINITY || m == -INFINITY ? 0.0f : exp2f((x[i] - m) * kLog2e);
      if (lane + 32 * i < n) w[lane + 32 * i] = e;
      l += e;
    }
  }
  l = normalize_weights(l, n, w);
  return l > 0.0f ? m + log2f(l) * kLn2 : -INFINITY;
}

// One part's term of a split-merged value, added in part order: acc + w v
// as one f32 fma (written out, so that no contraction choice of the
// compiler can make the two callers differ); a part of weight 0 (no keys,
// or too small to count) is skipped, so whatever its values are they do
// not reach the sum.
__device__ __forceinline__ float split_step(float acc, float w, float v) {
  return w != 0.0f ? fmaf(w, v, acc) : acc;
}

}  // namespace fa_dec

#endif
