/* The decode kernels of kernels.h (dec_scores, dec_softmax, dec_pv) for a
 * vector ISA, written once over a handful of primitives that the including
 * file defines first (kernels_avx512.c through kernels_decode_avx512.h,
 * kernels_avx2.c itself):
 *
 *   DS_W lanes of type DS_V;  DS_PV_MR x DS_PV_NV: the largest P.V tile
 *   dsv_zero, dsv_set1, dsv_fma(a, b, c) = a*b + c, dsv_add, dsv_max
 *   dsv_loadu/dsv_storeu (f32), dsv_ld_bf16/dsv_ld_f16 (DS_W elements to f32)
 *   dsv_load_tail(p, n, fill) / dsv_store_tail(p, v, n): the first n < DS_W lanes
 *   dsv_store_lanes(p, v, first, n): lanes first .. first + n - 1 to p[0 .. n)
 *   dsv_reduce(acc): DS_W vectors to one, lane i = the sum of acc[i]'s lanes
 *   dsv_hsum, dsv_hmax: one vector to a float;  dsv_exp: exp per lane
 *
 * Scores. A dot product q_r . k_j runs along d in DS_W lanes and leaves a
 * vector of partial sums; adding its lanes one vector at a time would cost
 * as much as the products. So a micro-tile is MR query rows x NK keys with
 * MR * NK = DS_W: DS_W accumulators, reduced together by one transpose-add
 * tree (dsv_reduce: about 3 instructions per dot product instead of 8). MR
 * follows nr (1 row: 16 keys per micro-tile; 4 rows: 4 x 4; 16 rows: 16 x
 * 1), so each K element is loaded (and converted) once per block of MR rows,
 * and for nr <= DS_W that is once. Short edges: a missing row or key
 * re-reads the last real one and its result is dropped; d beyond the last
 * whole vector is added per element after the tree.
 *
 * P.V. o rows are the accumulators: an MR x NV-vector tile of O stays in
 * registers across the bc keys (scaled by f[r] as it is loaded), each V
 * row's NV vectors are loaded once and used by MR broadcast FMAs. Columns
 * past the last whole NV group go one vector at a time, then per element.
 *
 * Every loop bound that shapes the arithmetic is a compile-time constant in
 * the instantiations (MR, NK, NV, dtype), so the accumulators live in
 * registers (GCC keeps a runtime-indexed array in memory). */
#ifndef FA_CPU_KERNELS_DECODE_SIMD_H
#define FA_CPU_KERNELS_DECODE_SIMD_H

#include <math.h>
#include <stddef.h>

#include "kernels.h"
#include "kernels_decode.h"
#include "kernels_decode_pf.h"

#define DS_INLINE static inline __attribute__((always_inline))

DS_INLINE DS_V ds_ld(const char *p, const int dt) {
  return dt == FA_F32 ? dsv_loadu((const float *)p) : dt == FA_BF16 ? dsv_ld_bf16(p) : dsv_ld_f16(p);
}

