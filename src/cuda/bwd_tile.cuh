// The backward's per-tile arithmetic, shared by the mma.sync kernel
// (bwd_kernel.cuh) and the sm_90a wgmma kernel (bwd_wgmma_kernel.cuh). Both
// hold S^T and dP^T in the same fragment layout: a thread's keys are rows
// g and g + 8 of its warp's 16 (from key jw on), its queries the columns
// 8 mb + 2t and 2t + 1 of the query tile starting at m0.
#ifndef FA_CUDA_BWD_TILE_CUH
#define FA_CUDA_BWD_TILE_CUH

#include "dropout_tile.cuh"
#include "grid_order.cuh"
#include "mma.cuh"
#include "rules.cuh"
#include "score_arith.cuh"
#include "score_tile.cuh"

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
template <bool kMasked, int kMB>
__device__ __forceinline__ void bwd_p_band_el(float (&st)[kMB][4], const float *l_s, float scale_log2,
                                              const int (&lo)[2], const int (&hi)[2], int t) {
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb) {
    // -lse2 of the thread's two query columns, read where used: held for
    // the whole tile they would cost 2 kMB registers
    const float2 l = *reinterpret_cast<const float2 *>(l_s + mb * 8 + 2 * t);
    const float nl[2] = {-bwd_lse2(l.x), -bwd_lse2(l.y)};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = e & 1, r = e >> 1, d = mb * 8 + c;
      float pr = fast_exp2(fmaf(st[mb][e], scale_log2, nl[c]));
      if (kMasked && (d < lo[r] || d >= hi[r])) pr = 0.f;
      st[mb][e] = pr;
    }
  }
}

