// Buffers the decode keeps per CUDA stream, so that a split call needs no
// allocation, free or memset on the stream: the splits' partial results
// and, where the fused merge is asked for, its arrival counters. Host code
// (stream_buffers.cu).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace fa_cuda {

struct stream_buffers {
  unsigned *counters;   // ncounters zeroed counters (null when none were asked)
  float *parts;         // part_bytes of scratch (contents undefined)
  bool fresh_counters;  // counters were allocated and zeroed on s in this call (set on failure too)
};

// The buffers of stream s on device dev, grown to the sizes asked for.
// False where a stream has none (the call then brings its own): s being
// captured into a CUDA graph, no stream ids (CUDA < 12), the table full,
// sizes past the caps, an allocation failing.
bool stream_buffers_for(int dev, cudaStream_t s, int64_t ncounters, size_t part_bytes, stream_buffers *out);

}  // namespace fa_cuda
