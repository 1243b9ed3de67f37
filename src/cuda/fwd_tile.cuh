// The forward's per-tile arithmetic, shared by the mma.sync kernel
// (fwd_kernel.cuh) and the sm_90a wgmma kernel (fwd_wgmma_kernel.cuh): both
// hold S and O in the same fragment layout (per warp 16-row m-tiles; a
// thread holds rows g and g + 8, columns 8 nb + 2t and 2t + 1), so scoring,
// the online softmax, dropout and the epilogue are written once, here.
#ifndef FA_CUDA_FWD_TILE_CUH
#define FA_CUDA_FWD_TILE_CUH

#include "grid_order.cuh"
#include "mma.cuh"
#include "rules.cuh"
#include "score_arith.cuh"
#include "score_tile.cuh"

namespace fa_cuda {

// Which query rows and key tiles one block of kBM rows of one (sequence,
// query head) covers. Blocks run heaviest first: the last row blocks, which
// a causal band gives the most keys, get the lowest blockIdx.y.
struct fwd_block {
  seq_ctx c;
  int64_t b, h, kvh;  // sequence (logical, as the descales and lengths count them), query and kv head
  int64_t rows;       // query rows of this sequence (stored rows when packed)
  int64_t m0;         // first query row of the block
  int nb_lo;          // first key tile (in tiles of kBN)
  int n_tiles;        // key tiles the band leaves
};

// The block of sequence-head bh (b * Hq + h) from query row m0; false when
// m0 is past the sequence's rows.
template <int kBM, int kBN>
__device__ __forceinline__ bool fwd_block_at(const fa__cuda_params &p, int64_t bh, int64_t m0, fwd_block *fb) {
  fb->b = bh / p.Hq;
  fb->h = bh % p.Hq;
  fb->kvh = fb->h / p.group;
  fb->c = make_seq_ctx(p, fb->b, fb->h);
  fb->rows = p.varlen ? fb->c.seq.lq : p.Lq;
  fb->m0 = m0;
  if (fb->m0 >= fb->rows) return false;
  int64_t j0, j1;
  fa__band_cols(&fb->c.bd, fb->m0, fb->m0 + kBM, &j0, &j1);
  fb->nb_lo = static_cast<int>(j0 / kBN);
  fb->n_tiles = j1 > j0 ? static_cast<int>((j1 + kBN - 1) / kBN) - fb->nb_lo : 0;
  return true;
}

// The block of this CUDA block of a grid dim3(B * Hq, row tiles): a
// sequence-head and a row tile counted from the last (the heaviest under a
// causal band first), tile-major (grid_order.cuh).
template <int kBM, int kBN>
__device__ __forceinline__ bool fwd_block_init(const fa__cuda_params &p, fwd_block *fb) {
  int64_t bh, tile;
  tile_major_block(&bh, &tile);
  return fwd_block_at<kBM, kBN>(p, bh, static_cast<int64_t>(gridDim.y - 1 - tile) * kBM, fb);
}

// The key tiles [*lo, *hi) of a block (numbered from its first, fb.nb_lo)
// that its 64 query rows from r0 can see: a wgmma warpgroup's own tiles (below
// a causal diagonal, outside a window, rows past the end it skips the rest,
// which would add exactly P = 0).
template <int kBN>
__device__ __forceinline__ void fwd_wg_tiles(const fwd_block &fb, int64_t r0, int *lo, int *hi) {
  int64_t j0, j1;
  fa__band_cols(&fb.c.bd, r0, r0 + 64, &j0, &j1);
  *lo = *hi = 0;
  if (j1 > j0) {
    *lo = static_cast<int>(j0 / kBN) - fb.nb_lo;
    *hi = static_cast<int>((j1 + kBN - 1) / kBN) - fb.nb_lo;
  }
}

// The score element (row, column) a thread holds as element
// k = (mt * kNB + nb) * 4 + e of fwd_scores' layout, for bias_tile.
template <int kNB>
struct fwd_coords {
  int64_t r0, n0;
  int g, t;
  __device__ __forceinline__ int64_t row(int k) const { return r0 + (k / (4 * kNB)) * 16 + g + ((k >> 1) & 1) * 8; }
  __device__ __forceinline__ int64_t col(int k) const { return n0 + ((k >> 2) % kNB) * 8 + 2 * t + (k & 1); }
};

// Raw dot products -> scores in log2 units, -inf where not visible, for the
// kMT m-tiles of one warp starting at query row r0, key tile at n0.
// kFull: every element through score_full (mask, bias, ALiBi, softcap);
// otherwise only the band, and only where it cuts the warp's tile.
// kFold: the scores stay unscaled (only the band's -inf set): fwd_softmax
// with kFold applies the scale inside the exponent, one FFMA an element
// instead of a multiply here and a subtraction there (FlashAttention 3's
// softmax; ncu counted 450 M unfused FP32 instructions in the D = 64
// warp-specialized forward). Needs a positive scale: the max of the
// unscaled row is then the max of the scaled one.
// kStageBias (kFull): the thread's bias elements read first (bias_tile).
template <bool kFull, bool kFold = false, bool kStageBias = false, int kMT, int kNB>
__device__ __forceinline__ void fwd_scores(const fa__cuda_params &p, const seq_ctx &c, float (&s)[kMT][kNB][4],
                                           int64_t r0, int64_t n0, int g, int t) {
  if (kFull) {
    float bias[kStageBias ? kMT * kNB * 4 : 1];
    if constexpr (kStageBias)
      if (p.bias) bias_tile(p, c, fwd_coords<kNB>{r0, n0, g, t}, bias);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float capped;
          s[mt][nb][e] = score_full_at<kStageBias>(p, c, s[mt][nb][e], r0 + mt * 16 + g + (e >> 1) * 8,
                                                   n0 + nb * 8 + 2 * t + (e & 1),
                                                   kStageBias ? bias[(mt * kNB + nb) * 4 + e] : 0.f, &capped);
        }
  } else if (fa__band_tile_full(&c.bd, r0, r0 + 16 * kMT, n0, n0 + 8 * kNB)) {
    if constexpr (!kFold) {  // folded: the scale is applied in the exponent
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nb][e] *= p.scale_log2;
    }
  } else {
    // A row's band is one column interval (fa__band_cols of that row alone,
    // empty past the sequence): two int compares per element instead of
    // the 64-bit band arithmetic, which the register budget cannot afford.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = r0 + mt * 16 + g + r * 8;
        int64_t j0, j1;
        int lo, hi;
        fa__band_cols(&c.bd, i, i + 1, &j0, &j1);
        band_offsets(j0, j1, n0, 8 * kNB, &lo, &hi);
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = nb * 8 + 2 * t + e;
            const float x = kFold ? s[mt][nb][2 * r + e] : s[mt][nb][2 * r + e] * p.scale_log2;
            s[mt][nb][2 * r + e] = j >= lo && j < hi ? x : -INFINITY;
          }
      }
  }
}