template <int kMB>
__device__ __forceinline__ void bwd_p_band(const fa__band &bd, float (&st)[kMB][4], const float *l_s, float scale_log2,
                                           int64_t m0, int64_t jw, int g, int t) {
  // one test for the warp's 16 keys x 8 kMB queries: tiles inside the band
  // run without a comparison per element; the others compare each query
  // with the rows that see the thread's key (fa__band_rows of that key)
  int lo[2] = {0, 0}, hi[2] = {0, 0};
  if (fa__band_tile_full(&bd, m0, m0 + 8 * kMB, jw, jw + 16)) {
    bwd_p_band_el<false>(st, l_s, scale_log2, lo, hi, t);
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t i0, i1;
      fa__band_rows(&bd, jw + g + 8 * r, jw + g + 8 * r + 1, &i0, &i1);
      band_offsets(i0, i1, m0 + 2 * t, 8 * kMB, &lo[r], &hi[r]);
    }
    bwd_p_band_el<true>(st, l_s, scale_log2, lo, hi, t);
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

// The element (i, j) of S^T a thread holds as element k = 4 mb + e of
// bwd_p_ds's layout, for bias_tile (rules.cuh).
struct bwd_coords {
  int64_t m0, j0;
  int t;
  __device__ __forceinline__ int64_t row(int k) const { return m0 + (k >> 2) * 8 + 2 * t + (k & 1); }
  __device__ __forceinline__ int64_t col(int k) const { return j0 + ((k >> 1) & 1) * 8; }
};

// st <- P^T (dropped and rescaled), dpt <- dS^T (times the softcap
// derivative): the A operands of dV += P^T dO and dK += dS^T Q. l_s, ds_s:
// the tile's raw LSE and dsum, indexed by query within the tile.
// kFull: every element through score_full and dropout; otherwise the band
// only, tested per element unless the warp's 16 keys x kMB * 8 queries lie
// inside it. kStageBias (kFull): the thread's bias elements read first
// (bias_tile) instead of one by one; for the kernel where that pays in
// build time without costing registers (the D = 64 Hopper backward: its
// mma.sync counterpart spilled 180 more bytes with it).
template <bool kFull, bool kStageBias = false, int kMB>
__device__ __forceinline__ void bwd_p_ds(const fa__cuda_params &p, const fa__band &bd, int64_t b, int64_t h,
                                         float (&st)[kMB][4], float (&dpt)[kMB][4], const float *l_s, const float *ds_s,
                                         int64_t m0, int64_t jw, int g, int t) {
  const int64_t j0 = jw + g;
  if (kFull) {
    const seq_ctx c = make_seq_ctx(p, b, h);
    float bias[kStageBias ? kMB * 4 : 1];
    if constexpr (kStageBias)
      if (p.bias) bias_tile(p, c, bwd_coords{m0, j0, t}, bias);
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = mb * 8 + 2 * t + (e & 1);
        const int64_t i = m0 + il, j = j0 + (e >> 1) * 8;
        float capped;
        const float x = score_full_at<kStageBias>(p, c, st[mb][e], i, j, kStageBias ? bias[mb * 4 + e] : 0.f, &capped);
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

// bwd_p_ds with the arithmetic options (softcap, ALiBi: score_arith.cuh):
// st <- P^T, dpt <- dS^T times the softcap's derivative 1 - t^2. As
// bwd_p_band: the band tested per element only where it cuts the warp's 16
// keys x 8 kMB queries, as the query interval that sees each of the
// thread's two keys; the ALiBi distance diag(i) - j a key's float plus the
// query's offset; a bias or mask (x) read from the query tile's shared tile.
template <bool kCap, bool kMasked, int kMB, typename X, typename Drop>
__device__ __forceinline__ void bwd_p_ds_arith_el(const fa__band &bd, const arith_score &a, float (&st)[kMB][4],
                                                  float (&dpt)[kMB][4], const float *l_s, const float *ds_s, int64_t m0,
                                                  int64_t jw, int g, int t, const X &x, int xcol, const Drop &dr) {
  int lo[2] = {0, 0}, hi[2] = {8 * kMB, 8 * kMB};
  float diag[2];
  decltype(x.col(0, 0)) xc[2][2];  // [key r][query c]: the tile's column xcol + g + 8 r at rows 2 t + c + 8 mb
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c) xc[r][c] = x.col(2 * t + c, xcol + g + 8 * r);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = jw + g + 8 * r;
    if (kMasked) {
      int64_t i0, i1;
      fa__band_rows(&bd, j, j + 1, &i0, &i1);
      band_offsets(i0, i1, m0 + 2 * t, 8 * kMB, &lo[r], &hi[r]);
    }
    diag[r] = static_cast<float>(fa__band_diag(&bd, m0 + 2 * t) - j);  // at the thread's query 0
  }
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb) {
    const float2 l = *reinterpret_cast<const float2 *>(l_s + mb * 8 + 2 * t);
    const float2 d = *reinterpret_cast<const float2 *>(ds_s + mb * 8 + 2 * t);
    const float nl[2] = {-bwd_lse2(l.x), -bwd_lse2(l.y)}, dsum[2] = {d.x, d.y};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = e & 1, r = e >> 1, q = mb * 8 + c;
      float tc = 0.f;
      const float sx = a.at<kCap>(st[mb][e], diag[r] + static_cast<float>(q), &tc) + x.term(xc[r][c], mb);
      float pr = fast_exp2(sx + nl[c]);
      if (kMasked && (q < lo[r] || q >= hi[r])) pr = 0.f;
      float dp = dpt[mb][e];
      if constexpr (Drop::kOn) dp = dr.at(mb, e) ? dp * dr.dscale : 0.f;
      float ds = pr * (dp - dsum[c]);
      if (kCap) ds *= fmaf(-tc, tc, 1.f);
      if constexpr (Drop::kOn) pr = dr.at(mb, e) ? pr * dr.dscale : 0.f;
      st[mb][e] = pr;
      dpt[mb][e] = ds;
    }
  }
}

