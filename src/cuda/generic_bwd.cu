// Generic backward (SIMT, f32 arithmetic) and dBias, which both paths
// share (the row kernels dsum and dQ's conversion: bwd_rows.cu).
//
// The generic backward recomputes P twice, once per output it owns, so that
// every gradient element has exactly one writer and a fixed summation order:
//   dq kernel:   a block owns 16 query rows and walks the keys;
//   dkdv kernel: a block owns 16 keys of one kv head and walks the query
//                heads of its group and their rows (GQA sums in registers).
// No atomics anywhere: deterministic by construction.
#include <math.h>

#include "launch.cuh"
#include "rules.cuh"

namespace fa_cuda {
namespace {

constexpr int kT = 128;
constexpr int kMaxDPerLane = 8;  // head dims up to 256

// lse in log2 units, with -inf (a row that saw nothing) turned into +inf so
// that exp2(x - lse2) is 0 for it instead of NaN.
__device__ __forceinline__ float lse2_of(float lse) {
  return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

// Everything of one visible-or-not element the gradients need.
struct elem_grad {
  float p_drop;  // P * keep / (1 - p): the weight of dO in dV
  float ds;      // dL/dscore (after softcap, ALiBi, bias): dBias
  float dsd;     // dL/d(scale * dot): ds times the softcap's derivative
};

__device__ __forceinline__ elem_grad grad_of(const fa__cuda_params &p, const seq_ctx &c, float qk, float dov,
                                             float lse2, float dsum, int64_t i, int64_t j) {
  elem_grad g = {0.f, 0.f, 0.f};
  float capped;
  const float x = score_full(p, c, qk, i, j, &capped);
  if (x == -INFINITY) return g;
  const float pr = exp2f(x - lse2);
  float dp = dov;
  g.p_drop = pr;
  if (p.has_dropout) {
    const bool keep = keep_one(p, c, i, j);
    g.p_drop = keep ? pr * p.dscale : 0.f;
    dp = keep ? dov * p.dscale : 0.f;
  }
  g.ds = pr * (dp - dsum);
  g.dsd = g.ds * fa__softcap_grad_f(capped, p.softcap);
  return g;
}

constexpr int kQRows = 16, kKeys = 32;  // dq kernel tile

__global__ void __launch_bounds__(kT) generic_dq_kernel(const fa__cuda_params p) {
  extern __shared__ float gsm[];
  const int D = p.D, Dv = p.Dv;
  float *sQ = gsm;                   // [16][D]
  float *sdO = sQ + kQRows * D;      // [16][Dv]
  float *sK = sdO + kQRows * Dv;     // [32][D + 1]
  float *sV = sK + kKeys * (D + 1);  // [32][Dv + 1]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t bh = blockIdx.x, b = bh / p.Hq, h = bh % p.Hq, kvh = h / p.group;
  const seq_ctx c = make_seq_ctx(p, b, h);
  const int64_t rows = p.varlen ? c.seq.lq : p.Lq;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kQRows;
  if (m0 >= rows) return;

  const int64_t qb = c.seq.bidx * p.qs.b + h * p.qs.h + c.seq.q_row0 * p.qs.r;
  const int64_t dob = c.seq.bidx * p.dos.b + h * p.dos.h + c.seq.q_row0 * p.dos.r;
  const int64_t kb = c.seq.bidx * p.ks.b + kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const int64_t vb = c.seq.bidx * p.vs.b + kvh * p.vs.h + c.seq.k_row0 * p.vs.r;
  for (int e = tid; e < kQRows * D; e += kT) {
    const int64_t i = m0 + e / D;
    sQ[e] = i < c.seq.lq ? load_any(p.q, qb + i * p.qs.r + e % D, p.dtype) : 0.f;
  }
  for (int e = tid; e < kQRows * Dv; e += kT) {
    const int64_t i = m0 + e / Dv;
    sdO[e] = i < c.seq.lq ? load_any(p.dout, dob + i * p.dos.r + e % Dv, p.dtype) : 0.f;
  }
  float lse2[4], dsum[4], acc[4][kMaxDPerLane];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = m0 + warp * 4 + r;
    lse2[r] = INFINITY;
    dsum[r] = 0.f;
    if (i < c.seq.lq) {
      lse2[r] = lse2_of(p.lse[c.seq.bidx * p.lses.b + h * p.lses.h + (c.seq.q_row0 + i) * p.lses.r]);
      dsum[r] = p.dsum[(c.seq.bidx * p.Hq + h) * p.Lq_rows + c.seq.q_row0 + i];
    }
#pragma unroll
    for (int k = 0; k < kMaxDPerLane; ++k) acc[r][k] = 0.f;
  }

  int64_t j0, j1;
  fa__band_cols(&c.bd, m0, m0 + kQRows, &j0, &j1);
  for (int64_t n0 = j0 - (j0 % kKeys); n0 < j1; n0 += kKeys) {
    __syncthreads();
    for (int e = tid; e < kKeys * D; e += kT) {
      const int r = e / D, d = e % D;
      const int64_t j = n0 + r;
      sK[r * (D + 1) + d] = j < c.seq.lk ? load_any(p.k, kb + j * p.ks.r + d, p.dtype) : 0.f;
    }
    for (int e = tid; e < kKeys * Dv; e += kT) {
      const int r = e / Dv, d = e % Dv;
      const int64_t j = n0 + r;
      sV[r * (Dv + 1) + d] = j < c.seq.lk ? load_any(p.v, vb + j * p.vs.r + d, p.dtype) : 0.f;
    }
    __syncthreads();
    const int64_t j = n0 + lane;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int rl = warp * 4 + r;
      float qk = 0.f, dov = 0.f;
      for (int d = 0; d < D; ++d) qk = fmaf(sQ[rl * D + d], sK[lane * (D + 1) + d], qk);
      for (int d = 0; d < Dv; ++d) dov = fmaf(sdO[rl * Dv + d], sV[lane * (Dv + 1) + d], dov);
      const elem_grad g = grad_of(p, c, qk, dov, lse2[r], dsum[r], m0 + rl, j);
      for (int jj = 0; jj < kKeys; ++jj) {
        const float w = __shfl_sync(0xffffffffu, g.dsd, jj);
#pragma unroll
        for (int k = 0; k < kMaxDPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < D) acc[r][k] = fmaf(w, sK[jj * (D + 1) + d], acc[r][k]);
        }
      }
    }
  }
  const int64_t dqb = c.seq.bidx * p.dqs.b + h * p.dqs.h + c.seq.q_row0 * p.dqs.r;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = m0 + warp * 4 + r;
    if (i >= rows) continue;
#pragma unroll
    for (int k = 0; k < kMaxDPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) store_any(p.dq, dqb + i * p.dqs.r + d, p.dtype, acc[r][k] * p.scale);
    }
  }
}

