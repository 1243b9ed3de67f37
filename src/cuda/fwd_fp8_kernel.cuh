// FP8 (e4m3) forward for Hopper (sm_90a): the wgmma forward of
// fwd_wgmma_kernel.cuh with 8-bit operands (wgmma m64nNk32, twice the bf16
// rate) and the rule of docs/semantics.md, "FP8 (e4m3)". A block is kWG
// warpgroups of 64 query rows; per key tile of kBN = FA__FP8_BLOCK_K keys:
//   S  = Q K^T     wgmma ss, Q and K K-major in shared memory (D contiguous)
//   scores         S * q_descale * k_descale, then fwd_tile.cuh's scoring and
//                  online softmax with P = 2^(S - m + FA__FP8_P_SHIFT)
//   P -> e4m3      in registers, straight from the S accumulators
//   T  = P V       wgmma rs, V^T K-major in shared memory, into a temporary
//   O  = O alpha + T   on the CUDA cores, in f32
// Two-level accumulation (as DeepGEMM, CUTLASS's GmmaFP8Accumulation and
// SageAttention2 do): Hopper's FP8 tensor cores do not accumulate in f32.
// Per k32 step they align the 32 products to the largest exponent, keep
// the top ~14 bits, and carry the accumulator with 13 mantissa bits (the
// low bits truncated, "FP22"). O kept in the wgmma accumulator across all
// key tiles (scale-d = 1) would be truncated L / 32 times; here each tile's
// P V (4 k32 steps) starts from zero (scale-d = 0) and is added to O in
// full f32. S = Q K^T (D / 32 steps) stays one chain; tests/test_fp8.c
// bounds what its truncation does to P (docs/semantics.md, "FP8 (e4m3)").
// FP8 wgmma reads both shared operands K-major only, and for P V the
// contraction runs over keys: V ([keys][Dv] in global memory) is loaded as
// is (cp.async, the same swizzled tiles as K) and transposed in shared
// memory into sVt ([Dv][kBN keys], 128-byte rows) by byte permutes.
//
// The P fragment: the A operand of m64nNk32 for 8-bit types holds, per
// thread, row g at k = 4t..4t+3 and 16+4t..16+4t+3 (and row g + 8), while
// the S accumulator holds keys 2t, 2t+1 of every 8-column block. Rather than
// shuffle P between lanes (FlashAttention 3's permute_Cregs_fp8), the
// transpose writes the keys into sVt in the order P already has: within
// each 16 keys, logical column 4t + e holds key 2t + (e & 1) + 8 (e >> 1).
// A contraction does not care in which order its index runs, as long as
// both operands agree.
#ifndef FA_CUDA_FWD_FP8_KERNEL_CUH
#define FA_CUDA_FWD_FP8_KERNEL_CUH

#include "../rules/fp8.h"
#include "fwd_tile.cuh"
#include "wgmma.cuh"

namespace fa_cuda {

template <int kD, int kWG, int kBN, int kSlots, int kPipe>
struct fwd_fp8_cfg {
  static constexpr int kBM = 64 * kWG;
  static constexpr int kThreads = 128 * kWG;
  // Q, kSlots tiles each of K and V (as loaded), V^T (two with kPipe), and
  // 1 KiB to align them to 1024 bytes; one byte an element
  static constexpr size_t smem_bytes = (size_t)(kBM * kD + 2 * kSlots * kBN * kD + (kPipe ? 2 : 1) * kD * kBN) + 1024;
};

// descale[b, kvh] (1 when absent).
__device__ __forceinline__ float fp8_descale(const float *d, const int64_t (&s)[2], int64_t b, int64_t kvh) {
  return d ? d[b * s[0] + kvh * s[1]] : 1.f;
}

// The loaded V tile (keys x kD bytes, swz_atoms<kBN> in 16-bit units) into
// vt ([kD][kBN] bytes, 128-byte rows, 16-byte chunks swizzled by row & 7:
// wgmma's 128-byte swizzle), keys in the P fragment's order (see above).
// Each thread turns 4 x 4 blocks (4 keys x 4 dims) around with byte
// permutes; a warp reads 8 consecutive words of 4 key rows (no bank
// conflicts) and writes 4-way conflicted words.
template <int kD, int kBN, int kThreads>
__device__ __forceinline__ void fp8_transpose_v(unsigned char *vt, const uint16_t *sv, int tid) {
  static_assert(kBN == 128, "a V^T row is one 128-byte swizzle row");
  constexpr int kBlocks = (kD / 4) * (kBN / 4);
#pragma unroll
  for (int b0 = 0; b0 < kBlocks; b0 += kThreads) {
    const int idx = b0 + tid, lo = idx & 31, hi = idx >> 5;
    const int n = 4 * ((hi % (kD / 32)) * 8 + (lo & 7));  // first of 4 dims
    const int c4 = (hi / (kD / 32)) * 4 + (lo >> 3);      // logical columns 4 c4 .. 4 c4 + 3
    const int key0 = (c4 >> 3) * 32 + ((c4 >> 2) & 1) * 16 + (c4 & 3) * 2;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int key = key0 + (q & 1) + 8 * (q >> 1);
      w[q] = *reinterpret_cast<const uint32_t *>(sv + swz_atoms<kBN>(key, n >> 1));
    }
    const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    const uint32_t out[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                             __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
    const int c = 4 * c4;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = n + r;
      *reinterpret_cast<uint32_t *>(vt + row * 128 + ((((c >> 4) ^ (row & 7)) << 4) | (c & 15))) = out[r];
    }
  }
}

