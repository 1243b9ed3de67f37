// fa_forward_kvcache and fa_merge_states on the cuda backend: the host side
// (checks, split count, scratch, launches; the per-stream buffers are
// stream_buffers.cu), the append
// kernel and the two merge kernels. The decode kernels themselves are
// decode_kernel.cuh and decode_mma_kernel.cuh; the merge arithmetic is
// decode_merge.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "../rules/half.h"
#include "../rules/kv_address.h"
#include "../rules/online_softmax.h"
#include "decode.cuh"
#include "decode_merge.cuh"
#include "decode_trace.cuh"
#include "host_call.cuh"
#include "launch.cuh"
#include "mma.cuh"
#include "pdl.cuh"
#include "rules.cuh"
#include "stream_buffers.h"

namespace {

using fa_dec::kMaxSplits;  // a larger num_splits is taken as this many
using fa_dec::merge_weights;
using fa_dec::split_step;
using fa_dec::split_weights;

// ---- append ---------------------------------------------------------------

struct append_params {
  const void *k_new, *v_new;
  void *k, *v;
  int64_t kn[3], vn[3], ks[3], vs[3];
  fa__kvmap map;
  const int32_t *cache_seqlens;
  fa__dec_bounds bounds;
  const float *rot_cos, *rot_sin;
  int rot_dim, rot_interleaved;
  int D, Dv, dtype;
};

// double -> the dtype exactly as the host's fa__elem_set rounds it (through f32).
__device__ __forceinline__ void elem_set(void *p, int64_t i, int dt, double v) {
  const float f = __double2float_rn(v);
  switch (dt) {
    case FA_F32: static_cast<float *>(p)[i] = f; break;
    case FA_F16: static_cast<uint16_t *>(p)[i] = fa__f32_to_f16(f); break;
    default: static_cast<uint16_t *>(p)[i] = fa__f32_to_bf16(f); break;
  }
}

// One block per (new token t, kv head h, sequence b): k_new rotated at
// cache_seqlens[b] + t (in float64 without contraction, as the host rule), then
// both rows stored where kv_address.h puts key cache_seqlens[b] + t.
__global__ void append_kernel(const append_params p) {
  fa_cuda::pdl_trigger();  // the decode kernel may launch; it waits for this grid's end before reading the cache
  const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t pos = fa__dec_clamp(p.cache_seqlens[b], p.bounds.max_len) + t;
  fa__kvpos at = fa__kv_locate(&p.map, b, pos);
  at.page = fa__dec_clamp(at.page, p.bounds.pages - 1);
  const int64_t rpos = fa__dec_clamp(pos, p.bounds.rot_len - 1);
  const int64_t kin = b * p.kn[0] + h * p.kn[1] + t * p.kn[2], vin = b * p.vn[0] + h * p.vn[1] + t * p.vn[2];
  const int64_t kout = at.page * p.ks[0] + h * p.ks[1] + at.row * p.ks[2];
  const int64_t vout = at.page * p.vs[0] + h * p.vs[1] + at.row * p.vs[2];
  const int half = p.rot_dim / 2;
  for (int d = threadIdx.x; d < p.D; d += blockDim.x) {
    double x = fa_cuda::load_any(p.k_new, kin + d, p.dtype);
    if (p.rot_cos && d < p.rot_dim) {
      const int tt = p.rot_interleaved ? d / 2 : d % half;
      const double c = p.rot_cos[rpos * half + tt], s = p.rot_sin[rpos * half + tt];
      const bool first = p.rot_interleaved ? (d & 1) == 0 : d < half;
      const int other = p.rot_interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half);
      const double y = fa_cuda::load_any(p.k_new, kin + other, p.dtype);
      x = first ? __dsub_rn(__dmul_rn(x, c), __dmul_rn(y, s)) : __dadd_rn(__dmul_rn(y, s), __dmul_rn(x, c));
    }
    elem_set(p.k, kout + d, p.dtype, x);
  }
  const int es = p.dtype == FA_F32 ? 4 : 2;
  for (int d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    if (es == 4)
      static_cast<float *>(p.v)[vout + d] = static_cast<const float *>(p.v_new)[vin + d];
    else
      static_cast<uint16_t *>(p.v)[vout + d] = static_cast<const uint16_t *>(p.v_new)[vin + d];
  }
}

// ---- merges ----------------------------------------------------------------

struct combine_params {
  const float *part_o, *part_lse;  // [items][nsplit][R][Dv], [items][nsplit][R]
  void *o;
  float *lse;
  int64_t os[3], lses[3];
  int64_t Hkv, group, Lq;
  int R, Dv, nsplit, dtype;
  int warm;  // launched early (programmatic dependent): run the merge once before the wait
};

