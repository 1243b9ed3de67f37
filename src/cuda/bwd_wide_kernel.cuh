// Tensor-core backward for the widest heads (bucket 256: D or Dv in 129..256),
// dK/dV with dQ fused or not, on mma.sync (sm_80 and up). The same products
// as bwd_kernel.cuh, but a warp owning 16 keys x all 256 columns of dK and
// dV would hold 256 f32 accumulators per thread, over the 255 registers a
// thread has; so the block's 8 warps are 4 key groups x 2 column halves:
//   warp w: keys 16 (w % 4) .. + 16 of the block's kBN = 64, columns
//           128 (w / 4) .. + 128 of dK and dV (128 accumulators)
// and per query tile of kBM rows:
//   S^T, dP^T   each warp its 16 keys x one half of the tile's queries (the
//               half its column half names), so no product is made twice
//   P^T, dS^T   element-wise (bwd_tile.cuh), then through shared memory
//               [key][query], since each needs all kBM queries of its keys
//   dV += P^T dO, dK += dS^T Q   the warp's keys x its 128 columns
//   dQ += dS K  (fused: f32 atomics into dq_acc) each warp a 16-row x
//               128-column block, in two passes of 64 columns
// Two barriers a tile: P^T and dS^T complete; the stage and both tiles free.
// Shared memory: K, V 64 KiB; Q, dO 64 KiB a stage; P^T, dS^T 16 KiB: two
// stages (209 KiB) where the device allows (sm_90), else one (145 KiB: sm_80);
// launch_bwd.cuh picks, backend.cu keeps devices with less on the generic path.
#ifndef FA_CUDA_BWD_WIDE_KERNEL_CUH
#define FA_CUDA_BWD_WIDE_KERNEL_CUH

#include "bwd_tile.cuh"
#include "launch.cuh"