// x: score_tile.cuh's bias or mask tile of the query tile (xcol: the tile's
// column of key jw), or score_global.cuh's reader made at (m0, jw) (xcol 0),
// no_score_tile without. dr: dropout_tile.cuh's keep bits of the fragment
// (dP and P^T dropped and scaled as bwd_p_ds does), no_drop without.
template <bool kCap, int kMB, typename X = no_score_tile, typename Drop = no_drop>
__device__ __forceinline__ void bwd_p_ds_arith(const fa__band &bd, const arith_score &a, float (&st)[kMB][4],
                                               float (&dpt)[kMB][4], const float *l_s, const float *ds_s, int64_t m0,
                                               int64_t jw, int g, int t, const X &x = X{}, int xcol = 0,
                                               const Drop &dr = Drop{}) {
  if (fa__band_tile_full(&bd, m0, m0 + 8 * kMB, jw, jw + 16))
    bwd_p_ds_arith_el<kCap, false>(bd, a, st, dpt, l_s, ds_s, m0, jw, g, t, x, xcol, dr);
  else
    bwd_p_ds_arith_el<kCap, true>(bd, a, st, dpt, l_s, ds_s, m0, jw, g, t, x, xcol, dr);
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

// bwd_ds_rows with the arithmetic options (softcap, ALiBi: score_arith.cuh;
// p.arith_only), as bwd_p_ds_arith_el makes them in the transposed walk:
// the band tested per element only where it cuts the warp's 16 rows x 8 kNB
// keys; the ALiBi distance diag(i) - j a row's float minus the key's offset
// in the tile (exact: backend.cu keeps such a call's distances under 2^24);
// a bias or mask (x: rows g, g + 8 of the warp's tile) added after them.
// kRaw: dS without the softcap's derivative (dBias: the bias is added after
// the softcap).
template <bool kCap, bool kMasked, bool kRaw, int kNB, typename X, typename Drop>
__device__ __forceinline__ void bwd_ds_rows_arith_el(const fa__band &bd, const arith_score &a, float (&s)[kNB][4],
                                                     const float (&dp)[kNB][4], const float (&lse2)[2],
                                                     const float (&dsum)[2], int64_t r0, int64_t n0, int g, int t,
                                                     const X &x, const Drop &dr) {
  int lo[2] = {0, 0}, hi[2] = {8 * kNB, 8 * kNB};
  float diag[2];
  decltype(x.row(0, 0)) xr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = r0 + g + 8 * r;
    if (kMasked) {
      int64_t j0, j1;
      fa__band_cols(&bd, i, i + 1, &j0, &j1);
      band_offsets(j0, j1, n0 + 2 * t, 8 * kNB, &lo[r], &hi[r]);
    }
    diag[r] = static_cast<float>(fa__band_diag(&bd, i) - (n0 + 2 * t));  // at the thread's key 0
    xr[r] = x.row(g + 8 * r, t);
  }
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tc[2] = {0.f, 0.f}, sx[2];
#pragma unroll
      for (int c = 0; c < 2; ++c)
        sx[c] = a.at<kCap>(s[nb][2 * r + c], diag[r] - static_cast<float>(nb * 8 + c), &tc[c]);
      x.apply(xr[r], nb, sx[0], sx[1]);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = nb * 8 + c;
        float pr = fast_exp2(sx[c] - lse2[r]);
        if (kMasked && (d < lo[r] || d >= hi[r])) pr = 0.f;
        float dpv = dp[nb][2 * r + c];
        if constexpr (Drop::kOn) dpv = dr.at(nb, 2 * r + c) ? dpv * dr.dscale : 0.f;
        float ds = pr * (dpv - dsum[r]);
        if (kCap && !kRaw) ds *= fmaf(-tc[c], tc[c], 1.f);
        s[nb][2 * r + c] = ds;
      }
    }
}

// x: a bias or mask reader at the warp's tile (row r0, key n0; score_global.cuh),
// no_score_tile without. dr: dropout_tile.cuh's keep bits of the fragment
// (rows_keep: dP dropped and scaled as bwd_ds_rows does), no_drop without.
template <bool kRaw = false, int kNB, typename X = no_score_tile, typename Drop = no_drop>
__device__ __forceinline__ void bwd_ds_rows_arith(const fa__cuda_params &p, const fa__band &bd, const arith_score &a,
                                                  float (&s)[kNB][4], const float (&dp)[kNB][4], const float (&lse2)[2],
                                                  const float (&dsum)[2], int64_t r0, int64_t n0, int g, int t,
                                                  const X &x = X{}, const Drop &dr = Drop{}) {
  const bool full = fa__band_tile_full(&bd, r0, r0 + 16, n0, n0 + 8 * kNB);
  if (p.softcap > 0.f) {
    if (full)
      bwd_ds_rows_arith_el<true, false, kRaw>(bd, a, s, dp, lse2, dsum, r0, n0, g, t, x, dr);
    else
      bwd_ds_rows_arith_el<true, true, kRaw>(bd, a, s, dp, lse2, dsum, r0, n0, g, t, x, dr);
  } else {
    if (full)
      bwd_ds_rows_arith_el<false, false, kRaw>(bd, a, s, dp, lse2, dsum, r0, n0, g, t, x, dr);
    else
      bwd_ds_rows_arith_el<false, true, kRaw>(bd, a, s, dp, lse2, dsum, r0, n0, g, t, x, dr);
  }
}

