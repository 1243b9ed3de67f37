// The backward's per-tile arithmetic, shared by the mma.sync kernel
// (bwd_kernel.cuh) and the sm_90a wgmma kernel (bwd_wgmma_kernel.cuh). Both
// hold S^T and dP^T in the same fragment layout: a thread's keys are rows
// g and g + 8 of its warp's 16 (from key jw on), its queries the columns
// 8 mb + 2t and 2t + 1 of the query tile starting at m0.
#ifndef FA_CUDA_BWD_TILE_CUH
#define FA_CUDA_BWD_TILE_CUH

#include "mma.cuh"
#include "rules.cuh"

namespace fa_cuda {

// lse in log2 units; a row that saw nothing (-inf) becomes +inf so that
// exp2(x - lse2) is 0 there, never NaN.
__device__ __forceinline__ float bwd_lse2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

// The band-only backward (no bias, mask, dropout or softcap) in two steps,
// so that a kernel can start dV += P^T dO before dP^T is there:
// bwd_p_band  st <- P^T = exp2(S^T scale_log2 - lse2), 0 outside the band
// bwd_ds_band dpt <- dS^T = P^T (dP^T - dsum)
// l_s, ds_s: the tile's raw LSE and dsum by query; a thread's query columns
// are 8 mb + 2t and + 1 (one 8-byte load each), its keys jw + g, + 8.
// [lo, hi): the offsets d (of the thread's columns from 2t on, in a tile
// at x0) of the columns that are visible, given the visible interval
// [v0, v1) of the absolute columns; clamped to [0, n] so that the per-element
// test is two 32-bit comparisons against a compile-time offset.
__device__ __forceinline__ void band_offsets(int64_t v0, int64_t v1, int64_t x0, int n, int *lo, int *hi) {
  const int64_t a = v0 - x0, b = v1 - x0;
  *lo = static_cast<int>(a < 0 ? 0 : a > n ? n : a);
  *hi = static_cast<int>(b < 0 ? 0 : b > n ? n : b);
}

template <bool kMasked, int kMB>
__device__ __forceinline__ void bwd_p_band_el(float (&st)[kMB][4], const float (&nl)[kMB][2], float scale_log2,
                                              const int (&lo)[2], const int (&hi)[2]) {
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = e & 1, r = e >> 1, d = mb * 8 + c;
      float pr = fast_exp2(fmaf(st[mb][e], scale_log2, nl[mb][c]));
      if (kMasked && (d < lo[r] || d >= hi[r])) pr = 0.f;
      st[mb][e] = pr;
    }
}

template <int kMB>
__device__ __forceinline__ void bwd_p_band(const fa__band &bd, float (&st)[kMB][4], const float *l_s, float scale_log2,
                                           int64_t m0, int64_t jw, int g, int t) {
  float nl[kMB][2];  // -lse2 of the thread's query columns
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb) {
    const float2 l = *reinterpret_cast<const float2 *>(l_s + mb * 8 + 2 * t);
    nl[mb][0] = -bwd_lse2(l.x);
    nl[mb][1] = -bwd_lse2(l.y);
  }
  // one test for the warp's 16 keys x 8 kMB queries: tiles inside the band
  // run without a comparison per element; the others compare each query
  // with the rows that see the thread's key (fa__band_rows of that key)
  int lo[2] = {0, 0}, hi[2] = {0, 0};
  if (fa__band_tile_full(&bd, m0, m0 + 8 * kMB, jw, jw + 16)) {
    bwd_p_band_el<false>(st, nl, scale_log2, lo, hi);
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t i0, i1;
      fa__band_rows(&bd, jw + g + 8 * r, jw + g + 8 * r + 1, &i0, &i1);
      band_offsets(i0, i1, m0 + 2 * t, 8 * kMB, &lo[r], &hi[r]);
    }
    bwd_p_band_el<true>(st, nl, scale_log2, lo, hi);
  }
}

template <int kMB>
__device__ __forceinline__ void bwd_ds_band(const float (&st)[kMB][4], float (&dpt)[kMB][4], const float *ds_s, int t) {
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb) {
    const float2 d = *reinterpret_cast<const float2 *>(ds_s + mb * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) dpt[mb][e] = st[mb][e] * (dpt[mb][e] - ((e & 1) ? d.y : d.x));
  }
}

// st <- P^T (dropped and rescaled), dpt <- dS^T (times the softcap
// derivative): the A operands of dV += P^T dO and dK += dS^T Q. l_s, ds_s:
// the tile's raw LSE and dsum, indexed by query within the tile.
// kFull: every element through score_full and dropout; otherwise the band
// only, tested per element unless the warp's 16 keys x kMB * 8 queries lie
// inside it.
template <bool kFull, int kMB>
__device__ __forceinline__ void bwd_p_ds(const fa__cuda_params &p, const fa__band &bd, int64_t b, int64_t h,
                                         float (&st)[kMB][4], float (&dpt)[kMB][4], const float *l_s, const float *ds_s,
                                         int64_t m0, int64_t jw, int g, int t) {
  const int64_t j0 = jw + g;
  if (kFull) {
    const seq_ctx c = make_seq_ctx(p, b, h);
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = mb * 8 + 2 * t + (e & 1);
        const int64_t i = m0 + il, j = j0 + (e >> 1) * 8;
        float capped;
        const float x = score_full(p, c, st[mb][e], i, j, &capped);
        float pr = 0.f, ds = 0.f;
        if (x != -INFINITY) {
          pr = fast_exp2(x - bwd_lse2(l_s[il]));
          float dp = dpt[mb][e];
          if (p.has_dropout) {
            const bool keep = keep_one(p, c, i, j);
            dp = keep ? dp * p.dscale : 0.f;
            ds = pr * (dp - ds_s[il]);
            pr = keep ? pr * p.dscale : 0.f;
          } else {
            ds = pr * (dp - ds_s[il]);
          }
          ds *= fa__softcap_grad_f(capped, p.softcap);
        }
        st[mb][e] = pr;
        dpt[mb][e] = ds;
      }
  } else {
    bwd_p_band(bd, st, l_s, p.scale_log2, m0, jw, g, t);
    bwd_ds_band(st, dpt, ds_s, t);
  }
}