/* Rows [r0, r0 + MR) x all bc keys (rows past nr duplicate row nr - 1). */
DS_INLINE void ds_scores_block(const int MR, const int DT, float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq,
                               int nr, const char *k, ptrdiff_t ldk, int bc, int D, float scale, const char *pf,
                               ptrdiff_t ldpf, int npf, int keep) {
  enum { NK_MAX = DS_W };
  const int NK = DS_W / MR;
  const int es = DT == FA_F32 ? 4 : 2, Dw = D - D % DS_W, rowb = D * es;
  const float *qr[DS_W];
#pragma GCC unroll 16
  for (int rr = 0; rr < MR; ++rr) qr[rr] = q + (ptrdiff_t)(rr < nr ? rr : nr - 1) * ldq;
  for (int j0 = 0; j0 < bc; j0 += NK) {
    const char *kj[NK_MAX];
    const char *pj[NK_MAX]; /* the next tile's rows: prefetched chunk by chunk as kj's are loaded */
    const int npj = pf ? (npf - j0 < NK ? npf - j0 : NK) : 0;
#pragma GCC unroll 16
    for (int jj = 0; jj < NK; ++jj) {
      const int j = j0 + jj < bc ? j0 + jj : bc - 1;
      kj[jj] = k + (ptrdiff_t)j * ldk;
      pj[jj] = jj < npj ? pf + (ptrdiff_t)(j0 + jj) * ldpf : NULL;
    }
    if (Dw < D) /* a row's last part is not a whole vector: prefetch the rows whole */
      for (int jj = 0; jj < npj; ++jj) ds_prefetch_row(pj[jj], rowb, keep);
    DS_V acc[DS_W];
#pragma GCC unroll 16
    for (int t = 0; t < DS_W; ++t) acc[t] = dsv_zero();
    for (int d = 0; d < Dw; d += DS_W) {
#pragma GCC unroll 16
      for (int jj = 0; jj < NK; ++jj) {
        if (jj < npj && (DT == FA_F32 || d % (2 * DS_W) == 0)) ds_pf(pj[jj] + (ptrdiff_t)d * es, keep);
        const DS_V kv = ds_ld(kj[jj] + (ptrdiff_t)d * es, DT);
#pragma GCC unroll 16
        for (int rr = 0; rr < MR; ++rr) acc[rr * NK + jj] = dsv_fma(dsv_loadu(qr[rr] + d), kv, acc[rr * NK + jj]);
      }
    }
    const DS_V red = dsv_mul(dsv_reduce(acc), dsv_set1(scale));
    const int nk = bc - j0 < NK ? bc - j0 : NK, mr = nr < MR ? nr : MR;
    if (Dw == D) { /* lanes rr*NK .. rr*NK + nk - 1 are row rr's scores */
      for (int rr = 0; rr < mr; ++rr) dsv_store_lanes(s + (ptrdiff_t)rr * lds + j0, red, rr * NK, nk);
    } else {
      float t[DS_W];
      dsv_storeu(t, red);
      for (int rr = 0; rr < MR; ++rr)
        for (int jj = 0; jj < NK; ++jj)
          for (int d = Dw; d < D; ++d) t[rr * NK + jj] += scale * qr[rr][d] * fa__dec_elem(kj[jj], (fa_dtype)DT, d);
      for (int rr = 0; rr < mr; ++rr)
        for (int jj = 0; jj < nk; ++jj) s[(ptrdiff_t)rr * lds + j0 + jj] = t[rr * NK + jj];
    }
  }
}

/* The 4-row kernels below (ds_scores_r4, ds_pv_r4) where they paid: on
 * AVX2's 16 registers, where the general forms spilled (Zen 3: 1.17-1.25x
 * the warm call). With AVX-512's 32 the general forms kept up, and the
 * 4-row ones measured no faster on the GPU machine's host Xeon (f32, 2 threads,
 * 0.26-0.29 -> 0.27-0.32 ms, 3 rounds; bench/results/2026-12-07-cpu-decode-
 * zen3-r4.txt): AVX-512 keeps the general forms (on a Zen 4, warm, 1 thread:
 * f32 ~3% faster, bf16 alike; bench/results/2026-12-07-cpu-decode-zen4-
 * tuning.txt section 6). */
#define DS_R4 (DS_W == 8)

/* Four query rows (GQA 32/8's group, the common decode shape) with d in
 * whole vectors: ds_scores_block's micro-tile (4 rows x NK = DS_W / 4
 * keys) without its edge cases, the four rows' q vectors named and the
 * next tile's rows prefetched whole before the products. The general form
 * kept q vectors and loop pointers on the stack (GCC) and ran its loop at
 * about half the FMA rate on Zen 3. Keys past the last whole micro-tile go
 * to ds_scores_block. */