// P (S accumulators after the softmax) as the e4m3 A fragments of P V, 32
// keys per fragment, in the key order fp8_transpose_v writes.
template <int kNB>
__device__ __forceinline__ void fp8_p_frag(uint32_t (&a)[4], const float (&s)[kNB][4], int kk) {
  const int nb = 4 * kk;
  a[0] = e4m3_t::pack4(s[nb][0], s[nb][1], s[nb + 1][0], s[nb + 1][1]);
  a[1] = e4m3_t::pack4(s[nb][2], s[nb][3], s[nb + 1][2], s[nb + 1][3]);
  a[2] = e4m3_t::pack4(s[nb + 2][0], s[nb + 2][1], s[nb + 3][0], s[nb + 3][1]);
  a[3] = e4m3_t::pack4(s[nb + 2][2], s[nb + 2][3], s[nb + 3][2], s[nb + 3][3]);
}

// E: the element type of o (bf16_t or f16_t). kFull: per-element scoring
// (softcap, ALiBi); kPipe: the software pipeline, 0 none (one tile at a
// time), 1 or 2 (both issue S of tile it + 1 with P V of tile it):
//   1  P V's add into O under S, the softmax of it + 1 after both
//   2  the softmax of it + 1 under P V (FlashAttention 3's order), the add
//      after: O, the temporary, S and P all live at once (spills more)
// kPipe 1 is the default, 2 FLASHATTN_CUDA_VARIANT=2 (launch_fwd_fp8.cuh);
// kSkip: warpgroups skip the key tiles outside their rows' band (one tile at
// a time only, as in fwd_wgmma_kernel.cuh).
// The steps of the FP8 rule (docs/semantics.md, "FP8 (e4m3)") that every
// FP8 forward kernel runs (this one and fwd_fp8_ws_kernel.cuh), written once.
// Once S of a key tile at n0 is in: S * q_descale * k_descale, then
// fwd_tile.cuh's scores and online softmax with P = 2^(s - m + shift).
// Band-only calls fold the product of descales and scale into the exponent
// where it is positive (the same for a whole work tile: one (batch, kv
// head)): one FFMA an element for the three steps (fwd_tile.cuh's kFold).
template <bool kFull, int kNB>
__device__ __forceinline__ void fp8_scores_softmax(const fa__cuda_params &p, const seq_ctx &c, float (&s)[1][kNB][4],
                                                   float (&alpha)[1][2], float (&row_m)[1][2], float (&row_l)[1][2],
                                                   float qk_descale, int64_t r0, int64_t n0, int g, int t) {
  if (!kFull) {
    const float sc = qk_descale * p.scale_log2;
    if (sc > 0.f) {
      fwd_scores<false, true>(p, c, s, r0, n0, g, t);
      fwd_softmax<false, FA__FP8_P_SHIFT, true>(p, c, s, alpha, row_m, row_l, r0, n0, g, t, sc);
      return;
    }
  }
  if (qk_descale != 1.f) {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nb][e] *= qk_descale;
  }
  fwd_scores<kFull>(p, c, s, r0, n0, g, t);
  fwd_softmax<kFull, FA__FP8_P_SHIFT>(p, c, s, alpha, row_m, row_l, r0, n0, g, t);
}