// LSE (as bwd_lse2) and dsum of query rows i0 and i0 + 8 of head h; rows
// past the sequence get +inf and 0 (P = 0 there).
__device__ __forceinline__ void bwd_row_stats(const fa__cuda_params &p, const seq_ctx &c, int64_t h, int64_t i0,
                                              float (&lse2)[2], float (&dsum)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + r * 8;
    lse2[r] = INFINITY;
    dsum[r] = 0.f;
    if (i < c.seq.lq) {
      lse2[r] = bwd_lse2(p.lse[c.seq.bidx * p.lses.b + h * p.lses.h + (c.seq.q_row0 + i) * p.lses.r]);
      dsum[r] = p.dsum[(c.seq.bidx * p.Hq + h) * p.Lq_rows + c.seq.q_row0 + i];
    }
  }
}

// The band-only case of bwd_ds_rows (kMasked: the band tested per
// element); nl = -lse2 of rows i0, i0 + 8.
template <bool kMasked, int kNB>
__device__ __forceinline__ void bwd_ds_rows_band(float (&s)[kNB][4], const float (&dp)[kNB][4], const float (&nl)[2],
                                                 const float (&dsum)[2], float scale_log2, const int (&lo)[2],
                                                 const int (&hi)[2]) {
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1, d = nb * 8 + (e & 1);
      float pr = fast_exp2(fmaf(s[nb][e], scale_log2, nl[r]));
      if (kMasked && (d < lo[r] || d >= hi[r])) pr = 0.f;
      s[nb][e] = pr * (dp[nb][e] - dsum[r]);
    }
}

// The same for the dQ kernels, which hold S and dP the other way round: a
// thread's queries are rows i0 and i0 + 8 (i0 = r0 + g, r0 the warp's first
// row), its keys the columns 8 nb + 2t and 2t + 1 of the key tile at n0.
// s <- dS = P * (dP - Dsum) (times the softcap derivative; dP dropped and
// rescaled). lse2, dsum: rows i0 and i0 + 8 (bwd_lse2 applied).
template <bool kFull, int kNB>
__device__ __forceinline__ void bwd_ds_rows(const fa__cuda_params &p, const seq_ctx &c, float (&s)[kNB][4],
                                            const float (&dp)[kNB][4], const float (&lse2)[2], const float (&dsum)[2],
                                            int64_t r0, int64_t n0, int g, int t) {
  const int64_t i0 = r0 + g;
  if (kFull) {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = i0 + r * 8, j = n0 + nb * 8 + 2 * t;
        bool keep[2] = {true, true};
        if (p.has_dropout) keep_pair(p, c, i, j, &keep[0], &keep[1]);
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          float capped;
          const float sx = score_full(p, c, s[nb][2 * r + x], i, j + x, &capped);
          float ds = 0.f;
          if (sx != -INFINITY) {
            const float pr = fast_exp2(sx - lse2[r]);
            float dpv = dp[nb][2 * r + x];
            if (p.has_dropout) dpv = keep[x] ? dpv * p.dscale : 0.f;
            ds = pr * (dpv - dsum[r]) * fa__softcap_grad_f(capped, p.softcap);
          }
          s[nb][2 * r + x] = ds;
        }
      }
  } else {
    const float nl[2] = {-lse2[0], -lse2[1]};
    // the band per element only where it cuts the warp's 16 rows x 8 kNB
    // keys, as the key interval each of the thread's two rows sees
    int lo[2] = {0, 0}, hi[2] = {0, 0};
    if (fa__band_tile_full(&c.bd, r0, r0 + 16, n0, n0 + 8 * kNB)) {
      bwd_ds_rows_band<false>(s, dp, nl, dsum, p.scale_log2, lo, hi);
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        int64_t j0, j1;
        fa__band_cols(&c.bd, i0 + 8 * r, i0 + 8 * r + 1, &j0, &j1);
        band_offsets(j0, j1, n0 + 2 * t, 8 * kNB, &lo[r], &hi[r]);
      }
      bwd_ds_rows_band<true>(s, dp, nl, dsum, p.scale_log2, lo, hi);
    }
  }
}

// Two 8-column blocks of f32 accumulators (C layout) as one A fragment.
template <typename E>
__device__ __forceinline__ void c_to_a_frag(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = E::pack(lo[0], lo[1]);
  a[1] = E::pack(lo[2], lo[3]);
  a[2] = E::pack(hi[0], hi[1]);
  a[3] = E::pack(hi[2], hi[3]);
}

}  // namespace fa_cuda

#endif