DS_INLINE void ds_scores_r4(const int DT, float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, const char *k,
                            ptrdiff_t ldk, int bc, int D, float scale, const char *pf, ptrdiff_t ldpf, int npf,
                            int keep) {
  enum { NK = DS_W / 4 };
  const int es = DT == FA_F32 ? 4 : 2, rowb = D * es;
  const float *q0 = q, *q1 = q + ldq, *q2 = q + 2 * ldq, *q3 = q + 3 * ldq;
  const int np = pf ? npf : 0;
  int j0 = 0;
  for (; j0 + NK <= bc; j0 += NK) {
    const char *kj = k + (ptrdiff_t)j0 * ldk;
    for (int jj = 0; jj < NK && j0 + jj < np; ++jj) ds_prefetch_row(pf + (ptrdiff_t)(j0 + jj) * ldpf, rowb, keep);
    DS_V acc[DS_W];
#pragma GCC unroll 16
    for (int t = 0; t < DS_W; ++t) acc[t] = dsv_zero();
    for (int d = 0; d < D; d += DS_W) {
      const DS_V a0 = dsv_loadu(q0 + d), a1 = dsv_loadu(q1 + d), a2 = dsv_loadu(q2 + d), a3 = dsv_loadu(q3 + d);
#pragma GCC unroll 4
      for (int jj = 0; jj < NK; ++jj) {
        const DS_V kv = ds_ld(kj + (ptrdiff_t)jj * ldk + (ptrdiff_t)d * es, DT);
        acc[jj] = dsv_fma(a0, kv, acc[jj]);
        acc[NK + jj] = dsv_fma(a1, kv, acc[NK + jj]);
        acc[2 * NK + jj] = dsv_fma(a2, kv, acc[2 * NK + jj]);
        acc[3 * NK + jj] = dsv_fma(a3, kv, acc[3 * NK + jj]);
      }
    }
    dsv_store_rows4(s + j0, lds, dsv_mul(dsv_reduce(acc), dsv_set1(scale)));
  }
  if (j0 < bc)
    ds_scores_block(4, DT, s + j0, lds, q, ldq, 4, k + (ptrdiff_t)j0 * ldk, ldk, bc - j0, D, scale,
                    np > j0 ? pf + (ptrdiff_t)j0 * ldpf : NULL, ldpf, np - j0, keep);
}

DS_INLINE void ds_scores(const int DT, float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const char *k,
                         ptrdiff_t ldk, int bc, int D, float scale, const char *pf, ptrdiff_t ldpf, int npf, int keep) {
  for (int r0 = 0; r0 < nr; r0 += DS_W) {
    const int n = nr - r0 < DS_W ? nr - r0 : DS_W;
    float *sr = s + (ptrdiff_t)r0 * lds;
    const float *qr = q + (ptrdiff_t)r0 * ldq;
    const char *p = r0 == 0 ? pf : NULL; /* prefetch with the first block only */
    if (DS_R4 && n == 4 && D % DS_W == 0)
      ds_scores_r4(DT, sr, lds, qr, ldq, k, ldk, bc, D, scale, p, ldpf, npf, keep);
    else if (n == 1)
      ds_scores_block(1, DT, sr, lds, qr, ldq, n, k, ldk, bc, D, scale, p, ldpf, npf, keep);
    else if (n == 2)
      ds_scores_block(2, DT, sr, lds, qr, ldq, n, k, ldk, bc, D, scale, p, ldpf, npf, keep);
    else if (n <= 4)
      ds_scores_block(4, DT, sr, lds, qr, ldq, n, k, ldk, bc, D, scale, p, ldpf, npf, keep);
    else if (n <= 8)
      ds_scores_block(8, DT, sr, lds, qr, ldq, n, k, ldk, bc, D, scale, p, ldpf, npf, keep);
#if DS_W > 8
    else
      ds_scores_block(16, DT, sr, lds, qr, ldq, n, k, ldk, bc, D, scale, p, ldpf, npf, keep);
#endif
  }
}

static void ds_dec_scores(float *s, ptrdiff_t lds, const float *q, ptrdiff_t ldq, int nr, const void *k, ptrdiff_t ldk,
                          int bc, int D, float scale, fa_dtype kdt, const void *pf, ptrdiff_t ldpf, int npf,
                          int pf_keep) {
  const char *kc = (const char *)k, *pc = (const char *)pf;
  if (kdt == FA_F32)
    ds_scores(FA_F32, s, lds, q, ldq, nr, kc, ldk, bc, D, scale, pc, ldpf, npf, pf_keep);
  else if (kdt == FA_BF16)
    ds_scores(FA_BF16, s, lds, q, ldq, nr, kc, ldk, bc, D, scale, pc, ldpf, npf, pf_keep);
  else
    ds_scores(FA_F16, s, lds, q, ldq, nr, kc, ldk, bc, D, scale, pc, ldpf, npf, pf_keep);
}

