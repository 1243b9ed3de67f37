// Launching the decode kernels, instantiated per dtype in
// decode_{bf16,f16,f32}.cu: rb (rows per block) 1, 4 or 8 runs the CUDA-core
// kernel (decode_kernel.cuh), rb 16 the tensor-core one
// (decode_mma_kernel.cuh; f16 / bf16, head dims up to 128).
#ifndef FA_CUDA_DECODE_LAUNCH_CUH
#define FA_CUDA_DECODE_LAUNCH_CUH

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

// Shared memory a block asks for when its cluster should spread over as
// many multiprocessors (fa__dec_params::spread): over half of a Hopper
// multiprocessor's 228 KiB, so no two blocks share one. Without it the
// cluster's blocks were packed two to a multiprocessor: B = 1, 8 kv heads,
// 16 splits ran on 64 of the H200's 132 multiprocessors, 0.060 ms against
// 0.042 spread (bench/results/2026-12-01-h200-decode-cluster.txt).
constexpr size_t kSpreadSmem = 116 * 1024;

template <typename T, int KD, int RB>
size_t smem_of(bool spread) {
  using K = kernel_of<T, KD, RB>;
  return spread && K::smem() < kSpreadSmem ? kSpreadSmem : K::smem();
}

// pdl: launched as a programmatic dependent of the append kernel (pdl.cuh).
template <typename T, int KD, int RB>
fa_status launch_one(const fa__dec_params &p, bool pdl, int64_t blocks, cudaStream_t s, fa__err *err) {
  auto kern = kernel_of<T, KD, RB>::get();
  const size_t smem = smem_of<T, KD, RB>(p.cluster && p.spread);
  FA_CUDA_TRY(fa__cuda_smem_optin(kern, smem), "raising the decode kernel's shared-memory limit");
  const unsigned cluster = p.cluster ? static_cast<unsigned>(p.nsplit) : 1;
  if (cluster > 8)
    FA_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                "allowing the decode kernel clusters of more than 8 blocks");
  FA_CUDA_TRY(fa_cuda::launch_ex(pdl, cluster, kern, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, s, p),
              "launching the decode kernel");
  return FA_OK;
}

// Clusters of `size` blocks of that decode kernel the device holds at once
// (0 when it cannot run them).
template <typename T, int KD, int RB>
int clusters_one(int size, bool spread) {
  auto kern = kernel_of<T, KD, RB>::get();
  const size_t smem = smem_of<T, KD, RB>(spread);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(size));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (fa__cuda_smem_optin(kern, smem) != cudaSuccess ||
      (size > 8 && cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) ||
      cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <typename T, int KD, int RB>
int occupancy_one() {
  using K = kernel_of<T, KD, RB>;
  auto kern = K::get();
  int n = 0;
  if (fa__cuda_smem_optin(kern, K::smem()) != cudaSuccess ||
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

template <typename T, int KD>
int clusters_kd(int rb, int size, bool spread) {
  switch (rb) {
    case 1: return clusters_one<T, KD, 1>(size, spread);
    case 4: return clusters_one<T, KD, 4>(size, spread);
    case 16: return clusters_one<T, KD, 16>(size, spread);
    default: return clusters_one<T, KD, 8>(size, spread);
  }
}

template <typename T>
int clusters(int kd, int rb, int size, bool spread) {
  return kd == 64    ? clusters_kd<T, 64>(rb, size, spread)
         : kd == 128 ? clusters_kd<T, 128>(rb, size, spread)
                     : clusters_kd<T, 256>(rb, size, spread);
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
  int fa__cuda_decode_clusters_##NAME(int kd, int rb, int size, int spread) {                                \
    return fa_dec::clusters<T>(kd, rb, size, spread != 0);                                                   \
  }

#endif