// A dK/dV block's bookkeeping, shared by the mma.sync and wgmma kernels:
// the block is (sequence, kv head) and its tile of kBN keys from
// n0; it walks `total` query tiles of kBM rows, n_mt per query head of the
// group (only those the band lets see its keys).
struct bwd_block {
  fa__seq seq;
  fa__band bd;
  int64_t b, kvh, n0, rows_k;
  int mb_lo, n_mt, total, k_valid;
};

// false: the block's keys lie past the sequence (nothing to do). bkv: the
// (sequence, kv head), kt: the tile of keys.
template <int kBN, int kBM>
__device__ __forceinline__ bool bwd_block_init(const fa__cuda_params &p, bwd_block *k, int64_t bkv, int64_t kt) {
  k->b = bkv / p.Hkv;
  k->kvh = bkv % p.Hkv;
  k->seq = fa__seq_get(k->b, p.Lq, p.Lk, p.seqlens_q, p.seqlens_k, p.cu_q, p.cu_k);
  k->bd = fa__seq_band_at(&k->seq, p.wl, p.wr, p.bottom_right, p.q_off - p.k_off);
  k->rows_k = p.varlen ? k->seq.lk : p.Lk;
  k->n0 = kt * kBN;
  if (k->n0 >= k->rows_k) return false;
  int64_t i0, i1;
  fa__band_rows(&k->bd, k->n0, k->n0 + kBN, &i0, &i1);
  k->mb_lo = static_cast<int>(i0 / kBM);
  k->n_mt = i1 > i0 ? static_cast<int>((i1 + kBM - 1) / kBM) - k->mb_lo : 0;
  k->total = k->n_mt * static_cast<int>(p.group);
  k->k_valid = static_cast<int>(k->seq.lk - k->n0 < kBN ? k->seq.lk - k->n0 : kBN);
  return true;
}

// The same for this CUDA block of a grid dim3(B * Hkv, key tiles), tile-major
// (grid_order.cuh).
template <int kBN, int kBM>
__device__ __forceinline__ bool bwd_block_init(const fa__cuda_params &p, bwd_block *k) {
  int64_t bkv, kt;
  tile_major_block(&bkv, &kt);
  return bwd_block_init<kBN, kBM>(p, k, bkv, kt);
}

// Query head and first row of the block's query tile it: head by head, each
// head's tiles first to last; or with kHeadsInner (the deterministic
// backward's order, bwd_ws_kernel.cuh) tile by tile, the group's heads
// innermost, so that the key tiles of a (sequence, kv head) reach a
// (head, tile) in the order of their bands' first rows.
template <int kBM, bool kHeadsInner = false>
__device__ __forceinline__ void bwd_block_tile(const fa__cuda_params &p, const bwd_block &k, int it, int64_t *h,
                                               int64_t *m0) {
  if constexpr (kHeadsInner) {
    *h = k.kvh * p.group + it % p.group;
    *m0 = static_cast<int64_t>(k.mb_lo + it / p.group) * kBM;
  } else {
    *h = k.kvh * p.group + it / k.n_mt;
    *m0 = static_cast<int64_t>(k.mb_lo + it % k.n_mt) * kBM;
  }
}

// The block's K and V tiles into shared memory (cp.async, not committed).
template <int kBN, int kD, int kThreads, bool kAtoms, typename T>
__device__ __forceinline__ void bwd_load_kv(const fa__cuda_params &p, const bwd_block &k, T *sK, T *sV, int tid) {
  const fa__seq &seq = k.seq;
  const T *gk = static_cast<const T *>(p.k) + seq.bidx * p.ks.b + k.kvh * p.ks.h + (seq.k_row0 + k.n0) * p.ks.r;
  const T *gv = static_cast<const T *>(p.v) + seq.bidx * p.vs.b + k.kvh * p.vs.h + (seq.k_row0 + k.n0) * p.vs.r;
  load_tile<kBN, kD, kThreads, kAtoms>(sK, gk, p.ks.r, k.k_valid, p.D, p.k, tid);
  load_tile<kBN, kD, kThreads, kAtoms>(sV, gv, p.vs.r, k.k_valid, p.Dv, p.v, tid);
}