static int ds_dec_softmax(float *s, ptrdiff_t lds, int nr, int bc, float *m, float *l, float *f) {
  const DS_V ninf = dsv_set1(-INFINITY);
  const int bw = bc - bc % DS_W, nt = bc - bw;
  int moved = 0;
  for (int r = 0; r < nr; ++r) {
    float *row = s + (ptrdiff_t)r * lds;
    DS_V mx0 = ninf, mx1 = ninf;
    int j = 0;
    for (; j + 2 * DS_W <= bw; j += 2 * DS_W) {
      mx0 = dsv_max(mx0, dsv_loadu(row + j));
      mx1 = dsv_max(mx1, dsv_loadu(row + j + DS_W));
    }
    if (j < bw) mx0 = dsv_max(mx0, dsv_loadu(row + j));
    if (nt) mx1 = dsv_max(mx1, dsv_load_tail(row + bw, nt, -INFINITY));
    const float mx = dsv_hmax(dsv_max(mx0, mx1));
    const float mn = mx > m[r] ? mx : m[r];
    const float mu = mn == -INFINITY ? 0.0f : mn;
    const DS_V vmu = dsv_set1(mu);
    /* the running max mostly stays put after the first tiles: then fr =
     * exp(0) = 1 exactly (dsv_exp(0) is 1), without a vector exp per row */
    float fr = 1.0f;
    if (m[r] != mu) {
      float t[DS_W];
      dsv_storeu(t, dsv_exp(dsv_set1(m[r] - mu)));
      fr = t[0];
    }
    DS_V sum0 = dsv_zero(), sum1 = dsv_zero();
    for (j = 0; j + 2 * DS_W <= bw; j += 2 * DS_W) {
      const DS_V p0 = dsv_exp(dsv_add(dsv_loadu(row + j), dsv_set1(-mu)));
      const DS_V p1 = dsv_exp(dsv_add(dsv_loadu(row + j + DS_W), dsv_set1(-mu)));
      dsv_storeu(row + j, p0);
      dsv_storeu(row + j + DS_W, p1);
      sum0 = dsv_add(sum0, p0);
      sum1 = dsv_add(sum1, p1);
    }
    if (j < bw) {
      const DS_V p0 = dsv_exp(dsv_add(dsv_loadu(row + j), dsv_set1(-mu)));
      dsv_storeu(row + j, p0);
      sum0 = dsv_add(sum0, p0);
    }
    if (nt) {
      const DS_V p1 = dsv_exp(dsv_add(dsv_load_tail(row + bw, nt, -INFINITY), dsv_set1(-mu)));
      dsv_store_tail(row + bw, p1, nt);
      sum1 = dsv_add(sum1, p1);
    }
    (void)vmu;
    l[r] = l[r] * fr + dsv_hsum(dsv_add(sum0, sum1));
    m[r] = mn;
    f[r] = fr;
    moved |= fr != 1.0f;
  }
  return moved;
}

/* o[r][e0 + v*DS_W ..] for r < MR, v < NV over all bc keys. */
DS_INLINE void ds_pv_tile(const int MR, const int NV, const int DT, float *o, ptrdiff_t ldo, const float *f,
                          const float *p, ptrdiff_t ldp, const char *v, ptrdiff_t ldv, int bc, int e0, const char *pf,
                          ptrdiff_t ldpf, int npf, int pfbytes, int keep) {
  const int es = DT == FA_F32 ? 4 : 2;
  DS_V acc[DS_PV_MR][DS_PV_NV];
#pragma GCC unroll 8
  for (int rr = 0; rr < MR; ++rr) {
    const DS_V fr = dsv_set1(f ? f[rr] : 1.0f);
#pragma GCC unroll 8
    for (int vv = 0; vv < NV; ++vv) {
      const DS_V x = dsv_loadu(o + (ptrdiff_t)rr * ldo + e0 + vv * DS_W);
      acc[rr][vv] = f ? dsv_mul(x, fr) : x;
    }
  }
  const char *vj = v + (ptrdiff_t)e0 * es;
  const int np = pf ? (npf < bc ? npf : bc) : 0;
  const char *pj = pf ? pf + (ptrdiff_t)e0 * es : NULL;
  for (int j = 0; j < bc; ++j, vj += ldv) {
    DS_V x[DS_PV_NV];
#pragma GCC unroll 8
    for (int vv = 0; vv < NV; ++vv) {
      /* the same columns of the next tile's row j, a line at a time */
      if (j < np && (DT == FA_F32 || vv % 2 == 0)) ds_pf(pj + (ptrdiff_t)j * ldpf + vv * DS_W * es, keep);
      x[vv] = ds_ld(vj + (ptrdiff_t)vv * DS_W * es, DT);
    }
    if (pfbytes && j < np) ds_prefetch_row(pf + (ptrdiff_t)j * ldpf, pfbytes, keep);
#pragma GCC unroll 8
    for (int rr = 0; rr < MR; ++rr) {
      const DS_V pb = dsv_set1(p[(ptrdiff_t)rr * ldp + j]);
#pragma GCC unroll 8
      for (int vv = 0; vv < NV; ++vv) acc[rr][vv] = dsv_fma(pb, x[vv], acc[rr][vv]);
    }
  }
#pragma GCC unroll 8
  for (int rr = 0; rr < MR; ++rr)
#pragma GCC unroll 8
    for (int vv = 0; vv < NV; ++vv) dsv_storeu(o + (ptrdiff_t)rr * ldo + e0 + vv * DS_W, acc[rr][vv]);
}