// The two-level P V: once a tile's P V (from zero) is in tmp, o = o * a + tmp
// in f32 on output blocks db0 .. db0 + kDT8 - 1 (a: that tile's alpha).
template <int kDB, int kDT8>
__device__ __forceinline__ void fp8_pv_add(float (&o)[1][kDB][4], const float (&tmp)[1][kDT8][4], int db0,
                                           const float (&a)[2]) {
#pragma unroll
  for (int db = 0; db < kDT8; ++db) {
    float(&od)[4] = o[0][db0 + db];
    od[0] = fmaf(od[0], a[0], tmp[0][db][0]);
    od[1] = fmaf(od[1], a[0], tmp[0][db][1]);
    od[2] = fmaf(od[2], a[1], tmp[0][db][2]);
    od[3] = fmaf(od[3], a[1], tmp[0][db][3]);
  }
}

// The epilogue: o = acc * v_descale / l; the P shift leaves l (and acc)
// 2^shift too large, which the division cancels and m - shift takes out of
// lse; then fwd_tile.cuh's store.
template <typename E, int kDB>
__device__ __forceinline__ void fp8_store(const fa__cuda_params &p, const fwd_block &fb, float (&o)[1][kDB][4],
                                          float (&row_m)[1][2], const float (&row_l)[1][2], int64_t r0, int g, int t) {
  const float vd = fp8_descale(p.v_descale, p.vds, fb.b, fb.kvh);
#pragma unroll
  for (int db = 0; db < kDB; ++db)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][db][e] *= vd;
  row_m[0][0] -= static_cast<float>(FA__FP8_P_SHIFT);
  row_m[0][1] -= static_cast<float>(FA__FP8_P_SHIFT);
  fwd_store<E>(p, fb, o, row_m, row_l, r0, g, t);
}

template <typename E, int kD, int kWG, int kBN, int kSlots, bool kFull, int kPipe, bool kSkip>
__global__ void __launch_bounds__(128 * kWG, 1) fwd_fp8_kernel(const fa__cuda_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using cfg = fwd_fp8_cfg<kD, kWG, kBN, kSlots, kPipe>;
  constexpr int kBM = cfg::kBM, kThreads = cfg::kThreads;
  constexpr int kNB = kBN / 8, kDB = kD / 8, kC = kD / 2;  // kC: a row in 16-bit units (load_tile's)
  constexpr int kDT = kD < 128 ? kD : 128;                 // output dims of one P V temporary
  static_assert(kD % 128 == 0, "Q and K rows are whole 128-byte swizzle atoms");
  static_assert(kBN == FA__FP8_BLOCK_K, "the key tile is the block of the FP8 rule (src/rules/fp8.h)");
  static_assert(kSlots == 2, "K and V load one tile ahead");
  static_assert(!(kPipe && kSkip), "the pipeline visits every tile of the block");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint16_t *sQ = reinterpret_cast<uint16_t *>(smem);                               // [kD / 128][kBM][128 bytes]
  uint16_t *sK = sQ + kBM * kC;                                                    // [kSlots][kD / 128][kBN][128 bytes]
  uint16_t *sV = sK + kSlots * kBN * kC;                                           // [kSlots][kD / 128][kBN][128 bytes]
  unsigned char *sVt = reinterpret_cast<unsigned char *>(sV + kSlots * kBN * kC);  // [kD][kBN]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2;
  fwd_block fb;
  if (!fwd_block_init<kBM, kBN>(p, &fb)) return;
  const seq_ctx &c = fb.c;
  const int64_t m0 = fb.m0, b = fb.b;

  // Byte addresses, read as 16-bit units (rows are 16-byte aligned, strides even).
  const unsigned char *q8 = static_cast<const unsigned char *>(p.q);
  const unsigned char *k8 = static_cast<const unsigned char *>(p.k);
  const unsigned char *v8 = static_cast<const unsigned char *>(p.v);
  const uint16_t *gq =
      reinterpret_cast<const uint16_t *>(q8 + c.seq.bidx * p.qs.b + fb.h * p.qs.h + (c.seq.q_row0 + m0) * p.qs.r);
  const uint16_t *gk =
      reinterpret_cast<const uint16_t *>(k8 + c.seq.bidx * p.ks.b + fb.kvh * p.ks.h + c.seq.k_row0 * p.ks.r);
  const uint16_t *gv =
      reinterpret_cast<const uint16_t *>(v8 + c.seq.bidx * p.vs.b + fb.kvh * p.vs.h + c.seq.k_row0 * p.vs.r);

  const int q_valid = static_cast<int>(c.seq.lq - m0 < kBM ? c.seq.lq - m0 : kBM);
  load_tile<kBM, kC, kThreads, true>(sQ, gq, p.qs.r / 2, q_valid, p.D / 2, p.q, tid);
  auto tile_rows = [&](int it) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    return static_cast<int>(c.seq.lk - n0 < kBN ? c.seq.lk - n0 : kBN);
  };
  auto load_kv = [&](int it, int slot) {
    const int64_t n0 = static_cast<int64_t>(fb.nb_lo + it) * kBN;
    load_tile<kBN, kC, kThreads, true>(sK + slot * kBN * kC, gk + n0 * (p.ks.r / 2), p.ks.r / 2, tile_rows(it), p.D / 2,
                                       p.k, tid);
    load_tile<kBN, kC, kThreads, true>(sV + slot * kBN * kC, gv + n0 * (p.vs.r / 2), p.vs.r / 2, tile_rows(it),
                                       p.Dv / 2, p.v, tid);
  };

  float o[1][kDB][4];