// The two-kernel merge (the default; FLASHATTN_CUDA_DECODE_FUSED_MERGE=1: the
// decode kernel's last split block merges, decode_parts.cuh's merge_splits,
// with the same arithmetic in the same order: the same bits). One block per
// (sequence, kv head, row): the splits of the decode kernel, summed in split
// order. It is the call's tail, so it is written for latency: the row's
// values of every split are copied into shared memory with cp.async (when
// they fit, kStageBytes), in flight while warp 0 loads every split's lse at
// once and computes the f32 weights (split_weights), so the whole merge
// waits for about one round trip to L2; then each thread sums its values
// over the splits from shared memory.
// Launched early as the decode kernel's programmatic dependent (p.warm), a
// block first runs its whole merge once before griddepcontrol.wait, on
// whatever the partial buffers hold then, storing nothing: the real pass
// then finds its instructions in the multiprocessor's instruction cache.
// Why: the K/V stream has pushed the kernel's code out of L2 by then, and
// each instruction-cache miss of the real pass went to DRAM, one after
// another: 8.4 us from the wait to the last block's end at B = 1, 33
// splits (H200, decode_trace.cuh's timeline), for a merge of ~1 us of work;
// 6.3 us with the warm pass.
constexpr int kStageBytes = 40 * 1024;  // with the static 1 KiB: under the default 48 KiB
__global__ void combine_kernel(const combine_params p) {
  extern __shared__ __align__(16) float staged[];  // [nsplit][Dv] when staged
  __shared__ float w[kMaxSplits];
  __shared__ float lse_s;
  const int64_t x = blockIdx.x;
  const int r = static_cast<int>(x % p.R);
  const int64_t item = x / p.R, kvh = item % p.Hkv, b = item / p.Hkv;
  const float *plse = p.part_lse + item * p.nsplit * p.R + r;
  const float *po = p.part_o + (item * p.nsplit * p.R + r) * p.Dv;
  const int64_t kstride = static_cast<int64_t>(p.R) * p.Dv;
  const int lq = static_cast<int>(p.Lq);                 // <= R: 32-bit divisions
  const int64_t h = kvh * p.group + r / lq, i = r % lq;  // the row's query head and query row
  const int64_t orow = b * p.os[0] + h * p.os[1] + i * p.os[2];
  const bool stage = static_cast<size_t>(p.nsplit) * p.Dv * sizeof(float) <= kStageBytes;
  fa_dec::trace_start();
  // (kept rolled: one copy of the body, run twice)
#pragma unroll 1
  for (int pass = p.warm ? 0 : 1; pass < 2; ++pass) {
    const bool live = pass == 1;
    if (live) {
      __syncthreads();      // the warm pass is done with staged and w
      fa_cuda::pdl_wait();  // launched early (pdl.cuh): the decode kernel's partials are written once this returns
      fa_dec::trace_mark(fa_dec::kMarkFirstTile);
    }
    if (stage) {  // Dv % 8 == 0 and 16-byte aligned rows: whole 16-byte units
      const int upr = p.Dv / 4;
      for (int u = threadIdx.x; u < p.nsplit * upr; u += blockDim.x) {
        const int k = u / upr, c = (u - k * upr) * 4;
        fa_cuda::cp_async16(fa_cuda::smem_addr(staged + k * p.Dv + c), po + k * kstride + c, 16);
      }
      fa_cuda::cp_async_commit();
    }
    if (threadIdx.x < 32) {
      const float lse = split_weights<false>(
          p.nsplit, [&](int k) { return __ldcg(plse + k * p.R); }, w);
      if (threadIdx.x == 0) lse_s = lse;
      if (live) fa_dec::trace_mark(fa_dec::kMarkMergeWeights);
    }
    fa_cuda::cp_async_wait<0>();
    __syncthreads();
    if (live) fa_dec::trace_mark(fa_dec::kMarkMergeValues);
    for (int e = threadIdx.x; e < p.Dv; e += blockDim.x) {
      float acc = 0.0f;
      if (stage) {
#pragma unroll 8
        for (int k = 0; k < p.nsplit; ++k) acc = split_step(acc, w[k], staged[k * p.Dv + e]);
      } else {  // unrolled: 8 splits' loads in flight, not one at a time
#pragma unroll 8
        for (int k = 0; k < p.nsplit; ++k) acc = split_step(acc, w[k], __ldcg(po + k * kstride + e));
      }
      if (live) fa_cuda::store_any(p.o, orow + e, p.dtype, acc);
    }
    if (live && threadIdx.x == 0 && p.lse) p.lse[b * p.lses[0] + h * p.lses[1] + i * p.lses[2]] = lse_s;
  }
  fa_dec::trace_mark(fa_dec::kMarkEnd);
}

struct part_desc {
  const void *o, *lse;
  int odt, ldt;
  int64_t os[4], ls[3];
};

