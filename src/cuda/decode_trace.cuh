// A timeline of one decode call, block by block, for the benchmark only:
// built with -DFA_CUDA_DECODE_TRACE=ON (CMake), every block of the decode
// and combine kernels writes the global timer (%globaltimer, ns) at a few
// marks and its multiprocessor's id into a table in device memory, which
// bench/gpu/decode_probe.py reads after a call (fa__cuda_decode_trace_*,
// exported only from such a build). Why: a split decode call at B = 1 has a
// fixed cost of ~10 us against cuDNN's, and only per-block times say where
// it lies (the ramp before the first tile, the spread of the blocks' ends,
// the merge after the last one). In a normal build the marks are nothing.
#ifndef FA_CUDA_DECODE_TRACE_CUH
#define FA_CUDA_DECODE_TRACE_CUH

#include <stdint.h>

namespace fa_dec {

// Marks of a decode block, and of a combine block where it has the stage.
enum trace_mark {
  kMarkStart = 0,     // the block's first instruction
  kMarkFirstTile,     // its first K/V tile in shared memory (combine: griddepcontrol.wait returned)
  kMarkLoopEnd,       // its last tile done
  kMarkStates,        // its warps' (key groups') states in shared memory, store_merged next
  kMarkStored,        // its partial (or final) rows stored
  kMarkSm,            // the multiprocessor's id (not a time)
  kMarkMergeStart,    // fused merge: the last split block, past its counter and fences
  kMarkMergeWeights,  // the split weights computed (fused merge; combine: warp 0's)
  kMarkMergeValues,   // the splits' values in shared memory (fused merge, combine)
  kMarkEnd,           // leaving
  kMarkTimer,         // a second timer read right after kMarkStart: what one read costs
  kTraceSlots = 16
};
constexpr int kTraceBlocks = 16384;  // blocks past this are not traced

#ifdef FA_CUDA_DECODE_TRACE
// One table per translation unit (no relocatable device code): the decode
// kernels' in each decode_<dtype>.cu, the combine's in decode.cu; each TU
// exports its own reader.
static __device__ unsigned long long trace_table[kTraceBlocks][kTraceSlots];

__device__ __forceinline__ void trace_mark(int slot) {
  if (threadIdx.x != 0 || blockIdx.x >= kTraceBlocks) return;
  unsigned long long t;
  if (slot == kMarkSm) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    t = s;
  } else {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  }
  trace_table[blockIdx.x][slot] = t;
}
// The two marks every block starts with (the second read times the first).
__device__ __forceinline__ void trace_start() {
  trace_mark(kMarkStart);
  trace_mark(kMarkTimer);
  trace_mark(kMarkSm);
}

// The reader a TU exports: clear (zero the table) or copy n_blocks rows of
// kTraceSlots values to host; 0 or a cudaError_t. Static: each TU reads its own table.
static inline int trace_access(unsigned long long *host, int n_blocks) {
  if (!host) {
    void *at = nullptr;
    cudaError_t e = cudaGetSymbolAddress(&at, trace_table);
    if (e == cudaSuccess) e = cudaMemset(at, 0, sizeof trace_table);
    return static_cast<int>(e);
  }
  if (n_blocks > kTraceBlocks) n_blocks = kTraceBlocks;
  return static_cast<int>(cudaMemcpyFromSymbol(
      host, trace_table, static_cast<size_t>(n_blocks) * kTraceSlots * sizeof(unsigned long long)));
}
#define FA_DEC_TRACE_EXPORT(NAME)                                                                              \
  extern "C" __attribute__((visibility("default"))) int fa__cuda_decode_trace_##NAME(unsigned long long *host, \
                                                                                     int n_blocks) {           \
    return fa_dec::trace_access(host, n_blocks);                                                               \
  }
#else
__device__ __forceinline__ void trace_mark(int) {}
__device__ __forceinline__ void trace_start() {}
#define FA_DEC_TRACE_EXPORT(NAME)
#endif

}  // namespace fa_dec

#endif
