// Tensor-core backward, main kernel (FlashAttention-2 structure). A block
// owns kBN = 16 * kWarps keys of one (sequence, kv head) and keeps dK, dV for
// them in registers while it walks every query head of the group and every
// query tile of kBM rows that can see its keys. Per tile:
//   S^T  = K Q^T         (each warp: its 16 keys x kBM queries)
//   P^T  = exp2(S^T - LSE)          recomputed from the forward's LSE
//   dP^T = V dO^T
//   dS^T = P^T * (dP^T - Dsum)
//   dV  += P^T dO,  dK += dS^T Q    (P^T, dS^T go from C to A fragments)
//   dQ  += dS K                     (only when fused: dS^T through shared
//                                    memory, f32 atomics into dq_acc)
// Computing S^T rather than S is what puts P^T and dS^T in the registers of
// the warp that owns the keys, so dV and dK need no shuffle or smem trip.
// GQA: the group's heads are summed in registers, so dK, dV have one writer.
#ifndef FA_CUDA_BWD_KERNEL_CUH
#define FA_CUDA_BWD_KERNEL_CUH

#include "bwd_tile.cuh"

namespace fa_cuda {

template <int kD, int kWarps, int kBM>
struct bwd_cfg {
  static constexpr int kBN = 16 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr size_t smem_bytes =
      sizeof(uint16_t) * (size_t)(2 * kBN * kD + 4 * kBM * kD + kBN * kBM) + sizeof(float) * 4 * kBM;
};

template <typename E, int kD, int kWarps, int kBM, bool kFull>
__global__ void __launch_bounds__(32 * kWarps) bwd_dkdv_kernel(const fa__cuda_params p, const int fuse_dq) {
  using T = typename E::storage;
  using cfg = bwd_cfg<kD, kWarps, kBM>;
  constexpr int kBN = cfg::kBN, kThreads = cfg::kThreads;
  constexpr int kMB = kBM / 8;  // 8-query column blocks of S^T
  constexpr int kDB = kD / 8;
  // fused dQ tile: kBM/16 row tiles x kDS column splits, one per warp
  constexpr int kMT = kBM / 16, kDS = kWarps / kMT, kDc = kD / kDS;
  static_assert(kMT * kDS == kWarps && kDc % 16 == 0, "dQ warp tiling");

  extern __shared__ __align__(128) unsigned char smem[];
  T *sK = reinterpret_cast<T *>(smem);                     // [kBN][kD]
  T *sV = sK + kBN * kD;                                   // [kBN][kD]
  T *sQ = sV + kBN * kD;                                   // [2][kBM][kD]
  T *sdO = sQ + 2 * kBM * kD;                              // [2][kBM][kD]
  T *sdS = sdO + 2 * kBM * kD;                             // [kBN][kBM]: dS^T, for the fused dQ
  float *sL = reinterpret_cast<float *>(sdS + kBN * kBM);  // [2][kBM] lse (raw; rows past lq: 0)
  float *sDs = sL + 2 * kBM;                               // [2][kBM] dsum

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  bwd_block blk;
  if (!bwd_block_init<kBN, kBM>(p, &blk)) return;
  const fa__seq &seq = blk.seq;
  const int total = blk.total;
  bwd_load_kv<kBN, kD, kThreads, false>(p, blk, sK, sV, tid);
  auto load_q = [&](int it, int stage) {
    bwd_load_q_stage<kBM, kD, kThreads, false>(p, blk, it, stage, sQ, sdO, sL, sDs, tid);
  };
  if (total > 0) load_q(0, 0);
  cp_async_commit();

  float dk[kDB][4], dv[kDB][4];
  bwd_zero_dkdv(dk, dv);
  const int wkey = warp * 16;  // this warp's keys inside the block
  const int64_t j_base = blk.n0 + wkey + g;

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    if (it + 1 < total) load_q(it + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    int64_t h, m0;
    bwd_block_tile<kBM>(p, blk, it, &h, &m0);
    const T *q_s = sQ + stage * kBM * kD;
    const T *do_s = sdO + stage * kBM * kD;
    const float *l_s = sL + stage * kBM;
    const float *ds_s = sDs + stage * kBM;

    // S^T = K Q^T and dP^T = V dO^T, 16 keys x kBM queries per warp
    float st[kMB][4], dpt[kMB][4];
    bwd_mma_st_dpt<E, kD>(st, dpt, sK, sV, q_s, do_s, wkey, 0, lane);

    // element-wise: st <- P^T, dpt <- dS^T, the A operands of dV and dK
    bwd_p_ds<kFull>(p, blk.bd, blk.b, h, st, dpt, l_s, ds_s, m0, blk.n0 + wkey, g, t);

    // dV += P^T dO ; dK += dS^T Q  (k = the kBM queries)
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      uint32_t ap[4], as[4];
      c_to_a_frag<E>(ap, st[2 * kk], st[2 * kk + 1]);
      c_to_a_frag<E>(as, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int db2 = 0; db2 < kDB / 2; ++db2) {
        uint32_t bf[4];
        lds_b_kn<kD>(bf, do_s, kk * 16, db2 * 16, lane);
        E::mma(dv[2 * db2], ap, bf[0], bf[1]);
        E::mma(dv[2 * db2 + 1], ap, bf[2], bf[3]);
        lds_b_kn<kD>(bf, q_s, kk * 16, db2 * 16, lane);
        E::mma(dk[2 * db2], as, bf[0], bf[1]);
        E::mma(dk[2 * db2 + 1], as, bf[2], bf[3]);
      }
    }

    if (fuse_dq) {
      // dS^T -> shared memory as [key][query]
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t *>(sdS + swz<kBM>(wkey + g + r * 8, mb * 8 + 2 * t)) =
              E::pack(dpt[mb][2 * r], dpt[mb][2 * r + 1]);
      __syncthreads();
      // dQ tile [kBM x kD] = dS K; this warp: rows mt*16.., columns dc0..dc0+kDc
      const int mt = warp % kMT, dc0 = (warp / kMT) * kDc;
      float dq[kDc / 8][4];
#pragma unroll
      for (int x = 0; x < kDc / 8; ++x) dq[x][0] = dq[x][1] = dq[x][2] = dq[x][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t a[4];
        lds_a_t<kBM>(a, sdS, mt * 16, kk * 16, lane);
#pragma unroll
        for (int db2 = 0; db2 < kDc / 16; ++db2) {
          uint32_t bf[4];
          lds_b_kn<kD>(bf, sK, kk * 16, dc0 + db2 * 16, lane);
          E::mma(dq[2 * db2], a, bf[0], bf[1]);
          E::mma(dq[2 * db2 + 1], a, bf[2], bf[3]);
        }
      }
      bwd_red_dq(p, seq, h, m0, dq, mt * 16, dc0, g, t);
    }
    __syncthreads();  // Q/dO stage and dS^T are rewritten next
  }
  cp_async_wait<0>();

  bwd_store_dkdv<E>(p, blk, j_base, dk, dv, t);
}

}  // namespace fa_cuda

#endif