#pragma unroll
  for (int db = 0; db < kDB; ++db) o[0][db][0] = o[0][db][1] = o[0][db][2] = o[0][db][3] = 0.f;
  float row_m[1][2] = {{-INFINITY, -INFINITY}}, row_l[1][2] = {{0.f, 0.f}}, alpha[1][2];
  const int wrow = warp * 16;
  const float qk_descale = fp8_descale(p.q_descale, p.qds, b, fb.kvh) * fp8_descale(p.k_descale, p.kds, b, fb.kvh);

  const uint32_t q_base = smem_addr(sQ) + wg * 64 * 128;
  const uint32_t k_base = smem_addr(sK), vt_base = smem_addr(sVt);
  constexpr uint32_t kSlot = kBN * kD;  // bytes of one K slot

  // V^T buffers: one for the one-tile-at-a-time loop, two for the pipeline
  constexpr int kVtBytes = kD * kBN;
  auto transpose = [&](int it) {
    fp8_transpose_v<kD, kBN, kThreads>(sVt + (kPipe ? (it & 1) * kVtBytes : 0), sV + (it & 1) * kBN * kC, tid);
  };
  float s[1][kNB][4];           // S of a tile, then its P in f32
  uint32_t pa[kBN / 32][4];     // P of the current tile as e4m3 A fragments
  auto s_issue = [&](int it) {  // S = Q K^T of tile it (K in slot it & 1): k32 steps of 32 bytes, 4 to an atom
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) {
      const uint32_t in_atom = (kk & 3) * 32;
      const uint32_t da = sw128_desc_lo(q_base + (kk >> 2) * (kBM * 128) + in_atom, 0);
      const uint32_t dk = sw128_desc_lo(k_base + (it & 1) * kSlot + (kk >> 2) * (kBN * 128) + in_atom, 0);
      wgmma<e4m3_t, kBN>::ss(s[0], da, dk, kk > 0);
    }
    wgmma_commit();
  };
  auto s_softmax = [&](int it) {  // once S of tile it is in: descales, scores, softmax, P in s
    fence_regs(s[0]);
    fp8_scores_softmax<kFull>(p, c, s, alpha, row_m, row_l, qk_descale, m0 + wrow,
                              static_cast<int64_t>(fb.nb_lo + it) * kBN, g, t);
  };
  auto p_to_frags = [&]() {
#pragma unroll
    for (int kk = 0; kk < kBN / 32; ++kk) fp8_p_frag(pa[kk], s[0], kk);
  };
  // P V of tile it into tmp, output dims [half * kDT, (half + 1) * kDT):
  // 32 keys = 32 bytes of every V^T row a step, the first step overwriting
  // tmp (scale-d = 0)
  float tmp[1][kDT / 8][4];
