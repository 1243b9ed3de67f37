// The score options that are arithmetic only -- softcap and ALiBi, no tensor
// to read, no random bits -- on the warp-specialized kernels' fragments.
// rules.cuh's score_full takes every option element by element in 64-bit
// arithmetic with a test per option (the per-element kernels' path, 10x the
// band-only kernels' time); here the band is tested only on tiles it cuts,
// as one column interval a row, the ALiBi distance is a row's float plus
// the column's offset, the softcap's tanh two MUFU operations, and the rule
// is src/rules/score.h's:
//   s = scale * dot;  s = softcap * tanh(s / softcap);  s -= slope * |diag(i) - j|
// in log2 units (times log2 e), for the softmax's exp2.
#ifndef FA_CUDA_SCORE_ARITH_CUH
#define FA_CUDA_SCORE_ARITH_CUH

#include "mma.cuh"
#include "rules.cuh"

namespace fa_cuda {

// tanh x = sign(x) (1 - 2 / (e^(2|x|) + 1)): ex2 and rcp (approx.ftz)
// instead of tanhf's ~20 instructions. The error is absolute, ~2e-7 (what
// the softmax sees, times the cap: under 1e-5 of a score at a cap of 50,
// far below the rounding of P to 16 bits); +-inf give +-1, NaN stays NaN.
__device__ __forceinline__ float tanh_fast(float x) {
  const float e = fast_exp2(fabsf(x) * (2.f * kLog2e));
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(e + 1.f));
  return copysignf(fmaf(-2.f, r, 1.f), x);
}

// The call's constants for one query head, in log2 units.
struct arith_score {
  float scale_log2;  // no softcap: s = dot * scale_log2
  float cap_in;      // softcap: t = tanh(dot * cap_in), s = t * cap_out
  float cap_out;
  float slope_log2;  // ALiBi slope of the head times log2 e (0 without ALiBi)

  __device__ __forceinline__ arith_score(const fa__cuda_params &p, float slope) {
    scale_log2 = p.scale_log2;
    cap_in = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    cap_out = p.softcap * kLog2e;
    slope_log2 = slope * kLog2e;
  }

  // The score of a visible element at ALiBi distance |dist|, dist = diag(i)
  // - j as a float (exact: backend.cu keeps the call's distances under
  // 2^24; the kernels make it one FADD from a row's value, and the FFMA
  // takes its absolute value for free, where an int-to-float conversion an
  // element would run at 16 a clock per multiprocessor, the MUFU's rate, an
  // eighth of the FFMA's); kCap: softcap on, *t = the tanh (its derivative
  // 1 - t^2 is the backward's).
  template <bool kCap>
  __device__ __forceinline__ float at(float dot, float dist, float *t) const {
    float s;
    if constexpr (kCap) {
      *t = tanh_fast(dot * cap_in);
      s = *t * cap_out;
    } else {
      s = dot * scale_log2;
    }
    return fmaf(-slope_log2, fabsf(dist), s);
  }
};

}  // namespace fa_cuda

#endif
