// The decode's per-stream buffers (stream_buffers.h).
//
// The fused merge's arrival counters (fa__dec_params::counters) are 0 when
// a decode kernel starts and put back to 0 by each item's last split block,
// so they are 0 again when it ends; the partial results are written by the
// decode kernel and read by its merge (the fused one or the combine kernel)
// before the call's work on the stream is done. So every call on one
// stream can use the same two buffers:
//   - calls on one stream run one after the other: a decode kernel starts
//     after the previous call's kernels have ended (it is launched plainly,
//     or as the programmatic dependent of its own call's append kernel,
//     which is launched plainly; it touches counters and partials only
//     after its griddepcontrol.wait), and the combine kernel, launched early
//     as the decode kernel's dependent, reads before its wait only to warm
//     its code and stores nothing then. Calls on two streams may run at once
//     and must not share. (Per call, the counters would need a memset on the
//     stream every call, the partials a cudaMallocAsync and a cudaFreeAsync:
//     several microseconds of the host's time a call, H200 host, when the
//     GPU's part of a long decode step is ~40 us.) A stream is named by
//     cudaStreamGetId (unique for the program's life: a new stream that
//     reuses a destroyed one's handle gets its own buffers) and, for the
//     default-stream handles (0, cudaStreamLegacy, cudaStreamPerThread), by
//     the calling thread as well (cudaStreamPerThread is another stream in
//     each thread).
//   - allocated by cudaMallocAsync on that stream (the counters zeroed by
//     cudaMemsetAsync there) on first use, stream-ordered before the kernel;
//     doubled when a call needs more (the outgrown buffer is left allocated:
//     another thread's call on the same stream may hold it for a kernel it
//     has yet to launch). Never freed: at most kStreams entries, whose
//     streams may still have kernels queued; the partials of all streams
//     together stay under kMaxPartBytes (a call past it brings its own).
//   - not while the stream is being captured into a CUDA graph (a graph may
//     be replayed on any stream, next to other replays or calls: its buffers
//     must be its own; the capture takes a graph allocation for the
//     partials and the combine kernel for the merge, decode.cu).
// Counters left nonzero by a decode kernel that never finished (a fault)
// come with a sticky error: the device context is unusable anyway.
// cudaDeviceReset frees the buffers under this table: a process that resets
// the device must not make split decode calls afterwards.
#include <atomic>
#include <mutex>

#include "stream_buffers.h"

namespace fa_cuda {
namespace {

constexpr int kStreams = 64;
constexpr int64_t kMaxCounters = int64_t{1} << 16;
constexpr int64_t kFirstCounters = 4096;
constexpr size_t kFirstPartBytes = size_t{1} << 20;
constexpr size_t kMaxPartBytes = size_t{64} << 20;  // all streams' partials together

struct entry {
  int dev;
  unsigned long long id;  // cudaStreamGetId
  uint64_t thread;        // thread_token() for the default-stream handles, else 0
  unsigned *counters;
  int64_t ncounters;
  float *parts;
  size_t part_bytes;
};
std::mutex table_mu;
entry table[kStreams];
int used = 0;
size_t part_bytes_held = 0;  // every parts buffer, outgrown ones included
std::atomic<uint64_t> thread_tokens{0};

uint64_t thread_token() {
  thread_local const uint64_t token = thread_tokens.fetch_add(1, std::memory_order_relaxed) + 1;
  return token;
}

template <typename T>
T grown(T have, T first, T need) {
  T cap = have ? have : first;
  while (cap < need) cap *= 2;
  return cap;
}

}  // namespace

bool stream_buffers_for(int dev, cudaStream_t s, int64_t ncounters, size_t part_bytes, stream_buffers *out) {
  out->counters = nullptr;
  out->parts = nullptr;
  out->fresh_counters = false;
  if (dev < 0 || ncounters > kMaxCounters || part_bytes > kMaxPartBytes / 4) return false;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (cs != cudaStreamCaptureStatusNone) return false;
  unsigned long long id = 0;
#if CUDART_VERSION >= 12000
  if (cudaStreamGetId(s, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
#else
  return false;  // no stream ids before CUDA 12: every call brings its own
#endif
  const bool dflt = s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
  const uint64_t thread = dflt ? thread_token() : 0;
  std::lock_guard<std::mutex> lock(table_mu);
  entry *e = nullptr;
  for (int i = 0; i < used && !e; ++i)
    if (table[i].dev == dev && table[i].id == id && table[i].thread == thread) e = &table[i];
  if (!e) {
    if (used == kStreams) return false;
    e = &table[used++];
    *e = entry{dev, id, thread, nullptr, 0, nullptr, 0};
  }
  if (ncounters > e->ncounters) {
    const int64_t cap = grown(e->ncounters, kFirstCounters, ncounters);
    void *buf = nullptr;
    const size_t bytes = static_cast<size_t>(cap) * sizeof(unsigned);
    if (cudaMallocAsync(&buf, bytes, s) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (cudaMemsetAsync(buf, 0, bytes, s) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaFreeAsync(buf, s);
      (void)cudaGetLastError();
      return false;
    }
    e->counters = static_cast<unsigned *>(buf);
    e->ncounters = cap;
    out->fresh_counters = true;
  }
  if (part_bytes > e->part_bytes) {
    const size_t cap = grown(e->part_bytes, kFirstPartBytes, part_bytes);
    void *buf = nullptr;
    if (part_bytes_held + cap > kMaxPartBytes || cudaMallocAsync(&buf, cap, s) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;  // the counters (if new) stay the stream's, zeroed
    }
    part_bytes_held += cap;
    e->parts = static_cast<float *>(buf);
    e->part_bytes = cap;
  }
  out->counters = ncounters > 0 ? e->counters : nullptr;
  out->parts = e->parts;
  return true;
}

}  // namespace fa_cuda