constexpr int kKRows = 16, kQTile = 32;  // dkdv kernel tile

__global__ void __launch_bounds__(kT) generic_dkdv_kernel(const fa__cuda_params p) {
  extern __shared__ float gsm[];
  const int D = p.D, Dv = p.Dv;
  float *sK = gsm;                      // [16][D]
  float *sV = sK + kKRows * D;          // [16][Dv]
  float *sQ = sV + kKRows * Dv;         // [32][D + 1]
  float *sdO = sQ + kQTile * (D + 1);   // [32][Dv + 1]
  float *sL = sdO + kQTile * (Dv + 1);  // [32] lse2
  float *sS = sL + kQTile;              // [32] dsum

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t bkv = blockIdx.x, b = bkv / p.Hkv, kvh = bkv % p.Hkv;
  const fa__seq seq = fa__seq_get(b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
  const int64_t rows = p.varlen ? seq.lk : p.Lk;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kKRows;
  if (n0 >= rows) return;

  const int64_t kb = seq.bidx * p.ks.b + kvh * p.ks.h + seq.k_row0 * p.ks.r;
  const int64_t vb = seq.bidx * p.vs.b + kvh * p.vs.h + seq.k_row0 * p.vs.r;
  for (int e = tid; e < kKRows * D; e += kT) {
    const int64_t j = n0 + e / D;
    sK[e] = j < seq.lk ? load_any(p.k, kb + j * p.ks.r + e % D, p.dtype) : 0.f;
  }
  for (int e = tid; e < kKRows * Dv; e += kT) {
    const int64_t j = n0 + e / Dv;
    sV[e] = j < seq.lk ? load_any(p.v, vb + j * p.vs.r + e % Dv, p.dtype) : 0.f;
  }
  float dk[4][kMaxDPerLane], dv[4][kMaxDPerLane];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int k = 0; k < kMaxDPerLane; ++k) dk[r][k] = dv[r][k] = 0.f;

  for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h) {
    const seq_ctx c = make_seq_ctx(p, b, h);
    const int64_t qb = seq.bidx * p.qs.b + h * p.qs.h + seq.q_row0 * p.qs.r;
    const int64_t dob = seq.bidx * p.dos.b + h * p.dos.h + seq.q_row0 * p.dos.r;
    int64_t i0, i1;
    fa__band_rows(&c.bd, n0, n0 + kKRows, &i0, &i1);
    for (int64_t m0 = i0 - (i0 % kQTile); m0 < i1; m0 += kQTile) {
      __syncthreads();
      for (int e = tid; e < kQTile * D; e += kT) {
        const int r = e / D, d = e % D;
        const int64_t i = m0 + r;
        sQ[r * (D + 1) + d] = i < seq.lq ? load_any(p.q, qb + i * p.qs.r + d, p.dtype) : 0.f;
      }
      for (int e = tid; e < kQTile * Dv; e += kT) {
        const int r = e / Dv, d = e % Dv;
        const int64_t i = m0 + r;
        sdO[r * (Dv + 1) + d] = i < seq.lq ? load_any(p.dout, dob + i * p.dos.r + d, p.dtype) : 0.f;
      }
      if (tid < kQTile) {
        const int64_t i = m0 + tid;
        sL[tid] = INFINITY;
        sS[tid] = 0.f;
        if (i < seq.lq) {
          sL[tid] = lse2_of(p.lse[seq.bidx * p.lses.b + h * p.lses.h + (seq.q_row0 + i) * p.lses.r]);
          sS[tid] = p.dsum[(seq.bidx * p.Hq + h) * p.Lq_rows + seq.q_row0 + i];
        }
      }
      __syncthreads();
      const int64_t i = m0 + lane;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int rl = warp * 4 + r;
        float qk = 0.f, dov = 0.f;
        for (int d = 0; d < D; ++d) qk = fmaf(sQ[lane * (D + 1) + d], sK[rl * D + d], qk);
        for (int d = 0; d < Dv; ++d) dov = fmaf(sdO[lane * (Dv + 1) + d], sV[rl * Dv + d], dov);
        const elem_grad g = grad_of(p, c, qk, dov, sL[lane], sS[lane], i, n0 + rl);
        for (int ii = 0; ii < kQTile; ++ii) {
          const float wv = __shfl_sync(0xffffffffu, g.p_drop, ii);
          const float wk = __shfl_sync(0xffffffffu, g.dsd, ii);
#pragma unroll
          for (int k = 0; k < kMaxDPerLane; ++k) {
            const int d = lane + 32 * k;
            if (d < Dv) dv[r][k] = fmaf(wv, sdO[ii * (Dv + 1) + d], dv[r][k]);
            if (d < D) dk[r][k] = fmaf(wk, sQ[ii * (D + 1) + d], dk[r][k]);
          }
        }
      }
    }
  }
  const int64_t dkb = seq.bidx * p.dks.b + kvh * p.dks.h + seq.k_row0 * p.dks.r;
  const int64_t dvb = seq.bidx * p.dvs.b + kvh * p.dvs.h + seq.k_row0 * p.dvs.r;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t j = n0 + warp * 4 + r;
    if (j >= rows) continue;