// Up to this many parts travel in the kernel's parameters (80 bytes each,
// under the 4 KiB every CUDA version takes): no copy to wait for, so the
// call stays asynchronous and can be captured into a CUDA graph. More parts
// go through a device copy of the descriptors.
constexpr int kInlineParts = 32;

struct merge_params {
  part_desc inl[kInlineParts];  // parts == nullptr: the n descriptors
  const part_desc *parts;       // else: a device copy of them
  int n;
  void *o, *lse;
  int odt, ldt;
  int64_t os[4], ls[3];
  int64_t H, L, Dv;
};

// fa_merge_states: one block per row (b, h, i), any dtypes and strides.
__global__ void merge_kernel(const __grid_constant__ merge_params p) {
  extern __shared__ double wdyn[];
  __shared__ double lse_s;
  const int64_t x = blockIdx.x, i = x % p.L, h = (x / p.L) % p.H, b = x / (p.L * p.H);
  if (threadIdx.x < 32) {
    const double lse = merge_weights(
        p.n,
        [&](int k) {
          const part_desc &d = p.parts ? p.parts[k] : p.inl[k];
          const int64_t at = b * d.ls[0] + h * d.ls[1] + i * d.ls[2];
          return d.ldt == FA_F64 ? static_cast<const double *>(d.lse)[at]
                                 : static_cast<double>(static_cast<const float *>(d.lse)[at]);
        },
        wdyn);
    if (threadIdx.x == 0) lse_s = lse;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < p.Dv; e += blockDim.x) {
    double acc = 0.0;
    for (int k = 0; k < p.n; ++k) {
      if (wdyn[k] == 0.0) continue;
      const part_desc &d = p.parts ? p.parts[k] : p.inl[k];
      const int64_t at = b * d.os[0] + h * d.os[1] + i * d.os[2] + e * d.os[3];
      const double v = d.odt == FA_F64 ? static_cast<const double *>(d.o)[at]
                                       : static_cast<double>(fa_cuda::load_any(d.o, at, d.odt));
      acc += wdyn[k] * v;
    }
    const int64_t at = b * p.os[0] + h * p.os[1] + i * p.os[2] + e * p.os[3];
    if (p.odt == FA_F64)
      static_cast<double *>(p.o)[at] = acc;
    else
      fa_cuda::store_any(p.o, at, p.odt, static_cast<float>(acc));
  }
  if (threadIdx.x == 0 && p.lse) {
    const int64_t at = b * p.ls[0] + h * p.ls[1] + i * p.ls[2];
    if (p.ldt == FA_F64)
      static_cast<double *>(p.lse)[at] = lse_s;
    else
      static_cast<float *>(p.lse)[at] = static_cast<float>(lse_s);
  }
}

// ---- host ------------------------------------------------------------------

using fa_cuda::device_guard;
using fa_cuda::scratch;

void copy3(int64_t dst[3], const fa_tensor &t) {
  for (int d = 0; d < 3; ++d) dst[d] = t.stride[d];
}

