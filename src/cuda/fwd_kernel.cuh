// Tensor-core forward (FlashAttention-2 structure). A block owns kBM = 16 *
// kWarps query rows of one (sequence, head); each warp owns 16 of them, so
// the softmax statistics of a row never leave the 4 lanes that hold it. K/V
// tiles of kBN keys stream through a 2-stage cp.async double buffer; S = Q K^T
// and O += P V run on mma.m16n8k16 with f32 accumulators, P going from the S
// accumulators straight into A fragments (never through shared memory).
//
// kFull = false: only the band (causal / window / lengths) is applied, and
// only on tiles the band cuts (fa__band_tile_full decides per warp).
// kFull = true: every element goes through score_full (mask, bias, ALiBi,
// softcap) and dropout; the same kernel otherwise.
#ifndef FA_CUDA_FWD_KERNEL_CUH
#define FA_CUDA_FWD_KERNEL_CUH

#include "fwd_tile.cuh"

namespace fa_cuda {

template <int kD, int kWarps, int kMT, int kBN>
struct fwd_cfg {
  static constexpr int kBM = 16 * kMT * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr size_t smem_bytes = sizeof(uint16_t) * (size_t)(kBM * kD + 4 * kBN * kD);
};

// kMT: 16-row m-tiles per warp. Two let every K/V fragment a warp loads from
// shared memory feed two mma (half the shared-memory traffic per flop), at
// the price of twice the accumulator registers.
template <typename E, int kD, int kWarps, int kMT, int kBN, bool kQRegs, bool kFull>
__global__ void __launch_bounds__(32 * kWarps) fwd_kernel(const fa__cuda_params p) {
  using T = typename E::storage;
  using cfg = fwd_cfg<kD, kWarps, kMT, kBN>;
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kNB = kBN / 8;  // 8-key column blocks of S
  constexpr int kDB = kD / 8;   // 8-wide column blocks of O
  static_assert(kBN % 16 == 0 && kD % 16 == 0, "tile shape");

  extern __shared__ __align__(128) unsigned char smem[];
  T *sQ = reinterpret_cast<T *>(smem);  // [kBM][kD]
  T *sK = sQ + kBM * kD;                // [2][kBN][kD]
  T *sV = sK + 2 * kBN * kD;            // [2][kBN][kD]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  fwd_block fb;
  if (!fwd_block_init<kBM, kBN>(p, &fb)) return;
  const seq_ctx &c = fb.c;
  const int64_t m0 = fb.m0;
  const int nb_lo = fb.nb_lo, n_tiles = fb.n_tiles;

  const T *gq = static_cast<const T *>(p.q) + c.seq.bidx * p.qs.b + fb.h * p.qs.h + (c.seq.q_row0 + m0) * p.qs.r;
  const T *gk = static_cast<const T *>(p.k) + c.seq.bidx * p.ks.b + fb.kvh * p.ks.h + c.seq.k_row0 * p.ks.r;
  const T *gv = static_cast<const T *>(p.v) + c.seq.bidx * p.vs.b + fb.kvh * p.vs.h + c.seq.k_row0 * p.vs.r;

  const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
  load_tile<kBM, kD, kThreads>(sQ, gq, p.qs.r, q_valid, p.D, p.q, tid);
  auto load_kv = [&](int it, int stage) {
    const int64_t n0 = static_cast<int64_t>(nb_lo + it) * kBN;
    const int valid = static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
    load_tile<kBN, kD, kThreads>(sK + stage * kBN * kD, gk + n0 * p.ks.r, p.ks.r, valid, p.D, p.k, tid);
    load_tile<kBN, kD, kThreads>(sV + stage * kBN * kD, gv + n0 * p.vs.r, p.vs.r, valid, p.Dv, p.v, tid);
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  float o[kMT][kDB][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int db = 0; db < kDB; ++db) o[mt][db][0] = o[mt][db][1] = o[mt][db][2] = o[mt][db][3] = 0.f;
  float row_m[kMT][2], row_l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    row_m[mt][0] = row_m[mt][1] = -INFINITY;
    row_l[mt][0] = row_l[mt][1] = 0.f;
  }
  constexpr int kQF = kQRegs ? kMT * (kD / 16) : 1;
  uint32_t qf[kQF][4];
  const int wrow = warp * 16 * kMT;  // first row of this warp inside the block

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    if (it + 1 < n_tiles) load_kv(it + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T *k_s = sK + stage * kBN * kD;
    const T *v_s = sV + stage * kBN * kD;
    if (kQRegs && it == 0) {
#pragma unroll
      for (int x = 0; x < kQF; ++x) lds_a<kD>(qf[x], sQ, wrow + (x % kMT) * 16, (x / kMT) * 16, lane);
    }

    // S = Q K^T
    float s[kMT][kNB][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (kQRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x) a[mt][x] = qf[kQRegs ? kk * kMT + mt : 0][x];
        } else {
          lds_a<kD>(a[mt], sQ, wrow + mt * 16, kk * 16, lane);
        }
      }
#pragma unroll
      for (int nb2 = 0; nb2 < kNB / 2; ++nb2) {
        uint32_t bf[4];
        lds_b_nk<kD>(bf, k_s, nb2 * 16, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          E::mma(s[mt][2 * nb2], a[mt], bf[0], bf[1]);
          E::mma(s[mt][2 * nb2 + 1], a[mt], bf[2], bf[3]);
        }
      }
    }

    const int64_t n0 = static_cast<int64_t>(nb_lo + it) * kBN;
    fwd_scores<kFull>(p, c, s, m0 + wrow, n0, g, t);
    float alpha[kMT][2];
    fwd_softmax<kFull>(p, c, s, alpha, row_m, row_l, m0 + wrow, n0, g, t);
    fwd_rescale(o, alpha);

    // O += P V
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) fwd_p_frag<E>(a[mt], s[mt], kk);
#pragma unroll
      for (int db2 = 0; db2 < kDB / 2; ++db2) {
        uint32_t bf[4];
        lds_b_kn<kD>(bf, v_s, kk * 16, db2 * 16, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          E::mma(o[mt][2 * db2], a[mt], bf[0], bf[1]);
          E::mma(o[mt][2 * db2 + 1], a[mt], bf[2], bf[3]);
        }
      }
    }
    __syncthreads();  // this stage is overwritten by the prefetch two tiles on
  }
  cp_async_wait<0>();
  fwd_store<E>(p, fb, o, row_m, row_l, m0 + wrow, g, t);
}

}  // namespace fa_cuda

#endif