#pragma unroll
  for (int db = 0; db < kDT / 8; ++db) tmp[0][db][0] = tmp[0][db][1] = tmp[0][db][2] = tmp[0][db][3] = 0.f;
  auto pv_issue = [&](int it, int half) {
    const uint32_t vt = vt_base + (kPipe ? (it & 1) * kVtBytes : 0) + half * (kDT * kBN);
#pragma unroll
    for (int kk = 0; kk < kBN / 32; ++kk)
      wgmma<e4m3_t, kDT>::rs(tmp[0], pa[kk], sw128_desc_lo(vt + kk * 32, 0), kk > 0);
    wgmma_commit();
  };
  // once P V is waited for: o = o * a + tmp on those dims (a: the tile's alpha)
  auto pv_add = [&](int half, const float(&a)[2]) {
    fence_regs(tmp[0]);
    fp8_pv_add(o, tmp, half * (kDT / 8), a);
  };
  // cp.async copies (K, V) and st.shared (V^T) of every thread, fenced
  // to the async proxy wgmma reads through, then published to all
  auto publish = [&]() {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
  };

  if constexpr (kPipe) {
    // FlashAttention 3's intra-warpgroup overlap, as fwd_wgmma_kernel.cuh's
    // pipeline: S of tile it + 1 and P V of tile it are issued together; the
    // transpose of V of tile it + 1 (into the other V^T buffer) runs on the
    // CUDA cores while both are on the tensor cores, then the softmax of it
    // + 1 while P V still runs. K / V load a whole iteration ahead.
    if (fb.n_tiles > 0) load_kv(0, 0);
    cp_async_commit();
    if (fb.n_tiles > 1) load_kv(1, 1);
    cp_async_commit();
    if (fb.n_tiles > 0) {
      cp_async_wait<1>();  // tile 0 landed
      fence_proxy_async();
      __syncthreads();
      wgmma_fence();
      s_issue(0);
      transpose(0);
      wgmma_wait<0>();
      s_softmax(0);
      p_to_frags();
    }
    for (int it = 0; it + 1 < fb.n_tiles; ++it) {
      publish();  // K, V of it + 1 and V^T of it; all are done with K of it and V^T of it - 1
      if (it + 2 < fb.n_tiles) load_kv(it + 2, it & 1);
      cp_async_commit();
      // S of it + 1 and P V of it on the tensor cores, the next V^T on the
      // CUDA cores meanwhile, then (kPipe above) the add or the softmax;
      // every wait unconditional, so that ptxas can keep wgmma asynchronous
      wgmma_fence();
      if constexpr (kPipe == 1) {
        pv_issue(it, 0);
        s_issue(it + 1);
        transpose(it + 1);
        wgmma_wait<1>();  // P V of it (the older group) is in; S may still run
        pv_add(0, alpha[0]);
        wgmma_wait<0>();
        s_softmax(it + 1);
      } else {
        s_issue(it + 1);
        pv_issue(it, 0);
        transpose(it + 1);
        wgmma_wait<1>();                                   // S of it + 1 is in; P V may still run
        const float a_pv[2] = {alpha[0][0], alpha[0][1]};  // tile it's, before the softmax of it + 1 moves it
        s_softmax(it + 1);
        wgmma_wait<0>();
        pv_add(0, a_pv);
      }
      p_to_frags();
    }
    if (fb.n_tiles > 0) {
      publish();  // V^T of the last tile
      wgmma_fence();
      pv_issue(fb.n_tiles - 1, 0);
      wgmma_wait<0>();
      pv_add(0, alpha[0]);
    }
  } else {
    int it_lo = 0, it_hi = 0;  // this warpgroup's tiles: [it_lo, it_hi)
    if (kSkip) fwd_wg_tiles<kBN>(fb, m0 + wg * 64, &it_lo, &it_hi);
    if (fb.n_tiles > 0) load_kv(0, 0);
    cp_async_commit();
    for (int it = 0; it < fb.n_tiles; ++it) {
      cp_async_wait<0>();  // K and V of tile it landed (this thread's copies)
      __syncthreads();     // ... everyone's; and all are done with tile it - 1 (its slot, sVt)
      if (it + 1 < fb.n_tiles) load_kv(it + 1, (it + 1) & 1);
      cp_async_commit();
      transpose(it);
      fence_proxy_async();  // K (cp.async) and V^T (st.shared) -> the async proxy
      __syncthreads();
      if (kSkip && (it < it_lo || it >= it_hi)) continue;  // uniform over the warpgroup
      wgmma_fence();
      s_issue(it);
      wgmma_wait<0>();
      s_softmax(it);
      p_to_frags();
#pragma unroll
      for (int half = 0; half < kD / kDT; ++half) {  // D = 256: two halves of 128 dims through one temporary
        wgmma_fence();                               // P's fragments, and tmp read by pv_add
        pv_issue(it, half);
        wgmma_wait<0>();
        pv_add(half, alpha[0]);
      }
    }
  }
  cp_async_wait<0>();
  fp8_store<E>(p, fb, o, row_m, row_l, m0 + wrow, g, t);
#endif
}

}  // namespace fa_cuda

#endif