#pragma unroll
    for (int k = 0; k < kMaxDPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) store_any(p.dk, dkb + j * p.dks.r + d, p.dtype, dk[r][k] * p.scale);
      if (d < Dv) store_any(p.dv, dvb + j * p.dvs.r + d, p.dtype, dv[r][k]);
    }
  }
}

// One thread per dBias element; it walks the dims the bias broadcasts over
// (b, h, i, j in that order) and recomputes dS for each from global memory.
// Slow for big summed ranges, but exact, deterministic and memory-free.
struct dbias_desc {
  void *ptr;
  int dtype;
  int64_t shape[4], stride[4];
};

__global__ void __launch_bounds__(kT) dbias_kernel(const fa__cuda_params p, const dbias_desc db) {
  const int64_t n = db.shape[0] * db.shape[1] * db.shape[2] * db.shape[3];
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kT + threadIdx.x;
  if (e >= n) return;
  int64_t idx[4], rem = e;
  for (int d = 3; d >= 0; --d) {
    idx[d] = rem % db.shape[d];
    rem /= db.shape[d];
  }
  const int64_t logical[4] = {p.B, p.Hq, p.Lq, p.Lk};
  int64_t lo[4], hi[4];
  for (int d = 0; d < 4; ++d) {
    const bool summed = db.shape[d] == 1 && logical[d] > 1;
    lo[d] = summed ? 0 : idx[d];
    hi[d] = summed ? logical[d] : idx[d] + 1;
  }
  float total = 0.f;
  for (int64_t b = lo[0]; b < hi[0]; ++b) {
    const fa__seq seq = fa__seq_get(b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
    for (int64_t h = lo[1]; h < hi[1]; ++h) {
      const seq_ctx c = make_seq_ctx(p, b, h);
      const int64_t kvh = h / p.group;
      for (int64_t i = lo[2]; i < hi[2] && i < seq.lq; ++i) {
        const int64_t qrow = seq.q_row0 + i;
        const float lse2 = lse2_of(p.lse[seq.bidx * p.lses.b + h * p.lses.h + qrow * p.lses.r]);
        const float dsum = p.dsum[(seq.bidx * p.Hq + h) * p.Lq_rows + qrow];
        const int64_t qb = seq.bidx * p.qs.b + h * p.qs.h + qrow * p.qs.r;
        const int64_t dob = seq.bidx * p.dos.b + h * p.dos.h + qrow * p.dos.r;
        for (int64_t j = lo[3]; j < hi[3] && j < seq.lk; ++j) {
          if (!fa__band_visible(&c.bd, i, j)) continue;
          const int64_t krow = seq.k_row0 + j;
          const int64_t kb = seq.bidx * p.ks.b + kvh * p.ks.h + krow * p.ks.r;
          const int64_t vb = seq.bidx * p.vs.b + kvh * p.vs.h + krow * p.vs.r;
          float qk = 0.f, dov = 0.f;
          for (int d = 0; d < p.D; ++d) qk = fmaf(load_any(p.q, qb + d, p.dtype), load_any(p.k, kb + d, p.dtype), qk);
          for (int d = 0; d < p.Dv; ++d)
            dov = fmaf(load_any(p.dout, dob + d, p.dtype), load_any(p.v, vb + d, p.dtype), dov);
          total += grad_of(p, c, qk, dov, lse2, dsum, i, j).ds;
        }
      }
    }
  }
  int64_t off = 0;
  for (int d = 0; d < 4; ++d) off += idx[d] * db.stride[d];
  store_any(db.ptr, off, db.dtype, total);
}

}  // namespace
}  // namespace fa_cuda

