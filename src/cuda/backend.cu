// The cuda backend's table: whether a GPU is here, which problems it takes,
// and which path runs them.
//   fast path:    f16 / bf16, rows 16-byte aligned, tensor-core kernels for
//                 head-dim buckets 64 / 128 / 256 (forward and backward;
//                 the 256 backward where a block may have 145 KiB of shared
//                 memory: sm_80, sm_90); smaller dims are zero-padded to the
//                 bucket. On a compute capability 9.0 GPU they run on wgmma
//                 (sm_90a) instead of mma.sync.
//   generic path: everything else the backend accepts (f32, unaligned views,
//                 the 256 backward on devices with less shared memory):
//                 SIMT, f32 arithmetic.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../rules/fp8.h"
#include "decode.cuh"
#include "host_call.cuh"
#include "launch.cuh"

namespace {

using fa_cuda::device_guard;
using fa_cuda::scratch;

fa__cuda_strides strides_of(const fa_tensor &t) {
  fa__cuda_strides s;
  s.b = t.stride[0];
  s.h = t.stride[1];
  s.r = t.stride[2];
  return s;
}

bool is_half(fa_dtype t) {
  return t == FA_F16 || t == FA_BF16;
}

// cp.async moves 16 bytes: the fast path needs every row of q, k, v, o, ...
// to start on a 16-byte boundary.
bool rows_aligned(const fa_tensor &t) {
  if (!t.data) return true;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.stride[d] % 8 != 0) return false;
  return true;
}