namespace fa_cuda {

template <int kStages>
struct bwd_wide_cfg {
  static constexpr int kD = 256, kBN = 64, kBM = 64, kWarps = 8, kThreads = 256;
  static constexpr size_t smem_bytes = fa__cuda_bwd_wide_smem(kStages);
  static_assert(fa__cuda_bwd_wide_smem(kStages) ==
                    sizeof(uint16_t) * (size_t)(2 * kBN * kD + 2 * kStages * kBM * kD + 2 * kBN * kBM) +
                        sizeof(float) * 2 * kStages * kBM,
                "launch.cuh's byte count matches the layout below");
};

template <typename E, int kStages, bool kFull>
__global__ void __launch_bounds__(256, 1) bwd_wide_kernel(const fa__cuda_params p, const int fuse_dq) {
  using T = typename E::storage;
  using cfg = bwd_wide_cfg<kStages>;
  constexpr int kD = cfg::kD, kBN = cfg::kBN, kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kKeyGroups = kBN / 16;  // 4
  constexpr int kDh = kD / 2;           // a warp's columns of dK, dV
  constexpr int kQh = kBM / 2;          // a warp's queries of S^T, dP^T
  constexpr int kMBh = kQh / 8, kDBh = kDh / 8;
  constexpr int kDqPass = 64;  // dQ columns per pass
  static_assert(cfg::kWarps == 2 * kKeyGroups && kBM / 16 * 2 == cfg::kWarps, "warp tiling");

  extern __shared__ __align__(128) unsigned char smem[];
  T *sK = reinterpret_cast<T *>(smem);                     // [kBN][kD]
  T *sV = sK + kBN * kD;                                   // [kBN][kD]
  T *sQ = sV + kBN * kD;                                   // [kStages][kBM][kD]
  T *sdO = sQ + kStages * kBM * kD;                        // [kStages][kBM][kD]
  T *sP = sdO + kStages * kBM * kD;                        // [kBN][kBM]: P^T
  T *sdS = sP + kBN * kBM;                                 // [kBN][kBM]: dS^T
  float *sL = reinterpret_cast<float *>(sdS + kBN * kBM);  // [kStages][kBM] lse (raw)
  float *sDs = sL + kStages * kBM;                         // [kStages][kBM] dsum

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int half = warp / kKeyGroups;
  const int wkey = (warp % kKeyGroups) * 16;   // the warp's keys inside the block
  const int q0 = half * kQh, c0 = half * kDh;  // its queries of S^T, its columns of dK, dV
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

  float dk[kDBh][4], dv[kDBh][4];
  bwd_zero_dkdv(dk, dv);

  for (int it = 0; it < total; ++it) {
    const int stage = kStages == 2 ? it & 1 : 0;
    if (kStages == 2) {
      if (it + 1 < total) load_q(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      if (it > 0) {
        load_q(it, 0);
        cp_async_commit();
      }
      cp_async_wait<0>();
    }
    __syncthreads();
    int64_t h, m0;
    bwd_block_tile<kBM>(p, blk, it, &h, &m0);
    const T *q_s = sQ + stage * kBM * kD;
    const T *do_s = sdO + stage * kBM * kD;
    const float *l_s = sL + stage * kBM;
    const float *ds_s = sDs + stage * kBM;

    // S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x its kQh queries
    float st[kMBh][4], dpt[kMBh][4];
    bwd_mma_st_dpt<E, kD>(st, dpt, sK, sV, q_s, do_s, wkey, q0, lane);

    bwd_p_ds<kFull>(p, blk.bd, blk.b, h, st, dpt, l_s + q0, ds_s + q0, m0 + q0, blk.n0 + wkey, g, t);
    // P^T and dS^T -> shared memory as [key][query], rounded as the A
    // fragments of bwd_kernel round them
#pragma unroll
    for (int mb = 0; mb < kMBh; ++mb)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int off = swz<kBM>(wkey + g + r * 8, q0 + mb * 8 + 2 * t);
        *reinterpret_cast<uint32_t *>(sP + off) = E::pack(st[mb][2 * r], st[mb][2 * r + 1]);
        *reinterpret_cast<uint32_t *>(sdS + off) = E::pack(dpt[mb][2 * r], dpt[mb][2 * r + 1]);
      }
    __syncthreads();

    // dV += P^T dO ; dK += dS^T Q: the warp's keys x columns c0 .. c0 + kDh
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      uint32_t ap[4], as[4];
      lds_a<kBM>(ap, sP, wkey, kk * 16, lane);
      lds_a<kBM>(as, sdS, wkey, kk * 16, lane);
#pragma unroll
      for (int db2 = 0; db2 < kDBh / 2; ++db2) {
        uint32_t bf[4];
        lds_b_kn<kD>(bf, do_s, kk * 16, c0 + db2 * 16, lane);
        E::mma(dv[2 * db2], ap, bf[0], bf[1]);
        E::mma(dv[2 * db2 + 1], ap, bf[2], bf[3]);
        lds_b_kn<kD>(bf, q_s, kk * 16, c0 + db2 * 16, lane);
        E::mma(dk[2 * db2], as, bf[0], bf[1]);
        E::mma(dk[2 * db2 + 1], as, bf[2], bf[3]);
      }
    }

    if (fuse_dq) {
      // dQ tile [kBM x kD] = dS K; this warp: rows mt * 16 .., columns c0 ..
      const int mt = warp % kKeyGroups;
#pragma unroll
      for (int pass = 0; pass < kDh / kDqPass; ++pass) {
        const int cp = c0 + pass * kDqPass;
        float dq[kDqPass / 8][4];
#pragma unroll
        for (int x = 0; x < kDqPass / 8; ++x) dq[x][0] = dq[x][1] = dq[x][2] = dq[x][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          uint32_t a[4];
          lds_a_t<kBM>(a, sdS, mt * 16, kk * 16, lane);
#pragma unroll
          for (int db2 = 0; db2 < kDqPass / 16; ++db2) {
            uint32_t bf[4];
            lds_b_kn<kD>(bf, sK, kk * 16, cp + db2 * 16, lane);
            E::mma(dq[2 * db2], a, bf[0], bf[1]);
            E::mma(dq[2 * db2 + 1], a, bf[2], bf[3]);
          }
        }
        bwd_red_dq(p, seq, h, m0, dq, mt * 16, cp, g, t);
      }
    }
    __syncthreads();  // the Q/dO stage, P^T and dS^T are rewritten next
  }
  cp_async_wait<0>();

  bwd_store_dkdv<E>(p, blk, blk.n0 + wkey + g, dk, dv, t, c0);
}

}  // namespace fa_cuda

#endif