// Query tile it: Q and dO rows into sQ, sdO, their raw LSE and dsum into
// sL, sDs (rows past the sequence: zeros). LSE and dsum ride the same
// cp.async group: a plain load would stall the issuing warps for a full
// memory round trip every tile.
template <int kBM, int kD, int kThreads, bool kAtoms, typename T>
__device__ __forceinline__ void bwd_load_q(const fa__cuda_params &p, const bwd_block &k, int it, T *sQ, T *sdO,
                                           float *sL, float *sDs, int tid) {
  const fa__seq &seq = k.seq;
  int64_t h, m0;
  bwd_block_tile<kBM>(p, k, it, &h, &m0);
  const int valid = static_cast<int>(seq.lq - m0 < kBM ? seq.lq - m0 : kBM);
  const int64_t row = seq.q_row0 + m0;
  const T *gq = static_cast<const T *>(p.q) + seq.bidx * p.qs.b + h * p.qs.h + row * p.qs.r;
  const T *gdo = static_cast<const T *>(p.dout) + seq.bidx * p.dos.b + h * p.dos.h + row * p.dos.r;
  load_tile<kBM, kD, kThreads, kAtoms>(sQ, gq, p.qs.r, valid, p.D, p.q, tid);
  load_tile<kBM, kD, kThreads, kAtoms>(sdO, gdo, p.dos.r, valid, p.Dv, p.dout, tid);
  for (int x = tid; x < kBM; x += kThreads) {
    const bool ok = x < valid;
    const float *ls = ok ? p.lse + seq.bidx * p.lses.b + h * p.lses.h + (row + x) * p.lses.r : p.lse;
    const float *ds = ok ? p.dsum + (seq.bidx * p.Hq + h) * p.Lq_rows + row + x : p.dsum;
    cp_async4(smem_addr(sL + x), ls, ok ? 4 : 0);
    cp_async4(smem_addr(sDs + x), ds, ok ? 4 : 0);
  }
}

// S^T = K Q^T and dP^T = V dO^T on mma.sync for one warp: its 16 keys from
// row wkey of the swz tiles sK, sV ([keys][kD]) x 8 kMB queries from row q0
// of q_s, do_s ([queries][kD]); two independent mma chains per step, more
// in flight per warp.
template <typename E, int kD, int kMB, typename T>
__device__ __forceinline__ void bwd_mma_st_dpt(float (&st)[kMB][4], float (&dpt)[kMB][4], const T *sK, const T *sV,
                                               const T *q_s, const T *do_s, int wkey, int q0, int lane) {
#pragma unroll
  for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
    for (int e = 0; e < 4; ++e) st[mb][e] = dpt[mb][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t ak[4], av[4];
    lds_a<kD>(ak, sK, wkey, kk * 16, lane);
    lds_a<kD>(av, sV, wkey, kk * 16, lane);
#pragma unroll
    for (int mb2 = 0; mb2 < kMB / 2; ++mb2) {
      uint32_t bq[4], bo[4];
      lds_b_nk<kD>(bq, q_s, q0 + mb2 * 16, kk * 16, lane);
      lds_b_nk<kD>(bo, do_s, q0 + mb2 * 16, kk * 16, lane);
      E::mma(st[2 * mb2], ak, bq[0], bq[1]);
      E::mma(dpt[2 * mb2], av, bo[0], bo[1]);
      E::mma(st[2 * mb2 + 1], ak, bq[2], bq[3]);
      E::mma(dpt[2 * mb2 + 1], av, bo[2], bo[3]);
    }
  }
}

// Query tile it into stage `stage` of a kernel's Q, dO, LSE and dsum rings
// (kBM rows a stage; bwd_load_q, not committed).
template <int kBM, int kD, int kThreads, bool kAtoms, typename T>
__device__ __forceinline__ void bwd_load_q_stage(const fa__cuda_params &p, const bwd_block &k, int it, int stage, T *sQ,
                                                 T *sdO, float *sL, float *sDs, int tid) {
  bwd_load_q<kBM, kD, kThreads, kAtoms>(p, k, it, sQ + stage * kBM * kD, sdO + stage * kBM * kD, sL + stage * kBM,
                                        sDs + stage * kBM, tid);
}

template <int kDB>
__device__ __forceinline__ void bwd_zero_dkdv(float (&dk)[kDB][4], float (&dv)[kDB][4]) {
#pragma unroll
  for (int db = 0; db < kDB; ++db)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[db][e] = dv[db][e] = 0.f;
}