using namespace fa_cuda;

fa_status fa__cuda_generic_bwd(const fa__cuda_params &p, cudaStream_t s, fa__err *err) {
  {
    const size_t smem = sizeof(float) * (kQRows * p.D + kQRows * p.Dv + kKeys * (p.D + 1) + kKeys * (p.Dv + 1));
    FA_CUDA_TRY(fa__cuda_smem_optin(generic_dq_kernel, smem), "generic dq: shared memory limit");
    FA_CUDA_ROWS_GRID(grid, p.B * p.Hq, p.Lq, kQRows, "generic dQ");
    generic_dq_kernel<<<grid, kT, smem, s>>>(p);
    FA_CUDA_CHECK_LAUNCH("generic dq kernel launch");
  }
  {
    const size_t smem =
        sizeof(float) * (kKRows * p.D + kKRows * p.Dv + kQTile * (p.D + 1) + kQTile * (p.Dv + 1) + 2 * kQTile);
    FA_CUDA_TRY(fa__cuda_smem_optin(generic_dkdv_kernel, smem), "generic dkdv: shared memory limit");
    FA_CUDA_ROWS_GRID(grid, p.B * p.Hkv, p.Lk, kKRows, "generic dK/dV");
    generic_dkdv_kernel<<<grid, kT, smem, s>>>(p);
    FA_CUDA_CHECK_LAUNCH("generic dkdv kernel launch");
  }
  return FA_OK;
}

fa_status fa__cuda_dbias(const fa__cuda_params &p, void *dbias, int dbias_dtype, const int64_t shape[4],
                         const int64_t stride[4], cudaStream_t s, fa__err *err) {
  dbias_desc db;
  db.ptr = dbias;
  db.dtype = dbias_dtype;
  int64_t n = 1;
  for (int d = 0; d < 4; ++d) {
    db.shape[d] = shape[d];
    db.stride[d] = stride[d];
    n *= shape[d];
  }
  const unsigned blocks = static_cast<unsigned>((n + kT - 1) / kT);
  dbias_kernel<<<blocks, kT, 0, s>>>(p, db);
  FA_CUDA_CHECK_LAUNCH("dbias kernel launch");
  return FA_OK;
}