// Raw dot products -> scores in log2 units with the arithmetic options
// (softcap, ALiBi: score_arith.cuh) and a tensor read from a shared tile
// (x: score_tile.cuh's bias or mask, no_score_tile without; xrow, the
// tile's local row of row r0), -inf outside the band, for the kMT m-tiles
// of one warp from query row r0, key tile at n0. As the band-only path: the
// band tested per element only on tiles it cuts, as a row's column
// interval; the ALiBi distance diag(i) - j a row's float minus the column's
// offset.
template <bool kCap, bool kMasked, int kMT, int kNB, typename X>
__device__ __forceinline__ void fwd_scores_arith_el(const seq_ctx &c, const arith_score &a, float (&s)[kMT][kNB][4],
                                                    int64_t r0, int64_t n0, int g, int t, const X &x, int xrow) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = r0 + mt * 16 + g + r * 8;
      int lo = 0, hi = 8 * kNB;
      if (kMasked) {
        int64_t j0, j1;
        fa__band_cols(&c.bd, i, i + 1, &j0, &j1);
        band_offsets(j0, j1, n0, 8 * kNB, &lo, &hi);
      }
      const float diag = static_cast<float>(fa__band_diag(&c.bd, i) - n0 - 2 * t);  // at the thread's column 0
      const score_tile_row xr = x.row(xrow + mt * 16 + g + r * 8, t);
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        float tc, v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) v[e] = a.at<kCap>(s[mt][nb][2 * r + e], diag - static_cast<float>(nb * 8 + e), &tc);
        x.apply(xr, nb, v[0], v[1]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = nb * 8 + 2 * t + e;
          s[mt][nb][2 * r + e] = !kMasked || (j >= lo && j < hi) ? v[e] : -INFINITY;
        }
      }
    }
}