// Adds a block of dQ held in the C layout -- the thread's rows r0 + g and
// r0 + g + 8 of the query tile at m0 of head h, kX 8-column blocks from
// column c0 -- into the f32 accumulator with red.global, skipping rows past
// the sequence and columns past D (the fused dQ of the cp.async kernels).
template <int kX>
__device__ __forceinline__ void bwd_red_dq(const fa__cuda_params &p, const fa__seq &seq, int64_t h, int64_t m0,
                                           const float (&dq)[kX][4], int r0, int c0, int g, int t) {
  float *acc = p.dq_acc + ((seq.bidx * p.Hq + h) * p.Lq_rows + seq.q_row0 + m0) * p.D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int il = r0 + g + r * 8;
    if (m0 + il < seq.lq) {
#pragma unroll
      for (int x = 0; x < kX; ++x) {
        const int d = c0 + x * 8 + 2 * t;
        if (d < p.D) red_add2(acc + il * p.D + d, dq[x][2 * r], dq[x][2 * r + 1]);
      }
    }
  }
}

// dK = scale * sum dS^T Q and dV of the thread's keys j0 and j0 + 8 (its
// accumulators in the C layout, columns d0 on). Keys past the sequence
// (padded layout) get the zeros their accumulators hold.
// kVec (kDB a multiple of 4, d0 = 0): where a tensor's rows allow (16-byte
// aligned, all kDB * 8 columns stored), each quad's words are exchanged
// (mma.cuh's quad_transpose) and stored 16 bytes a thread, as fwd_store
// does for O: whole 32-byte sectors, a quarter of the store instructions.
template <typename E, int kDB, bool kVec = false>
__device__ __forceinline__ void bwd_store_dkdv(const fa__cuda_params &p, const bwd_block &k, int64_t j0,
                                               const float (&dk)[kDB][4], const float (&dv)[kDB][4], int t,
                                               int d0 = 0) {
  using T = typename E::storage;
  const fa__seq &seq = k.seq;
  T *gdk = static_cast<T *>(p.dk) + seq.bidx * p.dks.b + k.kvh * p.dks.h + seq.k_row0 * p.dks.r;
  T *gdv = static_cast<T *>(p.dv) + seq.bidx * p.dvs.b + k.kvh * p.dvs.h + seq.k_row0 * p.dvs.r;
  auto vec_ok = [&](const T *g, int64_t row_stride, int64_t cols) {
    return kVec && kDB % 4 == 0 && d0 == 0 && cols == kDB * 8 && !(reinterpret_cast<uintptr_t>(g) & 15) &&
           !(row_stride & 7);
  };
  const bool vk = vec_ok(gdk, p.dks.r, p.D), vv = vec_ok(gdv, p.dvs.r, p.Dv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = j0 + r * 8;
    // (the shuffles need every lane: the row check comes after them)
    if (vk || vv) {
#pragma unroll
      for (int q = 0; q < kDB / 4; ++q) {
        uint32_t wk[4], wv[4];
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          wk[x] = E::pack(dk[4 * q + x][2 * r] * p.scale, dk[4 * q + x][2 * r + 1] * p.scale);
          wv[x] = E::pack(dv[4 * q + x][2 * r], dv[4 * q + x][2 * r + 1]);
        }
        if (vk) quad_transpose(wk, t);
        if (vv) quad_transpose(wv, t);
        if (j < k.rows_k) {
          if (vk)
            *reinterpret_cast<uint4 *>(gdk + j * p.dks.r + (4 * q + t) * 8) = make_uint4(wk[0], wk[1], wk[2], wk[3]);
          if (vv)
            *reinterpret_cast<uint4 *>(gdv + j * p.dvs.r + (4 * q + t) * 8) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
        }
      }
    }
    if (j >= k.rows_k || (vk && vv)) continue;
#pragma unroll
    for (int db = 0; db < kDB; ++db) {
      const int d = d0 + db * 8 + 2 * t;
      if (!vk && d < p.D)
        *reinterpret_cast<uint32_t *>(gdk + j * p.dks.r + d) =
            E::pack(dk[db][2 * r] * p.scale, dk[db][2 * r + 1] * p.scale);
      if (!vv && d < p.Dv)
        *reinterpret_cast<uint32_t *>(gdv + j * p.dvs.r + d) = E::pack(dv[db][2 * r], dv[db][2 * r + 1]);
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