int bucket_of(int64_t d) {
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

constexpr int64_t kMaxRows = 65535LL * 16;  // grid.y limit times the smallest row tile

// Compute capability of the current device; false (error cleared) when the
// runtime cannot say.
bool current_cc(int *dev, int *major, int *minor) {
  if (cudaGetDevice(dev) != cudaSuccess ||
      cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, *dev) != cudaSuccess ||
      cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, *dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

fa_status cuda_available(fa__err *err) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    if (e != cudaSuccess)
      fa__err_set(err, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    else
      fa__err_set(err, "no CUDA device");
    return FA_ERR_NO_BACKEND;
  }
  int dev = 0, major = 0, minor = 0;
  if (!current_cc(&dev, &major, &minor)) {
    fa__err_set(err, "no usable CUDA device (cannot query compute capability)");
    return FA_ERR_NO_BACKEND;
  }
  if (major < 8) {
    fa__err_set(err, "CUDA device %d has compute capability %d.%d; the cuda backend needs 8.0 or newer", dev, major,
                minor);
    return FA_ERR_NO_BACKEND;
  }
  return FA_OK;
}

fa_status check_last_dim(const fa_tensor &t, const char *name, fa__err *err) {
  if (t.data && t.shape[3] > 1 && t.stride[3] != 1) {
    fa__err_set(err, "%s->stride[3] = %lld: the cuda backend needs a contiguous last dimension (stride 1)", name,
                (long long)t.stride[3]);
    return FA_ERR_UNSUPPORTED;
  }
  return FA_OK;
}

// The FP8 forward: the sm_90a kernel only (fwd_fp8_kernel.cuh), so a
// compute capability 9.0 device, head dims that are multiples of 16 up to
// 256, rows of q, k, v, o 16-byte aligned, the rule's key block.
fa_status fp8_supports(const fa__problem *p, fa__err *err) {
#if defined(FA_HAVE_SM90A)
  int dev = 0, major = 0, minor = 0;
  if (!current_cc(&dev, &major, &minor) || major != 9 || minor != 0) {
    fa__err_set(err, "dtype e4m3: the cuda FP8 forward runs on compute capability 9.0 (Hopper, sm_90a) only");
    return FA_ERR_UNSUPPORTED;
  }
#else
  fa__err_set(err, "dtype e4m3: this build has no sm_90a kernels (nvcc >= 12.0 and FA_CUDA_SM90A=ON build them)");
  return FA_ERR_UNSUPPORTED;
#endif
  const int64_t dims[2] = {p->D, p->Dv};
  const char *dn[2] = {"head dim D", "value head dim Dv"};
  for (int x = 0; x < 2; ++x)
    if (dims[x] % 16 != 0 || dims[x] > 256) {
      fa__err_set(err, "%s = %lld: the cuda FP8 forward takes multiples of 16 up to 256", dn[x], (long long)dims[x]);
      return FA_ERR_UNSUPPORTED;
    }
  const fa_tensor *ts[] = {&p->q, &p->k, &p->v, &p->o};
  const char *names[] = {"q", "k", "v", "o"};
  for (int x = 0; x < 4; ++x) {
    const fa_tensor &t = *ts[x];
    bool ok = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
    for (int d = 0; d < 3; ++d) ok = ok && (t.stride[d] * static_cast<int64_t>(fa_dtype_size(t.dtype))) % 16 == 0;
    if (!ok) {
      fa__err_set(err, "%s: the cuda FP8 forward needs every row 16-byte aligned (data and strides)", names[x]);
      return FA_ERR_UNSUPPORTED;
    }
  }
  if (p->block_k != 0 && p->block_k != FA__FP8_BLOCK_K) {
    fa__err_set(err, "opt->block_k = %d: the cuda FP8 forward rounds P over blocks of %d keys (0 = that)", p->block_k,
                FA__FP8_BLOCK_K);
    return FA_ERR_UNSUPPORTED;
  }
  return FA_OK;
}

fa_status cuda_supports(const fa__problem *p, fa__err *err) {
  if (p->memory != FA_MEMORY_CUDA) {
    fa__err_set(err, "the cuda backend needs CUDA device memory; the tensors are in host memory");
    return FA_ERR_MEMORY_SPACE;
  }
  if (p->dtype == FA_F8_E4M3) {
    const fa_status st = fp8_supports(p, err);
    if (st != FA_OK) return st;
  } else if (p->dtype == FA_F64) {
    fa__err_set(err, "dtype f64 is not supported by the cuda backend (f16, bf16 fast; f32 on a slower SIMT path)");
    return FA_ERR_DTYPE;
  }
  if (!(p->dtype == FA_F32 || is_half(p->dtype) || p->dtype == FA_F8_E4M3)) {
    fa__err_set(err, "dtype %s is not supported by the cuda backend", fa_dtype_name(p->dtype));
    return FA_ERR_DTYPE;
  }
  if (p->lse.data && p->lse.dtype != FA_F32) {
    fa__err_set(err, "lse dtype %s: the cuda backend writes and reads lse as f32 only", fa_dtype_name(p->lse.dtype));
    return FA_ERR_DTYPE;
  }
  const int64_t dims[2] = {p->D, p->Dv};
  const char *dn[2] = {"head dim D", "value head dim Dv"};
  for (int x = 0; x < 2; ++x)
    if (dims[x] % 8 != 0 || dims[x] > 256) {
      fa__err_set(err, "%s = %lld: the cuda backend takes multiples of 8 up to 256", dn[x], (long long)dims[x]);
      return FA_ERR_UNSUPPORTED;
    }
  const fa_tensor *ts[] = {&p->q, &p->k, &p->v, &p->o, &p->dout, &p->dq, &p->dk, &p->dv};
  const char *names[] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
  for (int x = 0; x < 8; ++x) {
    const fa_status st = check_last_dim(*ts[x], names[x], err);
    if (st != FA_OK) return st;
  }
  if (p->Lq > kMaxRows || p->Lk > kMaxRows) {
    fa__err_set(err, "sequence length %lld exceeds the cuda backend's limit of %lld",
                (long long)(p->Lq > p->Lk ? p->Lq : p->Lk), (long long)kMaxRows);
    return FA_ERR_UNSUPPORTED;
  }
  return FA_OK;
}

void params_init(fa__cuda_params *pp, const fa__problem *p) {
  memset(pp, 0, sizeof *pp);
  pp->q = p->q.data;
  pp->k = p->k.data;
  pp->v = p->v.data;
  pp->o = p->o.data;
  pp->lse = static_cast<float *>(p->lse.data);
  pp->qs = strides_of(p->q);
  pp->ks = strides_of(p->k);
  pp->vs = strides_of(p->v);
  pp->os = strides_of(p->o);
  pp->lses = strides_of(p->lse);
  pp->dout = p->dout.data;
  pp->dq = p->dq.data;
  pp->dk = p->dk.data;
  pp->dv = p->dv.data;
  pp->dos = strides_of(p->dout);
  pp->dqs = strides_of(p->dq);
  pp->dks = strides_of(p->dk);
  pp->dvs = strides_of(p->dv);
  pp->mask = static_cast<const uint8_t *>(p->mask.data);
  pp->bias = p->bias.data;
  pp->bias_dtype = p->bias.dtype;
  for (int d = 0; d < 4; ++d) {
    pp->mask_s[d] = p->mask.stride[d];
    pp->bias_s[d] = p->bias.stride[d];
  }
  pp->alibi = p->alibi_slopes;
  const fa_tensor *ds[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
  const float **dp[3] = {&pp->q_descale, &pp->k_descale, &pp->v_descale};
  int64_t(*dst[3])[2] = {&pp->qds, &pp->kds, &pp->vds};
  for (int x = 0; x < 3; ++x) {
    *dp[x] = static_cast<const float *>(ds[x]->data);
    (*dst[x])[0] = ds[x]->stride[0];
    (*dst[x])[1] = ds[x]->stride[1];
  }
  pp->seqlens_q = p->seqlens_q;
  pp->seqlens_k = p->seqlens_k;
  pp->cu_q = p->cu_seqlens_q;
  pp->cu_k = p->cu_seqlens_k;
  pp->B = p->B;
  pp->Hq = p->Hq;
  pp->Hkv = p->Hkv;
  pp->group = p->group;
  pp->Lq = p->Lq;
  pp->Lk = p->Lk;
  pp->Lq_rows = p->q.shape[2];
  pp->Lk_rows = p->k.shape[2];
  pp->D = static_cast<int>(p->D);
  pp->Dv = static_cast<int>(p->Dv);
  pp->dtype = p->dtype;
  pp->varlen = p->varlen;
  pp->scale = static_cast<float>(p->scale);
  pp->scale_log2 = static_cast<float>(p->scale * 1.4426950408889634);
  pp->softcap = static_cast<float>(p->softcap);
  pp->wl = p->window_left;
  pp->wr = p->window_right;
  pp->bottom_right = p->bottom_right;
  pp->q_off = p->q_offset;
  pp->k_off = p->k_offset;
  pp->has_dropout = p->dropout_p > 0;
  pp->seed = p->dropout_seed;
  pp->offset = p->dropout_offset;
  pp->threshold = p->dropout_threshold;
  pp->dscale = pp->has_dropout ? static_cast<float>(p->dropout_scale) : 1.f;
  pp->has_extras = p->mask.data || p->bias.data || p->alibi_slopes || p->softcap > 0 || pp->has_dropout;
  const char *arith = getenv("FLASHATTN_CUDA_WS_ARITH");
  // (their ALiBi distances are exact floats: every |diag(i) - j| of the call under 2^24)
  const int64_t shift = p->q_offset - p->k_offset;
  const int64_t span = (shift < 0 ? -shift : shift) + p->q.shape[2] + p->k.shape[2] + p->Lq + p->Lk;
  const bool exact_span = span < (int64_t(1) << 24);
  pp->arith_only = (p->alibi_slopes || p->softcap > 0) && !p->mask.data && !p->bias.data && !pp->has_dropout &&
                   exact_span && !(arith && strcmp(arith, "0") == 0);
  // Dropout with or without those (no bias or mask: kScoreDrop; with one:
  // kScoreTileDrop, below), the keep bits one Philox call per four elements
  // (dropout_tile.cuh), where the key offset keeps the rule's groups of four
  // columns aligned with the tiles'; FLASHATTN_CUDA_WS_DROP=0 keeps the
  // per-element kernels for it.
  const char *drop = getenv("FLASHATTN_CUDA_WS_DROP");
  const bool drop_ok = p->k_offset % 4 == 0 && !(drop && strcmp(drop, "0") == 0);
  pp->arith_drop = pp->has_dropout && !p->mask.data && !p->bias.data && drop_ok && exact_span;
  // One bias of the inputs' dtype or one mask (with or without softcap,
  // ALiBi and dropout, dropout where drop_ok): the
  // warp-specialized forward may copy it tile by tile (launch_fwd_wgmma.cuh
  // decides whether the copy engine can address it); FLASHATTN_CUDA_WS_TILE=0
  // keeps the per-element kernels.
  const char *tile = getenv("FLASHATTN_CUDA_WS_TILE");
  const bool one_bias = p->bias.data && !p->mask.data && p->bias.dtype == p->dtype;
  const bool one_mask = p->mask.data && !p->bias.data;
  pp->fwd_tile = (one_bias || one_mask) && is_half(p->dtype) && (!pp->has_dropout || drop_ok) && exact_span &&
                         !(tile && strcmp(tile, "0") == 0)
                     ? (one_bias ? FA_CUDA_TILE_BIAS : FA_CUDA_TILE_MASK)
                     : 0;
  // (dBias, dS summed over the bias's broadcast dims, has kernels of its own, after the backward)
  pp->bwd_tile = pp->fwd_tile;
  for (int d = 0; d < 4; ++d) pp->tile_s[d] = pp->fwd_tile == FA_CUDA_TILE_MASK ? pp->mask_s[d] : pp->bias_s[d];
  const char *order = getenv("FLASHATTN_CUDA_WS_ORDER");
  pp->ws_order = !order ? 0 : strcmp(order, "heads") == 0 ? 1 : strcmp(order, "rows") == 0 ? 2 : 0;
  const char *v = getenv("FLASHATTN_CUDA_VARIANT");
  pp->variant = v ? atoi(v) : 0;
}

bool fast_ok(const fa__problem *p) {
  if (!is_half(p->dtype)) return false;
  const fa_tensor *ts[] = {&p->q, &p->k, &p->v, &p->o, &p->dout, &p->dq, &p->dk, &p->dv};
  for (const fa_tensor *t : ts)
    if (!rows_aligned(*t)) return false;
  return true;
}

// Whether the tensor-core backward takes head dims up to dmax here: bucket
// 256 needs the shared memory of bwd_wide_kernel.cuh's one-stage form.
bool fast_bwd_ok(const fa__problem *p, int dmax) {
  if (!fast_ok(p)) return false;
  if (dmax <= 128) return true;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return static_cast<size_t>(optin) >= fa__cuda_bwd_wide_smem(1);
}

#if defined(FA_HAVE_SM90A)
// The Hopper forward (wgmma) for head-dim buckets 64, 128 and 256 (there the
// warp-specialized kernel takes band-only calls, launch_fwd_wgmma.cuh) on
// the current device when it is compute capability 9.0 exactly: sm_90a code
// runs on no other. FLASHATTN_CUDA_WGMMA=0 keeps the mma.sync kernels (the
// sm_80 path), so that one GPU can test both.
bool wgmma_ok(int kd) {
  if (kd != 64 && kd != 128 && kd != 256) return false;
  const char *env = getenv("FLASHATTN_CUDA_WGMMA");
  if (env && strcmp(env, "0") == 0) return false;
  int dev = 0, major = 0, minor = 0;
  return current_cc(&dev, &major, &minor) && major == 9 && minor == 0;
}

// The Hopper backward goes with the Hopper forward, every bucket;
// FLASHATTN_CUDA_WGMMA_BWD=0 keeps the mma.sync backward alone (A/B timing).
bool wgmma_bwd_ok(int kd) {
  const char *env = getenv("FLASHATTN_CUDA_WGMMA_BWD");
  return !(env && strcmp(env, "0") == 0) && wgmma_ok(kd);
}

// Head-dim bucket 256 on wgmma: dQ by its own kernel in both modes, as the
// deterministic mode does it; the wide kernel's fused dQ (f32 atomics) was
// slower (bench/results/2026-12-07-h200-bwd256-dq-apart.txt).
// FLASHATTN_CUDA_BWD256_FUSED=1 keeps the fused one (an A/B switch).
bool wide_dq_apart(int kd) {
  const char *env = getenv("FLASHATTN_CUDA_BWD256_FUSED");
  return kd == 256 && wgmma_bwd_ok(kd) && !(env && strcmp(env, "1") == 0);
}
#endif

// The FP8 forward (cuda_supports let it through: an sm_90a build, a 9.0
// device), any row count: no decode route.
fa_status fp8_forward(const fa__problem *p, fa__err *err) {
#if defined(FA_HAVE_SM90A)
  fa__cuda_params pp;
  params_init(&pp, p);
  const int kd = p->D > 128 || p->Dv > 128 ? 256 : 128;
  cudaStream_t s = static_cast<cudaStream_t>(p->stream);
  return p->o.dtype == FA_BF16 ? fa__cuda_fp8_fwd_bf16(pp, kd, s, err) : fa__cuda_fp8_fwd_f16(pp, kd, s, err);
#else
  fa__err_set(err, "cuda: no FP8 forward in this build");
  return FA_ERR_INTERNAL;
#endif
}

fa_status cuda_forward(const fa__problem *p, fa__err *err) {
  device_guard dg;
  fa_status st = dg.enter(p->q.data, err);
  if (st != FA_OK) return st;
  if (p->dtype == FA_F8_E4M3) return fp8_forward(p, err);
  if (fa__cuda_decode_fits(p)) return fa__cuda_decode_forward(p, err);  // few rows, many keys
  fa__cuda_params pp;
  params_init(&pp, p);
  cudaStream_t s = static_cast<cudaStream_t>(p->stream);
  if (fast_ok(p)) {
    const int kd = bucket_of(p->D > p->Dv ? p->D : p->Dv);
#if defined(FA_HAVE_SM90A)
    if (wgmma_ok(kd))
      return p->dtype == FA_BF16 ? fa__cuda_wgmma_fwd_bf16(pp, kd, s, err) : fa__cuda_wgmma_fwd_f16(pp, kd, s, err);
#endif
    return p->dtype == FA_BF16 ? fa__cuda_fast_fwd_bf16(pp, kd, s, err) : fa__cuda_fast_fwd_f16(pp, kd, s, err);
  }
  return fa__cuda_generic_fwd(pp, s, err);
}

// dBias after the backward. On Hopper, a bias the warp-specialized kernels
// take (p.bwd_tile) whose dBias is contiguous and sums over no dim but maybe
// the batch, the heads and / or the rows: tensor cores (launch_bwd_wgmma.cuh
// launch_dbias_wgmma): with no dim summed the wgmma dS kernel, each element
// stored once (into the zeroed tensor where a band or lengths leave some
// unwritten); otherwise the summing kernel, which writes every element. A
// dBias summed over the keys (or on other GPUs, or FLASHATTN_CUDA_DBIAS_WGMMA=0):
// the SIMT kernel that recomputes every dS element and sums the broadcast
// dims in a fixed order.
fa_status dbias(const fa__problem *p, fa__cuda_params *pp, bool fast, int dmax, cudaStream_t s, fa__err *err) {
  const fa_tensor &db = p->dbias;
#if defined(FA_HAVE_SM90A)
  const int64_t logical[4] = {pp->B, pp->Hq, pp->Lq, pp->Lk};
  // (with dropout: the SIMT kernel; the tensor-core dS kernels make no keep bits)
  bool direct = pp->bwd_tile == FA_CUDA_TILE_BIAS && db.dtype == p->dtype && !pp->has_dropout;
  bool summed[3] = {false, false, false};
  int64_t numel = 1;
  for (int d = 3; d >= 0; --d) {
    if (d < 3 && db.shape[d] == 1 && logical[d] > 1)
      summed[d] = true;
    else
      direct = direct && db.shape[d] == logical[d];
    direct = direct && (db.shape[d] == 1 || db.stride[d] == numel);
    numel *= db.shape[d];
  }
  const int kd = bucket_of(dmax);
  const char *env = getenv("FLASHATTN_CUDA_DBIAS_WGMMA");
  if (fast && direct && wgmma_bwd_ok(kd) && !(env && strcmp(env, "0") == 0)) {
    const bool sum = summed[0] || summed[1] || summed[2];
    const bool every = pp->wl < 0 && pp->wr < 0 && !pp->seqlens_q && !pp->seqlens_k && !pp->varlen;
    if (!sum && !every)
      FA_CUDA_TRY(cudaMemsetAsync(db.data, 0, static_cast<size_t>(numel) * fa_dtype_size(db.dtype), s),
                  "zeroing dBias");
    pp->dbias = db.data;
    for (int d = 0; d < 4; ++d) pp->dbias_s[d] = db.shape[d] == 1 ? 0 : db.stride[d];
    pp->dbias_sum_b = summed[0];
    pp->dbias_sum_h = summed[1];
    pp->dbias_sum_i = summed[2];
    pp->dbias_pairs = reinterpret_cast<uintptr_t>(db.data) % 4 == 0 && pp->dbias_s[0] % 2 == 0 &&
                      pp->dbias_s[1] % 2 == 0 && pp->dbias_s[2] % 2 == 0;
    return p->dtype == FA_BF16 ? fa__cuda_wgmma_dbias_bf16(*pp, kd, s, err) : fa__cuda_wgmma_dbias_f16(*pp, kd, s, err);
  }
#else
  (void)fast;
  (void)dmax;
#endif
  return fa__cuda_dbias(*pp, db.data, db.dtype, db.shape, db.stride, s, err);
}

fa_status cuda_backward(const fa__problem *p, fa__err *err) {
  device_guard dg;
  fa_status st = dg.enter(p->q.data, err);
  if (st != FA_OK) return st;
  fa__cuda_params pp;
  params_init(&pp, p);
  cudaStream_t s = static_cast<cudaStream_t>(p->stream);

  const int64_t bt = p->q.shape[0];
  const size_t rows = static_cast<size_t>(bt * p->Hq * p->q.shape[2]);
  scratch dsum;
  st = dsum.alloc(rows * sizeof(float), s, "the backward's row sums", err);
  if (st != FA_OK) return st;
  pp.dsum = static_cast<float *>(dsum.ptr);
  const int dmax = static_cast<int>(p->D > p->Dv ? p->D : p->Dv);
  scratch ws_stats;
#if defined(FA_HAVE_SM90A)
  // the warp-specialized backward's padded copy of LSE and dsum, where it may
  // take the call (launch.cuh; launch_bwd_wgmma.cuh has the rest of the test)
  if (fast_ok(p) && dmax <= 128 && wgmma_bwd_ok(bucket_of(dmax)) && fa__cuda_ws_bwd_shape(pp)) {
    // (packed sequences: 4 rows more a sequence, fa__cuda_ws_row0, and a
    // tile more for the last one's last tile)
    const int64_t rows_ws = p->q.shape[2] + (p->varlen ? 4 * p->B : 0);
    const int64_t pitch = (rows_ws + 127) / 128 * 128 + (p->varlen ? 128 : 0);
    st = ws_stats.alloc(static_cast<size_t>(bt * p->Hq * 2 * pitch) * sizeof(float), s,
                        "the backward's padded row statistics", err);
    if (st != FA_OK) return st;
    pp.ws_stats = static_cast<float *>(ws_stats.ptr);
    pp.ws_pitch = pitch;
  }
#endif
  const bool fast = fast_bwd_ok(p, dmax);
  const int det = p->deterministic != 0;
  // dQ by a kernel of its own, no f32 accumulator (deterministic mode, and
  // wide_dq_apart)
  int dq_apart = det;
#if defined(FA_HAVE_SM90A)
  if (fast && wide_dq_apart(bucket_of(dmax))) dq_apart = 1;
#endif
  scratch dq_acc;
  // dQ summed in f32 across the key blocks: always when fused; when
  // deterministic, by the warp-specialized kernel, in turns (p.dq_turn: a
  // counter per query tile of 64 or more rows, after the accumulator; packed
  // sequences, one stored batch, one more per sequence: bwd_ws_turn). The
  // dsum kernel zeroes the accumulator's rows (bwd_rows.cu); the turns here.
  if (fast && (!dq_apart || pp.ws_stats)) {
    const size_t bytes = rows * static_cast<size_t>(p->D) * sizeof(float);
    pp.dq_turn_pitch = (p->q.shape[2] + 63) / 64 + (p->varlen ? p->B + 1 : 0);
    const size_t turns = det ? static_cast<size_t>(bt * p->Hq * pp.dq_turn_pitch) * sizeof(int) : 0;
    st = dq_acc.alloc(bytes + turns, s, "the dQ accumulator", err);
    if (st != FA_OK) return st;
    pp.dq_acc = static_cast<float *>(dq_acc.ptr);
    if (det) {
      pp.dq_turn = reinterpret_cast<int *>(static_cast<char *>(dq_acc.ptr) + bytes);
      FA_CUDA_TRY(cudaMemsetAsync(pp.dq_turn, 0, turns, s), "zeroing the dQ turns");
    }
  }
  st = fa__cuda_dsum(pp, s, err);
  if (st != FA_OK) return st;

  if (fast) {
    const int kd = bucket_of(dmax);
#if defined(FA_HAVE_SM90A)
    if (wgmma_bwd_ok(kd))
      st = p->dtype == FA_BF16 ? fa__cuda_wgmma_bwd_bf16(pp, kd, dq_apart, s, err)
                               : fa__cuda_wgmma_bwd_f16(pp, kd, dq_apart, s, err);
    else
#endif
      st = p->dtype == FA_BF16 ? fa__cuda_fast_bwd_bf16(pp, kd, det, s, err)
                               : fa__cuda_fast_bwd_f16(pp, kd, det, s, err);
    if (st != FA_OK) return st;
    if (!dq_apart) {
      st = fa__cuda_dq_convert(pp, s, err);
      if (st != FA_OK) return st;
    }
  } else {
    st = fa__cuda_generic_bwd(pp, s, err);
    if (st != FA_OK) return st;
  }
  if (p->dbias.data) return dbias(p, &pp, fast, dmax, s, err);
  return FA_OK;
}

// fa_forward_kvcache: decode.cu (append, split-KV decode, combine).
fa_status cuda_forward_kvcache(const fa__problem *p, fa__err *err) {
  return fa__cuda_forward_kvcache(p, err);
}

fa_status cuda_merge_states(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse,
                            void *stream, fa__err *err) {
  return fa__cuda_merge_states(n, o_parts, lse_parts, o, lse, stream, err);
}

}  // namespace

extern "C" const fa__backend fa__backend_cuda = {FA_BACKEND_CUDA,      "cuda",           cuda_available,
                                                 cuda_supports,        cuda_forward,     cuda_backward,
                                                 cuda_forward_kvcache, cuda_merge_states};