template <bool kCap, int kMT, int kNB, typename X = no_score_tile>
__device__ __forceinline__ void fwd_scores_arith(const seq_ctx &c, const arith_score &a, float (&s)[kMT][kNB][4],
                                                 int64_t r0, int64_t n0, int g, int t, const X &x = X{}, int xrow = 0) {
  if (fa__band_tile_full(&c.bd, r0, r0 + 16 * kMT, n0, n0 + 8 * kNB))
    fwd_scores_arith_el<kCap, false>(c, a, s, r0, n0, g, t, x, xrow);
  else
    fwd_scores_arith_el<kCap, true>(c, a, s, r0, n0, g, t, x, xrow);
}

// The max of row half r (elements 2r, 2r + 1 of every 8-column block) of
// one m-tile, as a balanced tree: log2(2 kNB) dependent FMNMX instead of
// 2 kNB. fmaxf drops a NaN operand whatever the order, so the result is
// the same as a left-to-right loop's (all-NaN gives NaN, which the caller's
// fmaxf with -inf turns into -inf, as that loop seeded with -inf did).
template <int kNB>
__device__ __forceinline__ float row_max_tree(const float (&s)[kNB][4], int r) {
  float v[kNB];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) v[nb] = fmaxf(s[nb][2 * r], s[nb][2 * r + 1]);
#pragma unroll
  for (int w = 1; w < kNB; w *= 2)
#pragma unroll
    for (int nb = 0; nb + w < kNB; nb += 2 * w) v[nb] = fmaxf(v[nb], v[nb + w]);
  return v[0];
}

// One step of the online softmax over a scored tile: new row maxima, S ->
// P = 2^(S - m) in place, running sums (per lane; the quad sums them in the
// epilogue), then the dropout mask applied to P (after the sums: the softmax
// is that of the undropped P). alpha: the factor O must be rescaled by
// (fwd_rescale) before P V is added to it. kPShift: P = 2^(S - m + kPShift),
// the FP8 forward's headroom (P up to 2^8, so that small P stay normal in
// e4m3; the row sum carries the same factor, which o = acc / l cancels).
// kFold: S is unscaled (fwd_scores with kFold), sc > 0 its scale in log2
// units: the max is taken unscaled and scaled once, P = 2^(S sc - m) by one
// FFMA (the maxima are the same numbers either way: rounding is monotonic).
template <bool kFull, int kPShift = 0, bool kFold = false, int kMT, int kNB>
__device__ __forceinline__ void fwd_softmax(const fa__cuda_params &p, const seq_ctx &c, float (&s)[kMT][kNB][4],
                                            float (&alpha)[kMT][2], float (&row_m)[kMT][2], float (&row_l)[kMT][2],
                                            int64_t r0, int64_t n0, int g, int t, float sc = 1.f) {
  static_assert(!(kFull && kFold), "per-element scores are scaled as they are made");
  // All rows' maxima first, each a tree, then the rows' shuffles: a
  // row-at-a-time loop compiled to one chain of 2 kNB dependent FMNMX and
  // two shuffle round trips per row, row after row (ncu: the FP8 forward's
  // consumers stalled on fixed-latency dependencies more than on anything
  // else). max is exact in any order, so the bits are the same; on the H200
  // the FP8 warp-specialized forward gained 0-4%, bf16 stayed within noise
  // (bench/results/2026-12-04-h200-fp8-softmax.txt).
  float mxs[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) mxs[mt][r] = fmaxf(row_max_tree<kNB>(s[mt], r), -INFINITY);
#pragma unroll
  for (int x = 1; x <= 2; x *= 2)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) mxs[mt][r] = fmaxf(mxs[mt][r], __shfl_xor_sync(0xffffffffu, mxs[mt][r], x));
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = mxs[mt][r];
      if (kFold) mx *= sc;
      const float mnew = fmaxf(row_m[mt][r], mx);
      const float muse = mnew == -INFINITY ? 0.f : mnew;  // nothing seen yet: no -inf - -inf
      alpha[mt][r] = fast_exp2(row_m[mt][r] - muse);
      row_m[mt][r] = mnew;
      const float mp = kPShift ? muse - static_cast<float>(kPShift) : muse;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        s[mt][nb][2 * r] = fast_exp2(kFold ? fmaf(s[mt][nb][2 * r], sc, -mp) : s[mt][nb][2 * r] - mp);
        s[mt][nb][2 * r + 1] = fast_exp2(kFold ? fmaf(s[mt][nb][2 * r + 1], sc, -mp) : s[mt][nb][2 * r + 1] - mp);
        sum += s[mt][nb][2 * r] + s[mt][nb][2 * r + 1];
      }
      row_l[mt][r] = row_l[mt][r] * alpha[mt][r] + sum;
    }
  if (kFull && p.has_dropout) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          bool k0, k1;
          keep_pair(p, c, r0 + mt * 16 + g + r * 8, n0 + nb * 8 + 2 * t, &k0, &k1);
          if (!k0) s[mt][nb][2 * r] = 0.f;
          if (!k1) s[mt][nb][2 * r + 1] = 0.f;
        }
  }
}