/* Rows [0, MR) of o, every column. The first column group prefetches the
 * next tile's whole rows. */
DS_INLINE void ds_pv_rows(const int MR, const int DT, float *o, ptrdiff_t ldo, const float *f, const float *p,
                          ptrdiff_t ldp, const char *v, ptrdiff_t ldv, int bc, int Dv, const char *pf, ptrdiff_t ldpf,
                          int npf, int keep) {
  const int es = DT == FA_F32 ? 4 : 2, G = DS_PV_NV * DS_W, Dw = Dv - Dv % DS_W;
  int e = 0;
  /* each column group prefetches its own columns of the next tile; when
   * the row ends in a partial vector the first group prefetches rows whole */
  int tail = Dw < Dv ? Dv * es : 0;
  for (; e + G <= Dv; e += G) {
    ds_pv_tile(MR, DS_PV_NV, DT, o, ldo, f, p, ldp, v, ldv, bc, e, pf, ldpf, npf, tail, keep);
    tail = 0;
  }
  for (; e + DS_W <= Dv; e += DS_W) {
    ds_pv_tile(MR, 1, DT, o, ldo, f, p, ldp, v, ldv, bc, e, pf, ldpf, npf, tail, keep);
    tail = 0;
  }
  for (; e < Dv; ++e)
    for (int rr = 0; rr < MR; ++rr) {
      float acc = o[(ptrdiff_t)rr * ldo + e] * (f ? f[rr] : 1.0f);
      for (int j = 0; j < bc; ++j)
        acc += p[(ptrdiff_t)rr * ldp + j] * fa__dec_elem(v + (ptrdiff_t)j * ldv, (fa_dtype)DT, e);
      o[(ptrdiff_t)rr * ldo + e] = acc;
    }
}

/* Four rows (as ds_scores_r4) with Dv in whole groups of DS_PV_NV vectors:
 * ds_pv_tile's loop with each row's P named and the prefetching keys in a
 * loop of their own, so that its pointers stay in registers. */
DS_INLINE void ds_pv_r4_body(const int DT, DS_V *c, const float *p0, const float *p1, const float *p2, const float *p3,
                             int j, const char *vj) {
  enum { NV = DS_PV_NV };
  const int es = DT == FA_F32 ? 4 : 2;
  DS_V x[NV];
#pragma GCC unroll 8
  for (int vv = 0; vv < NV; ++vv) x[vv] = ds_ld(vj + (ptrdiff_t)vv * DS_W * es, DT);
  const DS_V b0 = dsv_set1(p0[j]), b1 = dsv_set1(p1[j]), b2 = dsv_set1(p2[j]), b3 = dsv_set1(p3[j]);
#pragma GCC unroll 8
  for (int vv = 0; vv < NV; ++vv) {
    c[vv] = dsv_fma(b0, x[vv], c[vv]);
    c[NV + vv] = dsv_fma(b1, x[vv], c[NV + vv]);
    c[2 * NV + vv] = dsv_fma(b2, x[vv], c[2 * NV + vv]);
    c[3 * NV + vv] = dsv_fma(b3, x[vv], c[3 * NV + vv]);
  }
}

