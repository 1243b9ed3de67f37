// Launching the decode kernels, instantiated per dtype in
// decode_{bf16,f16,f32}.cu: rb (rows per block) 1, 4 or 8 runs the CUDA-core
// kernel (decode_kernel.cuh), rb 16 the tensor-core one
// (decode_mma_kernel.cuh; f16 / bf16, head dims up to 128).
#ifndef FA_CUDA_DECODE_LAUNCH_CUH
#define FA_CUDA_DECODE_LAUNCH_CUH

#include <stdint.h>

#include <atomic>

#include "decode_kernel.cuh"
#include "decode_mma_kernel.cuh"
#include "launch.cuh"
#include "pdl.cuh"

namespace fa_dec {

// The kernel for (T, KD, RB) and its dynamic shared memory; RB = 16 is the
// tensor-core kernel, which exists for 16-bit T and KD <= 128 only (the host
// never asks for it elsewhere; the CUDA-core kernel stands in so that every
// instantiation compiles).
template <typename T, int KD, int RB>
struct kernel_of {
  static constexpr bool kMma = RB == 16 && sizeof(T) == 2 && KD <= 128;
  static constexpr int kCoreRB = RB == 16 ? 8 : RB;  // the CUDA-core kernel's rows when it stands in
  static auto get() {
    if constexpr (kMma)
      return decode_mma_kernel<T, KD>;
    else
      return decode_kernel<T, KD, kCoreRB>;
  }
  static constexpr size_t smem() {
    if constexpr (kMma)
      return mma_cfg<T, KD>::smem;
    else
      return cfg<T, KD, kCoreRB>::smem;
  }
};

// The kernel's shared-memory opt-in, asked of the runtime once per device
// (devices 0..63; others at every launch): a decode step is a few tens of
// microseconds, and cudaFuncSetAttribute took ~1 us of host time a call
// (H200 host, bench/gpu/decode.py --api).
template <typename T, int KD, int RB>
cudaError_t smem_optin_once() {
  using K = kernel_of<T, KD, RB>;
  static std::atomic<uint64_t> raised{0};
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
  if (bit && (raised.load(std::memory_order_relaxed) & bit)) return cudaSuccess;
  const cudaError_t e = fa__cuda_smem_optin(K::get(), K::smem());
  if (e == cudaSuccess && bit) raised.fetch_or(bit, std::memory_order_relaxed);
  return e;
}

// pdl: launched as a programmatic dependent of the append kernel (pdl.cuh).
template <typename T, int KD, int RB>
fa_status launch_one(const fa__dec_params &p, bool pdl, int64_t blocks, cudaStream_t s, fa__err *err) {
  using K = kernel_of<T, KD, RB>;
  auto kern = K::get();
  FA_CUDA_TRY((smem_optin_once<T, KD, RB>()), "raising the decode kernel's shared-memory limit");
  FA_CUDA_TRY(fa_cuda::launch_pdl(pdl, kern, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), K::smem(), s, p),
              "launching the decode kernel");
  return FA_OK;
}

template <typename T, int KD, int RB>
int occupancy_one() {
  using K = kernel_of<T, KD, RB>;
  auto kern = K::get();
  int n = 0;
  if (smem_optin_once<T, KD, RB>() != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, kThreads, K::smem()) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <typename T, int KD>
fa_status launch_kd(const fa__dec_params &p, int rb, bool pdl, int64_t blocks, cudaStream_t s, fa__err *err) {
  switch (rb) {
    case 1: return launch_one<T, KD, 1>(p, pdl, blocks, s, err);
    case 4: return launch_one<T, KD, 4>(p, pdl, blocks, s, err);
    case 16: return launch_one<T, KD, 16>(p, pdl, blocks, s, err);
    default: return launch_one<T, KD, 8>(p, pdl, blocks, s, err);
  }
}

template <typename T>
fa_status launch(const fa__dec_params &p, int kd, int rb, bool pdl, int64_t blocks, cudaStream_t s, fa__err *err) {
  switch (kd) {
    case 64: return launch_kd<T, 64>(p, rb, pdl, blocks, s, err);
    case 128: return launch_kd<T, 128>(p, rb, pdl, blocks, s, err);
    default: return launch_kd<T, 256>(p, rb, pdl, blocks, s, err);
  }
}

template <typename T, int KD>
int occupancy_kd(int rb) {
  switch (rb) {
    case 1: return occupancy_one<T, KD, 1>();
    case 4: return occupancy_one<T, KD, 4>();
    case 16: return occupancy_one<T, KD, 16>();
    default: return occupancy_one<T, KD, 8>();
  }
}

template <typename T>
int occupancy(int kd, int rb) {
  return kd == 64 ? occupancy_kd<T, 64>(rb) : kd == 128 ? occupancy_kd<T, 128>(rb) : occupancy_kd<T, 256>(rb);
}

}  // namespace fa_dec

#define FA_DECODE_INSTANTIATE(NAME, T)                                                                       \
  fa_status fa__cuda_decode_launch_##NAME(const fa__dec_params &p, int kd, int rb, bool pdl, int64_t blocks, \
                                          cudaStream_t s, fa__err *err) {                                    \
    return fa_dec::launch<T>(p, kd, rb, pdl, blocks, s, err);                                                \
  }                                                                                                          \
  int fa__cuda_decode_occupancy_##NAME(int kd, int rb) {                                                     \
    return fa_dec::occupancy<T>(kd, rb);                                                                     \
  }                                                                                                          \
  FA_DEC_TRACE_EXPORT(NAME)

#endif