// 16-byte copies need every cache row on a 16-byte boundary.
bool rows_aligned16(const fa_tensor &t) {
  const int64_t es = static_cast<int64_t>(fa_dtype_size(t.dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.stride[d] * es % 16 != 0) return false;
  return true;
}

int bucket(int64_t d) {
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

// Resident decode blocks per multiprocessor, asked of the occupancy API once
// per (device, dtype, head-dim bucket, rows per block): the API call costs
// host time on every call otherwise. 0 = not asked yet.
constexpr int kCachedDevices = 64;
std::atomic<int> occ_cache[kCachedDevices][3][3][4];
std::atomic<int> sm_cache[kCachedDevices];

int occupancy(int dev, fa_dtype dt, int kd, int rb) {
  const int di = dt == FA_BF16 ? 0 : dt == FA_F16 ? 1 : 2, ki = kd == 64 ? 0 : kd == 128 ? 1 : 2;
  const int ri = rb == 1 ? 0 : rb == 4 ? 1 : rb == 8 ? 2 : 3;
  std::atomic<int> *slot = dev >= 0 && dev < kCachedDevices ? &occ_cache[dev][di][ki][ri] : nullptr;
  int n = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (n > 0) return n;
  n = dt == FA_BF16  ? fa__cuda_decode_occupancy_bf16(kd, rb)
      : dt == FA_F16 ? fa__cuda_decode_occupancy_f16(kd, rb)
                     : fa__cuda_decode_occupancy_f32(kd, rb);
  if (slot && n > 0) slot->store(n, std::memory_order_relaxed);
  return n;
}

int multiprocessors(int dev) {
  std::atomic<int> *slot = dev >= 0 && dev < kCachedDevices ? &sm_cache[dev] : nullptr;
  int sms = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (sms > 0) return sms;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) {
    (void)cudaGetLastError();
    return 132;
  }
  if (slot) slot->store(sms, std::memory_order_relaxed);
  return sms;
}

std::atomic<int> cc_cache[kCachedDevices];

// Programmatic dependent launches (pdl.cuh) for the decode step's kernels:
// on compute capability 9.0 and later, unless FLASHATTN_CUDA_PDL=0 (A/B
// timing; read at each call).
bool use_pdl(int dev) {
  if (!fa_cuda::env_switch("FLASHATTN_CUDA_PDL", 1)) return false;
  std::atomic<int> *slot = dev >= 0 && dev < kCachedDevices ? &cc_cache[dev] : nullptr;
  int major = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (major == 0) {
    if (dev < 0 || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (slot) slot->store(major, std::memory_order_relaxed);
  }
  return major >= 9;
}

// How the splits share a row's tiles (block_work_of in decode_parts.cuh):
// interleaved for caches without a block table (and the plain forward), runs
// of tiles for paged ones; FLASHATTN_CUDA_DECODE_INTERLEAVE=1 / =0 forces
// either (read at each call; A/B timing and tests of both). H200, bf16, D
// 128, GQA 32/8, unchecked calls, 2 rounds (bench/results/
// 2026-12-01-h200-decode-trace.txt): B = 1, 32k keys, [B, Hkv, L, D]
// 0.057-0.060 -> 0.050-0.051 ms, [B, L, Hkv, D] 0.047 -> 0.045; but pages
// of 256 (shuffled) 0.047 -> 0.051 and of 16 0.050 -> 0.052; B = 8 and
// Lk = 131072 within the runs' spread either way.
bool interleave_splits(bool paged) {
  return fa_cuda::env_switch("FLASHATTN_CUDA_DECODE_INTERLEAVE", !paged) != 0;
}

// The L2 policy of the K/V copies: evict-first, as the cache is read once
// per call and is larger than L2 at every shape that takes time; with the
// normal policy the stream evicts what the call reads again (the kernels'
// code, the partial results, the queries), which the block timeline
// suggested costs each stage that runs new code about a microsecond per few
// dozen instructions (bench/results/2026-12-01-h200-decode-trace.txt).
// H100, bf16, D 128, GQA 32/8, 2 rounds each: B = 1 1-6% faster, eager and
// in CUDA graphs (32k keys 0.0557 / 0.0550 -> 0.0535 / 0.0534 ms a call),
// B >= 8 within +-2% (bench/results/2026-12-05-h100-decode-evict-first.txt).
// FLASHATTN_CUDA_DECODE_EVICT=0: the normal policy (read at each call; A/B
// timing with the same instructions).
uint64_t kv_l2_policy() {
  return fa_cuda::env_switch("FLASHATTN_CUDA_DECODE_EVICT", 1) ? fa_cuda::kL2EvictFirst : fa_cuda::kL2EvictNormal;
}

// The fused merge's dry runs (decode_parts.cuh, finish_splits): on unless
// FLASHATTN_CUDA_DECODE_WARM_MERGE=0 (read at each call; A/B timing).
bool warm_merge() {
  return fa_cuda::env_switch("FLASHATTN_CUDA_DECODE_WARM_MERGE", 1) != 0;
}

// Rows per decode block: 16 (one m16 tile) on the tensor-core kernel for
// grouped f16 / bf16 queries with head dims up to 128 (decode_mma_kernel.cuh);
// else the CUDA-core kernel's 1, 4 or 8. FLASHATTN_CUDA_DECODE_MMA=0 keeps
// the CUDA-core kernel for every shape (A/B timing, tests of both).
int rows_per_block(fa_dtype dt, int kd, int64_t R) {
  const bool mma_off = !fa_cuda::env_switch("FLASHATTN_CUDA_DECODE_MMA", 1);
  if (!mma_off && (dt == FA_F16 || dt == FA_BF16) && kd <= 128 && R >= 2) return 16;
  return R == 1 ? 1 : R <= 4 ? 4 : 8;
}

// Keys per tile of the decode kernel (see cfg / mma_cfg in decode_kernel.cuh,
// decode_mma_kernel.cuh).
int tile_keys(int kd, int rb) {
  return rb == 16 ? 64 : 128 / (kd / 8) * (rb >= 8 ? 2 : 4);
}

// ---- split merge ----------------------------------------------------------

// A split call's partial results are merged by the combine kernel (the
// default) or by the decode kernel's last split block of each item
// (decode_parts.cuh's finish_splits, FLASHATTN_CUDA_DECODE_FUSED_MERGE=1;
// =0 or unset: the combine; read at each call). Both give the same bits.
// The fused merge was the default from 32 items (B * Hkv * row blocks) up
// while the combine kernel's tail was long (2026-12-01: B = 8 0.0775 fused
// against 0.0811-0.0846 ms; bench/results/2026-12-01-h200-decode-fused-
// merge-f32.txt). Re-measured after the changes since (the combine's warm
// pass, the partials in the stream's buffers), the combine is faster on
// every shape that splits: H200, bf16, D 128, GQA 32/8, unchecked calls,
// two rounds, call ms fused / combine (bench/results/2026-12-02-h200-decode-
// combine-default.txt): B = 8, 8k keys 0.0790 0.0773 / 0.0730 0.0726, pages
// of 16 0.0837 0.0832 / 0.0796 0.0796, B = 4, 16k 0.0781 0.0786 / 0.0747
// 0.0742, B = 16, 4k 0.0751 0.0745 / 0.0748 0.0723. The block timeline at B
// = 8 says why: from the last block's loop end to the call's end 7.2 us
// fused (the last split block stores, counts itself, then loads, weighs
// and sums the splits, one step after another), 4.4 us with the combine
// (its blocks wait launched, code warm). The fused merge needs the
// stream's counters (stream_buffers.cu): without them (a CUDA graph
// capture, past the stream table) the combine merges whatever the switch.
bool fused_merge() {
  return fa_cuda::env_switch("FLASHATTN_CUDA_DECODE_FUSED_MERGE", 0) != 0;
}

}  // namespace

FA_DEC_TRACE_EXPORT(combine)

// num_splits = 0: the blocks of one wave. items = B * Hkv * row blocks; a wave
// is `slots` blocks: the CUDA-core kernel fills each multiprocessor (its
// resident blocks, occupancy API), the tensor-core kernel at head dims 65 ..
// 128 puts one block on each (its occupancy is 2), 3/2 where pages are shorter
// than its 64-key tile. With items below that, the keys are split in
// floor(slots / items) parts (every block resident, all streaming at once, none
// waiting for a second wave), each at least kMinSplitTiles tiles long and at
// most 128 parts. A tensor-core block is latency-bound (~0.85 us a tile alone,
// 15% less since its copies went through one pointer a run), and alone on its
// SM it runs faster than two sharing one, enough to stream the cache in half
// the blocks. H200, bf16, D 128, GQA 32/8, unchecked calls, two runs each
// (bench/results/2026-12-02-h200-decode-splits.txt): B = 1, 32k keys 16 splits
// 0.0420 ms against 33 (two a SM) 0.0446, [B, L, Hkv, D] 0.0421 / 0.0454, pages
// of 256 0.0436 / 0.0467, 131k keys 0.1315 / 0.1344; B = 4, 16k keys 4 / 8
// splits 0.0714 / 0.0731; B = 8, 8k keys 2 / 4 splits 0.0718 / 0.0726; B = 16,
// 4k keys 1 / 2 splits 0.0697 / 0.0722. With pages of 16 rows (four a tile) one
// block a SM lost where the keys are many, and two a SM lost too: B = 1, 131k
// keys 0.1457 ms at 16 splits, 0.1380 at 33, 0.1369 at 24; 32k keys 0.0462,
// 0.0472, 0.0441; B = 8 0.0779 at 2, 0.0728 at 4, 0.0736 at 3. Pages shorter
// than a tile take 3/2 blocks a SM (how blocks that each wait on four pages a
// tile share an SM best is measured here, not derived).
constexpr int kMinSplitTiles = 2;
static int choose_splits(const fa__problem *p, const fa__kv *kv, int64_t items, int kd, int rb, int dev) {
  const int sms = multiprocessors(dev);
  int64_t slots;
  if (rb == 16 && kd == 128) {  // measured there; D <= 64 (half the bytes a tile) keeps the occupancy
    const bool short_pages = kv && kv->map.block_table && kv->map.page_size < tile_keys(kd, rb);
    slots = short_pages ? static_cast<int64_t>(sms) * 3 / 2 : sms;
  } else {
    const int occ = occupancy(dev, p->dtype, kd, rb);
    slots = static_cast<int64_t>(sms) * (occ > 1 ? occ : 1);
  }
  if (items >= slots) return 1;
  int64_t n = slots / items;
  const int64_t most = p->Lk / (kMinSplitTiles * tile_keys(kd, rb));
  if (n > most) n = most;
  if (n > 128) n = 128;
  return n < 1 ? 1 : static_cast<int>(n);
}

// The split-KV decode (and the split merge) over p's keys: the
// kv-cache call's (kv set, after any append) or, kv NULL, the plain
// forward's k and v (fa__cuda_decode_fits).
static fa_status run_decode(const fa__problem *p, const fa__kv *kv, const fa__dec_bounds &bounds, cudaStream_t s,
                            fa__err *err) {
  fa_status st = FA_OK;
  const int64_t R = p->group * p->Lq;
  const int kd = bucket(p->D > p->Dv ? p->D : p->Dv);
  const int rb = rows_per_block(p->dtype, kd, R);
  const int64_t nrb = (R + rb - 1) / rb;
  const int64_t items = p->B * p->Hkv * nrb;
  int dev = -1;  // the current device (device_guard made it the tensors')
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = -1;
  }
  // the combine (two-kernel merge) always follows the decode kernel as its
  // programmatic dependent; the decode kernel follows the append kernel so
  // only in the same call (launched early after some other kernel, e.g. the
  // previous step's, it measured slower: 0.30 vs 0.25 ms, MHA B=8 Lk=8192 on
  // the H200; and the split counters are shared with the previous call on
  // the stream, which must have ended)
  const bool pdl = use_pdl(dev), pdl_decode = pdl && kv && kv->L_new > 0;
  int nsplit = kv && kv->num_splits > 0 ? kv->num_splits : choose_splits(p, kv, items, kd, rb, dev);
  if (nsplit > kMaxSplits) nsplit = kMaxSplits;
  if (items * nsplit > 0x7fffffffLL) {
    fa__err_set(err, "cuda decode: %lld blocks exceed the grid", (long long)(items * nsplit));
    return FA_ERR_UNSUPPORTED;
  }

  fa__dec_params dp;
  memset(&dp, 0, sizeof dp);
  dp.q = p->q.data;
  dp.k = p->k.data;
  dp.v = p->v.data;
  dp.o = p->o.data;
  dp.lse = static_cast<float *>(p->lse.data);
  copy3(dp.qs, p->q);
  copy3(dp.os, p->o);
  copy3(dp.lses, p->lse);
  copy3(dp.ks, p->k);
  copy3(dp.vs, p->v);
  if (kv) {
    dp.map = kv->map;
    dp.cache_seqlens = kv->cache_seqlens;
    dp.L_new = kv->L_new;
    dp.rot_cos = kv->rotary_cos;
    dp.rot_sin = kv->rotary_sin;
    dp.rot_dim = static_cast<int>(kv->rotary_dim);
    dp.rot_interleaved = kv->rotary_interleaved;
  } else {  // the plain forward: every sequence has Lk keys, batch b's rows as "page" b
    dp.map.page_size = p->Lk;
    dp.top_left = !p->bottom_right;
  }
  dp.fixed_len = p->Lk;
  dp.bounds = bounds;
  dp.alibi = p->alibi_slopes;
  dp.B = p->B;
  dp.Hq = p->Hq;
  dp.Hkv = p->Hkv;
  dp.group = p->group;
  dp.Lq = p->Lq;
  dp.D = static_cast<int>(p->D);
  dp.Dv = static_cast<int>(p->Dv);
  dp.R = static_cast<int>(R);
  dp.nrb = static_cast<int>(nrb);
  dp.nsplit = nsplit;
  dp.elementwise = p->softcap > 0 || p->alibi_slopes != nullptr;
  dp.qscale = static_cast<float>(dp.elementwise ? p->scale : p->scale * 1.4426950408889634);
  dp.softcap = static_cast<float>(p->softcap);
  dp.wl = p->window_left;
  dp.wr = p->window_right;
  dp.interleave = interleave_splits(dp.map.block_table != nullptr);
  dp.warm_merge = warm_merge();
  dp.kv_policy = kv_l2_policy();

  // with splits: the partial results in the stream's buffer (or, where a
  // stream has none, this call's scratch), merged by the decode kernel's
  // last split blocks through the stream's per-item counters (fused_merge),
  // or by the combine kernel
  scratch part;
  bool zeroed_here = false;  // a memset on s since the append kernel: launch the decode kernel plainly
  if (nsplit > 1) {
    const size_t rows = static_cast<size_t>(p->B * p->Hkv) * static_cast<size_t>(nsplit) * static_cast<size_t>(R);
    const size_t part_bytes = rows * static_cast<size_t>(p->Dv + 1) * sizeof(float);
    fa_cuda::stream_buffers sb;
    const bool mine = fa_cuda::stream_buffers_for(dev, s, fused_merge() ? items : 0, part_bytes, &sb);
    zeroed_here = sb.fresh_counters;
    if (mine) {
      dp.counters = sb.counters;
      dp.part_o = sb.parts;
    } else {
      st = part.alloc(part_bytes, s, "the split-KV partial results", err);
      if (st != FA_OK) return st;
      dp.part_o = static_cast<float *>(part.ptr);
    }
    dp.part_lse = dp.part_o + rows * static_cast<size_t>(p->Dv);
  }
  const int64_t blocks = items * nsplit;
  const bool pdl_dec = pdl_decode && !zeroed_here;
  st = p->dtype == FA_BF16  ? fa__cuda_decode_launch_bf16(dp, kd, rb, pdl_dec, blocks, s, err)
       : p->dtype == FA_F16 ? fa__cuda_decode_launch_f16(dp, kd, rb, pdl_dec, blocks, s, err)
                            : fa__cuda_decode_launch_f32(dp, kd, rb, pdl_dec, blocks, s, err);
  if (st != FA_OK || nsplit == 1 || dp.counters) return st;  // merged by the decode kernel

  combine_params cp;
  memset(&cp, 0, sizeof cp);
  cp.part_o = dp.part_o;
  cp.part_lse = dp.part_lse;
  cp.o = p->o.data;
  cp.lse = dp.lse;
  copy3(cp.os, p->o);
  copy3(cp.lses, p->lse);
  cp.Hkv = p->Hkv;
  cp.group = p->group;
  cp.Lq = p->Lq;
  cp.R = static_cast<int>(R);
  cp.Dv = static_cast<int>(p->Dv);
  cp.nsplit = nsplit;
  cp.dtype = p->dtype;
  cp.warm = pdl;
  const size_t staged = static_cast<size_t>(nsplit) * static_cast<size_t>(p->Dv) * sizeof(float);
  FA_CUDA_TRY(fa_cuda::launch_pdl(pdl, combine_kernel, dim3(static_cast<unsigned>(p->B * p->Hkv * R)), dim3(128),
                                  staged <= kStageBytes ? staged : 0, s, cp),
              "launching the split-KV combine kernel");
  return FA_OK;
}