DS_INLINE void ds_pv_r4(const int DT, float *o, ptrdiff_t ldo, const float *f, const float *p, ptrdiff_t ldp,
                        const char *v, ptrdiff_t ldv, int bc, int Dv, const char *pf, ptrdiff_t ldpf, int npf,
                        int keep) {
  enum { NV = DS_PV_NV, G = DS_PV_NV * DS_W };
  const int es = DT == FA_F32 ? 4 : 2, np = pf ? (npf < bc ? npf : bc) : 0;
  const float *p0 = p, *p1 = p + ldp, *p2 = p + 2 * ldp, *p3 = p + 3 * ldp;
  for (int e = 0; e < Dv; e += G) {
    DS_V c[4 * NV];
#pragma GCC unroll 16
    for (int t = 0; t < 4 * NV; ++t) {
      const DS_V x = dsv_loadu(o + (ptrdiff_t)(t / NV) * ldo + e + (t % NV) * DS_W);
      c[t] = f ? dsv_mul(x, dsv_set1(f[t / NV])) : x;
    }
    const char *vj = v + (ptrdiff_t)e * es, *pj = np ? pf + (ptrdiff_t)e * es : NULL;
    int j = 0;
    for (; j < np; ++j, vj += ldv, pj += ldpf) { /* the same columns of the next tile's row j */
      for (int b = 0; b < G * es; b += 64) ds_pf(pj + b, keep);
      ds_pv_r4_body(DT, c, p0, p1, p2, p3, j, vj);
    }
    for (; j < bc; ++j, vj += ldv) ds_pv_r4_body(DT, c, p0, p1, p2, p3, j, vj);
#pragma GCC unroll 16
    for (int t = 0; t < 4 * NV; ++t) dsv_storeu(o + (ptrdiff_t)(t / NV) * ldo + e + (t % NV) * DS_W, c[t]);
  }
}

DS_INLINE void ds_pv(const int DT, float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp,
                     const char *v, ptrdiff_t ldv, int bc, int Dv, const char *pf, ptrdiff_t ldpf, int npf, int keep) {
  const int nb = (nr + DS_PV_MR - 1) / DS_PV_MR, mr = (nr + nb - 1) / nb; /* balanced row blocks */
  for (int r0 = 0; r0 < nr; r0 += mr) {
    const int n = nr - r0 < mr ? nr - r0 : mr;
    float *orow = o + (ptrdiff_t)r0 * ldo;
    const float *fr = f ? f + r0 : NULL, *pr = p + (ptrdiff_t)r0 * ldp;
    const char *pp = r0 == 0 ? pf : NULL;
    switch (n) {
      case 1: ds_pv_rows(1, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep); break;
      case 2: ds_pv_rows(2, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep); break;
      case 3: ds_pv_rows(3, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep); break;
#if DS_PV_MR > 3
      case 4:
        if (DS_R4 && Dv % (DS_PV_NV * DS_W) == 0)
          ds_pv_r4(DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep);
        else
          ds_pv_rows(4, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep);
        break;
#endif
#if DS_PV_MR > 4
      case 5: ds_pv_rows(5, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep); break;
      case 6: ds_pv_rows(6, DT, orow, ldo, fr, pr, ldp, v, ldv, bc, Dv, pp, ldpf, npf, keep); break;
#endif
      default: break;
    }
  }
}

static void ds_dec_pv(float *o, ptrdiff_t ldo, int nr, const float *f, const float *p, ptrdiff_t ldp, const void *v,
                      ptrdiff_t ldv, int bc, int Dv, fa_dtype vdt, const void *pf, ptrdiff_t ldpf, int npf,
                      int pf_keep) {
  const char *vc = (const char *)v, *pc = (const char *)pf;
  if (vdt == FA_F32)
    ds_pv(FA_F32, o, ldo, nr, f, p, ldp, vc, ldv, bc, Dv, pc, ldpf, npf, pf_keep);
  else if (vdt == FA_BF16)
    ds_pv(FA_BF16, o, ldo, nr, f, p, ldp, vc, ldv, bc, Dv, pc, ldpf, npf, pf_keep);
  else
    ds_pv(FA_F16, o, ldo, nr, f, p, ldp, vc, ldv, bc, Dv, pc, ldpf, npf, pf_keep);
}

#endif