// O *= alpha row by row. Rescaling costs as many multiplies as O has
// registers; once the row maxima settle (most tiles of a long row) every
// alpha is exactly 1 and the whole warp skips it, bit for bit the same.
template <int kMT, int kDB>
__device__ __forceinline__ void fwd_rescale(float (&o)[kMT][kDB][4], const float (&alpha)[kMT][2]) {
  bool moved = false;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) moved |= alpha[mt][0] != 1.f || alpha[mt][1] != 1.f;
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int db = 0; db < kDB; ++db) {
        o[mt][db][0] *= alpha[mt][0];
        o[mt][db][1] *= alpha[mt][0];
        o[mt][db][2] *= alpha[mt][1];
        o[mt][db][3] *= alpha[mt][1];
      }
  }
}

// P (S accumulators after fwd_softmax) as the A fragments of P V, 16 keys
// per fragment: the C layout of two 8-column blocks is the A layout.
template <typename E, int kNB>
__device__ __forceinline__ void fwd_p_frag(uint32_t (&a)[4], const float (&s)[kNB][4], int kk) {
  a[0] = E::pack(s[2 * kk][0], s[2 * kk][1]);
  a[1] = E::pack(s[2 * kk][2], s[2 * kk][3]);
  a[2] = E::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = E::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Epilogue: O = acc / l (0 for a row that saw nothing), LSE = m ln2 + ln l,
// rows r0 + ... of the block's sequence. A NaN l (NaN scores) stays NaN in
// both, as IEEE propagation asks.
// kVec (kDB a multiple of 4): where p.o's rows allow (16-byte aligned, all
// kDB * 8 columns stored), each quad's words are exchanged (quad_transpose)
// and stored 16 bytes a thread: a warp's store writes whole 32-byte sectors,
// a quarter of the store instructions.
template <typename E, int kMT, int kDB, bool kVec = false>
__device__ __forceinline__ void fwd_store(const fa__cuda_params &p, const fwd_block &fb, const float (&o)[kMT][kDB][4],
                                          const float (&row_m)[kMT][2], const float (&row_l)[kMT][2], int64_t r0, int g,
                                          int t) {
  using T = typename E::storage;
  const seq_ctx &c = fb.c;
  T *go = static_cast<T *>(p.o) + c.seq.bidx * p.os.b + fb.h * p.os.h + c.seq.q_row0 * p.os.r;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_l[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l == 0.f ? 0.f : p.dscale / l;
      const int64_t i = r0 + mt * 16 + g + r * 8;
      if (kVec && kDB % 4 == 0 && p.Dv == kDB * 8 && !(reinterpret_cast<uintptr_t>(go) & 15) && !(p.os.r & 7)) {
        // (the shuffles need every lane: the row check comes after them)
#pragma unroll
        for (int q = 0; q < kDB / 4; ++q) {
          uint32_t w[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) w[j] = E::pack(o[mt][4 * q + j][2 * r] * inv, o[mt][4 * q + j][2 * r + 1] * inv);
          quad_transpose(w, t);
          if (i < fb.rows)
            *reinterpret_cast<uint4 *>(go + i * p.os.r + (4 * q + t) * 8) = make_uint4(w[0], w[1], w[2], w[3]);
        }
      } else if (i < fb.rows) {
#pragma unroll
        for (int db = 0; db < kDB; ++db) {
          const int d = db * 8 + 2 * t;
          if (d < p.Dv)
            *reinterpret_cast<uint32_t *>(go + i * p.os.r + d) =
                E::pack(o[mt][db][2 * r] * inv, o[mt][db][2 * r + 1] * inv);
        }
      }
      if (i < fb.rows) {
        if (p.lse && t == 0)
          p.lse[c.seq.bidx * p.lses.b + fb.h * p.lses.h + (c.seq.q_row0 + i) * p.lses.r] =
              l == 0.f ? -INFINITY : row_m[mt][r] * kLn2 + logf(l);
      }
    }
}

}  // namespace fa_cuda

#endif