int fa__cuda_decode_fits(const fa__problem *p) {
  if (p->kvcache || p->mask.data || p->bias.data || p->dropout_p > 0 || p->varlen) return 0;
  if (p->q_offset != 0 || p->k_offset != 0) return 0;  // the decode kernels' band starts at positions 0
  if (p->seqlens_q || p->seqlens_k) return 0;
  if (!(p->Lq <= 16 && p->Lq * p->group <= 64 && p->Lk >= 256 && p->Lk >= 8 * p->Lq)) return 0;
  return rows_aligned16(p->k) && rows_aligned16(p->v);
}

fa_status fa__cuda_decode_forward(const fa__problem *p, fa__err *err) {
  device_guard dg;
  fa_status st = dg.enter(p->q.data, err);
  if (st != FA_OK) return st;
  fa__dec_bounds bounds;
  bounds.max_len = p->Lk;
  bounds.pages = p->B;
  bounds.rot_len = 1;
  return run_decode(p, nullptr, bounds, static_cast<cudaStream_t>(p->stream), err);
}

fa_status fa__cuda_forward_kvcache(const fa__problem *p, fa__err *err) {
  const fa__kv *kv = &p->kv;
  const fa_tensor *caches[2] = {&p->k, &p->v};
  const char *cn[2] = {"cache->k_cache", "cache->v_cache"};
  for (int x = 0; x < 2; ++x)
    if (!rows_aligned16(*caches[x])) {
      fa__err_set(err,
                  "%s: the cuda backend reads cache rows with 16-byte copies; the data pointer and the strides of "
                  "dims 0..2 must be multiples of 16 bytes",
                  cn[x]);
      return FA_ERR_UNSUPPORTED;
    }
  const fa_tensor *news[2] = {&kv->k_new, &kv->v_new};
  const char *nn[2] = {"cache->k_new", "cache->v_new"};
  for (int x = 0; x < 2; ++x)
    if (news[x]->data && news[x]->shape[3] > 1 && news[x]->stride[3] != 1) {
      fa__err_set(err, "%s->stride[3] = %lld: the cuda backend needs a contiguous last dimension", nn[x],
                  (long long)news[x]->stride[3]);
      return FA_ERR_UNSUPPORTED;
    }
  const int64_t R = p->group * p->Lq;
  if (R > 65536 || p->B * p->Hkv > (int64_t)1 << 24) {
    fa__err_set(err, "cuda decode: %lld query rows per kv head and %lld sequences x kv heads is past its limits",
                (long long)R, (long long)(p->B * p->Hkv));
    return FA_ERR_UNSUPPORTED;
  }

  device_guard dg;
  fa_status st = dg.enter(p->q.data, err);
  if (st != FA_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(p->stream);
  fa__dec_bounds bounds;
  bounds.max_len = kv->capacity - kv->L_new;
  bounds.pages = kv->map.block_table ? kv->pages : p->B;
  bounds.rot_len = kv->rotary_len > 0 ? kv->rotary_len : 1;

  if (kv->L_new > 0) {
    append_params a;
    memset(&a, 0, sizeof a);
    a.k_new = kv->k_new.data;
    a.v_new = kv->v_new.data;
    a.k = p->k.data;
    a.v = p->v.data;
    copy3(a.kn, kv->k_new);
    copy3(a.vn, kv->v_new);
    copy3(a.ks, p->k);
    copy3(a.vs, p->v);
    a.map = kv->map;
    a.cache_seqlens = kv->cache_seqlens;
    a.bounds = bounds;
    a.rot_cos = kv->rotary_cos;
    a.rot_sin = kv->rotary_sin;
    a.rot_dim = static_cast<int>(kv->rotary_dim);
    a.rot_interleaved = kv->rotary_interleaved;
    a.D = static_cast<int>(p->D);
    a.Dv = static_cast<int>(p->Dv);
    a.dtype = p->dtype;
    if (kv->L_new > 65535 || p->Hkv > 65535 || p->B > 65535) {
      fa__err_set(err, "cuda kv-cache append: L_new, Hkv and B must each be at most 65535");
      return FA_ERR_UNSUPPORTED;
    }
    append_kernel<<<dim3(static_cast<unsigned>(kv->L_new), static_cast<unsigned>(p->Hkv), static_cast<unsigned>(p->B)),
                    64, 0, s>>>(a);
    FA_CUDA_CHECK_LAUNCH("launching the kv-cache append kernel");
  }

  return run_decode(p, kv, bounds, s, err);
}

fa_status fa__cuda_merge_states(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o,
                                fa_tensor *lse, void *stream, fa__err *err) {
  device_guard dg;
  fa_status st = dg.enter(o->data, err);
  if (st != FA_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t rows = o->shape[0] * o->shape[1] * o->shape[2];
  if (rows > 0x7fffffffLL) {
    fa__err_set(err, "fa_merge_states on cuda: %lld rows exceed the grid", (long long)rows);
    return FA_ERR_UNSUPPORTED;
  }
  if (static_cast<size_t>(n) * sizeof(double) > 48 * 1024) {
    fa__err_set(err, "fa_merge_states on cuda merges at most %d parts (n = %d)", 48 * 1024 / 8, n);
    return FA_ERR_UNSUPPORTED;
  }
  merge_params mp;
  memset(&mp, 0, sizeof mp);
  const bool inline_parts = n <= kInlineParts;
  const size_t dbytes = static_cast<size_t>(n) * sizeof(part_desc);
  part_desc *host = inline_parts ? mp.inl : static_cast<part_desc *>(malloc(dbytes));
  if (!host) {
    fa__err_set(err, "fa_merge_states: cannot allocate %d part descriptors", n);
    return FA_ERR_OUT_OF_MEMORY;
  }
  for (int k = 0; k < n; ++k) {
    part_desc &d = host[k];
    d.o = o_parts[k].data;
    d.lse = lse_parts[k].data;
    d.odt = o_parts[k].dtype;
    d.ldt = lse_parts[k].dtype;
    for (int x = 0; x < 4; ++x) d.os[x] = o_parts[k].shape[x] == 1 ? 0 : o_parts[k].stride[x];
    for (int x = 0; x < 3; ++x) d.ls[x] = lse_parts[k].shape[x] == 1 ? 0 : lse_parts[k].stride[x];
  }
  scratch descs;
  if (!inline_parts) {  // the copy below is waited for: not while capturing a graph
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const cudaError_t ce = cudaStreamIsCapturing(s, &cs);
    if (ce != cudaSuccess) (void)cudaGetLastError();
    if (ce != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
      free(host);
      fa__err_set(err,
                  "n = %d: fa_merge_states on cuda merges more than %d parts through a copy the host waits for, "
                  "which a stream capturing a CUDA graph cannot do: merge at most %d parts a call in a graph",
                  n, kInlineParts, kInlineParts);
      return FA_ERR_UNSUPPORTED;
    }
    st = descs.alloc(dbytes, s, "fa_merge_states' part descriptors", err);
    if (st == FA_OK) {
      const cudaError_t e = cudaMemcpyAsync(descs.ptr, host, dbytes, cudaMemcpyHostToDevice, s);
      if (e == cudaSuccess) (void)cudaStreamSynchronize(s);  // host is freed below
      if (e != cudaSuccess) st = fa__cuda_fail(e, "copying fa_merge_states' part descriptors", err);
    }
    free(host);
    if (st != FA_OK) return st;
    mp.parts = static_cast<const part_desc *>(descs.ptr);
  }
  mp.n = n;
  mp.o = o->data;
  mp.odt = o->dtype;
  for (int x = 0; x < 4; ++x) mp.os[x] = o->shape[x] == 1 ? 0 : o->stride[x];
  if (lse && lse->data) {
    mp.lse = lse->data;
    mp.ldt = lse->dtype;
    for (int x = 0; x < 3; ++x) mp.ls[x] = lse->shape[x] == 1 ? 0 : lse->stride[x];
  }
  mp.H = o->shape[1];
  mp.L = o->shape[2];
  mp.Dv = o->shape[3];
  const size_t smem = static_cast<size_t>(n) * sizeof(double);
  merge_kernel<<<static_cast<unsigned>(rows), 128, smem, s>>>(mp);
  FA_CUDA_CHECK_LAUNCH("launching the fa_merge_states kernel");
  return FA_OK;
}
