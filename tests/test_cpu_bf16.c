/* The bf16 products of the cpu backend (kernels.h: gemm_bf16 and the pair
 * packers; cpu_bf16.c) under every ISA that has them (avx512bf16, and amx:
 * its block kernel on AMX tiles), held to exact arithmetic, and the forward
 * and backward that run on them held to ref on tails:
 * L, D and Dv no multiple of the tiles or of the pairs, odd key tiles,
 * strided and non-contiguous layouts, GQA, causal, window, softcap, ALiBi,
 * dropout. The bound for O is the rule of docs/semantics.md: P rounded to
 * bf16 moves O by at most 2^-9 max|v| (/(1-p) with dropout), O's own
 * rounding by 2^-9 |O|; LSE sums the unrounded P in f32. The gradients
 * (P and dS rounded to bf16 for their products) within 2% of their largest
 * magnitude, and 2^-8 of each element for the output rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_bf16.h"
#include "cpu/cpu_isa.h"
#include "rules/half.h"
#include "support/cm.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(void) { /* [-1, 1) */
  return (double)(next() >> 11) * 0x1p-52 - 1.0;
}

static uint16_t rand_bf16(void) {
  return fa__f32_to_bf16((float)(2.0 * uniform()));
}

/* NULL (the test skips, saying why) when this CPU or build lacks isa. */
static const fa__cpu_kernels *bf16_table(fa_cpu_isa isa) {
  if (!fa__cpu_isa_have(isa)) {
    print_message("skipped: ISA %s is not on this CPU or in this build\n", fa_cpu_isa_name(isa));
    return NULL;
  }
  const fa__cpu_kernels *kt = fa__cpu_kernels_get(isa);
  assert_int_equal(kt->isa, isa);
  assert_non_null(kt->gemm_bf16);
  if (isa == FA_ISA_AMX) assert_non_null(kt->gemm_bf16_block);
  return kt;
}

enum { GUARD = 16 };
static const float SENT = -12345.0f;

/* One product of fa__cpu_gemm_bf16 against exact products summed in
 * double. layout of A: 0 rows of pairs (csa = 2), 1 a pair panel read
 * across (rsa = 2, as P.V and dV/dK pass it), 2 pairs 4 elements apart
 * with odd row strides. mode: 0 plain, 1 alpha, 2 alpha and accumulate,
 * 3 accumulate without alpha (amx: C tiles loaded from C and stored back). */
static void check_gemm(const fa__cpu_kernels *kt, int m, int n, int kp, int layout, int mode) {
  ptrdiff_t rsa = 2 * kp + 3, csa = 2;
  if (layout == 1) rsa = 2, csa = 2 * (ptrdiff_t)(m + 3);
  if (layout == 2) rsa = 4 * (ptrdiff_t)kp + 5, csa = 4;
  const ptrdiff_t na = (m - 1) * rsa + (kp > 0 ? (kp - 1) * csa : 0) + 2 + 1;
  const ptrdiff_t ldb = n + 5, ldc = n + GUARD;
  const float alpha = mode == 1 || mode == 2 ? 0.3f : 1.0f;
  uint16_t *a = malloc(sizeof(uint16_t) * (size_t)na);
  uint32_t *b = malloc(sizeof(uint32_t) * (size_t)(kp * ldb + 1));
  float *c = malloc(sizeof(float) * (size_t)((m + 1) * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
  for (ptrdiff_t t = 0; t < na; ++t) a[t] = rand_bf16();
  for (ptrdiff_t t = 0; t < kp * ldb + 1; ++t) b[t] = (uint32_t)rand_bf16() | (uint32_t)rand_bf16() << 16;
  for (ptrdiff_t t = 0; t < (m + 1) * ldc; ++t) c[t] = t < m * ldc && (t % ldc) < n ? (float)uniform() : SENT;
  memcpy(c0, c, sizeof(float) * (size_t)(m * ldc));
  fa__cpu_gemm_bf16(kt, m, n, kp, a, rsa, csa, b, ldb, alpha, c, ldc, mode >= 2);
  for (int i = 0; i < m; ++i)
    for (int x = 0; x < n; ++x) {
      double sum = 0, mag = 0;
      for (int k = 0; k < kp; ++k)
        for (int h = 0; h < 2; ++h) {
          const double t = (double)fa__bf16_to_f32(a[i * rsa + k * csa + h]) *
                           (double)fa__bf16_to_f32((uint16_t)(b[k * ldb + x] >> (16 * h)));
          sum += t;
          mag += fabs(t);
        }
      const double want = (mode >= 2 ? c0[i * ldc + x] : 0.0) + alpha * sum;
      const double tol = (2.0 * kp + 4) * 0x1p-24 * (mag + fabs(want));
      const double got = c[i * ldc + x];
      if (!(fabs(got - want) <= tol))
        fail_msg("%s gemm_bf16 m=%d n=%d kp=%d layout %d mode %d: C[%d][%d] = %.9g, exact %.9g (tol %.3g)",
                 fa_cpu_isa_name(kt->isa), m, n, kp, layout, mode, i, x, got, want, tol);
    }
  for (int i = 0; i <= m; ++i)
    for (int x = i < m ? n : 0; x < ldc; ++x)
      if (c[i * ldc + x] != SENT)
        fail_msg("%s gemm_bf16 m=%d n=%d kp=%d layout %d: wrote C[%d][%d]", fa_cpu_isa_name(kt->isa), m, n, kp, layout,
                 i, x);
  free(a), free(b), free(c), free(c0);
}

/* avx512bf16: every micro-tile shape, partial strips, kp = 0 and odd. */
static void test_gemm(void **state) {
  (void)state;
  const fa__cpu_kernels *kt = bf16_table(FA_ISA_AVX512BF16);
  if (!kt) skip();
  static const int ms[] = {1, 2, 5, 7, 8, 9, 13, 17}, ns[] = {16, 32, 48, 64, 80, 96, 144},
                   kps[] = {0, 1, 2, 5, 32, 33};
  for (size_t im = 0; im < sizeof ms / sizeof *ms; ++im)
    for (size_t in = 0; in < sizeof ns / sizeof *ns; ++in)
      for (size_t ik = 0; ik < sizeof kps / sizeof *kps; ++ik)
        for (int layout = 0; layout < 3; ++layout)
          for (int mode = 0; mode < 3; ++mode) check_gemm(kt, ms[im], ns[in], kps[ik], layout, mode);
}

/* amx: partial and whole tiles and 2 x 2 blocks in rows (m around 16 and
 * 32) and columns (n 16, 32, 48), partial pair steps (kp around 16), every
 * layout of A. */
static void test_gemm_amx(void **state) {
  (void)state;
  const fa__cpu_kernels *kt = bf16_table(FA_ISA_AMX);
  if (!kt) skip();
  static const int ms[] = {1, 5, 15, 16, 17, 31, 32, 33, 48, 70}, ns[] = {16, 32, 48, 64, 80, 144},
                   kps[] = {0, 1, 2, 15, 16, 17, 32, 33, 64, 70};
  for (size_t im = 0; im < sizeof ms / sizeof *ms; ++im)
    for (size_t in = 0; in < sizeof ns / sizeof *ns; ++in)
      for (size_t ik = 0; ik < sizeof kps / sizeof *kps; ++ik)
        for (int layout = 0; layout < 3; ++layout)
          for (int mode = 0; mode < 4; ++mode) check_gemm(kt, ms[im], ns[in], kps[ik], layout, mode);
}

/* amx's transposed pair packer (V, dO and Q as rows of pairs) against its
 * definition, bit for bit: odd rows, partial 16 x 16 blocks, nothing
 * written past ceil(rows/2) in a row or past cols rows. */
static void test_pack_t_amx(void **state) {
  (void)state;
  const fa__cpu_kernels *kt = bf16_table(FA_ISA_AMX);
  if (!kt) skip();
  assert_non_null(kt->pair_pack_bf16_t);
  static const int rows_[] = {1, 2, 3, 31, 32, 33, 64, 77}, cols_[] = {1, 15, 16, 17, 33, 64};
  for (size_t ir = 0; ir < sizeof rows_ / sizeof *rows_; ++ir)
    for (size_t ic = 0; ic < sizeof cols_ / sizeof *cols_; ++ic) {
      const int rows = rows_[ir], cols = cols_[ic], kp = (rows + 1) / 2;
      const ptrdiff_t ldx = cols + 7, ldd = kp + GUARD;
      uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(rows * ldx));
      uint32_t *d = malloc(sizeof(uint32_t) * (size_t)((cols + 1) * ldd));
      for (ptrdiff_t t = 0; t < rows * ldx; ++t) x[t] = rand_bf16();
      for (ptrdiff_t t = 0; t < (cols + 1) * ldd; ++t) d[t] = 0xdeadbeefu;
      kt->pair_pack_bf16_t(d, ldd, x, ldx, rows, cols);
      for (int c = 0; c <= cols; ++c)
        for (int k = 0; k < ldd; ++k) {
          uint32_t want = 0xdeadbeefu;
          if (c < cols && k < kp) {
            const uint16_t lo = x[2 * k * ldx + c], hi = 2 * k + 1 < rows ? x[(2 * k + 1) * ldx + c] : 0;
            want = (uint32_t)lo | (uint32_t)hi << 16;
          }
          if (d[c * ldd + k] != want)
            fail_msg("pair_pack_bf16_t rows=%d cols=%d: dst[%d][%d] = 0x%08x, want 0x%08x", rows, cols, c, k,
                     (unsigned)d[c * ldd + k], (unsigned)want);
        }
      free(x), free(d);
    }
}

/* The pair packers against their definitions, bit for bit, odd rows and
 * columns, nothing written past cols. */
static void test_pack(void **state) {
  (void)state;
  const fa__cpu_kernels *kt = bf16_table(FA_ISA_AVX512BF16);
  if (!kt) skip();
  static const int rows_[] = {1, 2, 3, 7, 8, 24, 25}, cols_[] = {1, 15, 16, 17, 33, 48};
  for (size_t ir = 0; ir < sizeof rows_ / sizeof *rows_; ++ir)
    for (size_t ic = 0; ic < sizeof cols_ / sizeof *cols_; ++ic) {
      const int rows = rows_[ir], cols = cols_[ic], kp = (rows + 1) / 2;
      const ptrdiff_t ldx = cols + 7, ldd = cols + GUARD;
      uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(rows * ldx));
      float *xf = malloc(sizeof(float) * (size_t)(rows * ldx));
      uint32_t *d = malloc(sizeof(uint32_t) * (size_t)(kp * ldd));
      for (ptrdiff_t t = 0; t < rows * ldx; ++t) {
        x[t] = rand_bf16();
        xf[t] = (float)(uniform() * 1e3);
      }
      xf[0] = INFINITY;
      if (rows * ldx > 5) xf[5] = -0.0f;
      for (int f32 = 0; f32 < 2; ++f32) {
        if (f32 && cols % FA_CPU_PANEL) continue; /* pack_f32 takes whole panels */
        for (ptrdiff_t t = 0; t < kp * ldd; ++t) d[t] = 0xdeadbeefu;
        if (f32)
          kt->pair_pack_f32(d, ldd, xf, ldx, rows, cols);
        else
          kt->pair_pack_bf16(d, ldd, x, ldx, rows, cols);
        for (int k = 0; k < kp; ++k)
          for (int c = 0; c < ldd; ++c) {
            uint32_t want = 0xdeadbeefu;
            if (c < cols) {
              uint16_t lo, hi = 0;
              lo = f32 ? fa__f32_to_bf16(xf[2 * k * ldx + c]) : x[2 * k * ldx + c];
              if (2 * k + 1 < rows) hi = f32 ? fa__f32_to_bf16(xf[(2 * k + 1) * ldx + c]) : x[(2 * k + 1) * ldx + c];
              want = (uint32_t)lo | (uint32_t)hi << 16;
            }
            if (d[k * ldd + c] != want)
              fail_msg("pair_pack_%s rows=%d cols=%d: dst[%d][%d] = 0x%08x, want 0x%08x", f32 ? "f32" : "bf16", rows,
                       cols, k, c, (unsigned)d[k * ldd + c], (unsigned)want);
          }
      }
      free(x), free(xf), free(d);
    }
}

/* ---- the forward on tails, against ref ---------------------------------------- */

typedef struct fwd_case {
  const char *name;
  int64_t B, Hq, Hkv, Lq, Lk, D, Dv;
  int bq, bk;
  int blhd;       /* [B, L, H, D] memory (strides) instead of [B, H, L, D] */
  int spread;     /* K and V columns 2 elements apart (not contiguous) */
  int causal, br; /* causal, bottom-right */
  int64_t wl, wr; /* window (use_window when wl or wr >= 0) */
  double softcap, dropout;
  int alibi;
} fwd_case;

static const fwd_case g_cases[] = {
    {"odd_D_tails", 2, 4, 2, 77, 93, 37, 21, 16, 24, 0, 0, 0, 0, -1, -1, 0, 0, 0},
    {"even_D_in_place", 1, 2, 1, 45, 131, 64, 64, 32, 48, 0, 0, 0, 0, -1, -1, 0, 0, 0},
    {"blhd_causal_br", 2, 6, 3, 50, 71, 40, 24, 16, 16, 1, 0, 1, 1, -1, -1, 0, 0, 0},
    {"spread_softcap_alibi", 1, 4, 4, 33, 57, 18, 35, 16, 8, 0, 1, 0, 0, -1, -1, 15.0, 0, 1},
    {"window_dropout", 2, 2, 1, 64, 64, 24, 24, 0, 0, 0, 0, 0, 0, 9, 3, 0, 0.2, 0},
    {"D1_Lk1", 1, 2, 2, 5, 1, 1, 3, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0},
    /* AMX blocks: rows and columns past 32, pair steps past 16, default tiles */
    {"blocks_past_32", 1, 3, 1, 130, 203, 96, 72, 0, 0, 0, 0, 1, 0, -1, -1, 0, 0, 0},
};

/* Shape [B, H, L, C] tensor of dtype dt over memory of `spread` elements a
 * column, in BHLC or BLHC order. */
static fa_tensor make_t(void *data, fa_dtype dt, int64_t B, int64_t H, int64_t L, int64_t C, int blhd, int spread) {
  fa_tensor t = fa_tensor_contiguous(data, dt, B, H, L, C);
  const int64_t s = spread ? 2 : 1;
  if (blhd) {
    t.stride[3] = s, t.stride[2] = H * C * s, t.stride[1] = C * s, t.stride[0] = L * H * C * s;
  } else {
    t.stride[3] = s, t.stride[2] = C * s, t.stride[1] = L * C * s, t.stride[0] = H * L * C * s;
  }
  return t;
}

static int g_differs; /* some case's bits differ between the bf16 ISA and avx512 */

static void run_case(const fwd_case *fc, fa_cpu_isa isa) {
  const int64_t nq = fc->B * fc->Hq * fc->Lq * fc->D, nk = fc->B * fc->Hkv * fc->Lk * fc->D,
                nv = fc->B * fc->Hkv * fc->Lk * fc->Dv, no = fc->B * fc->Hq * fc->Lq * fc->Dv,
                nl = fc->B * fc->Hq * fc->Lq;
  const int sp = fc->spread ? 2 : 1;
  uint16_t *q16 = calloc((size_t)nq, 2), *k16 = calloc((size_t)(nk * sp), 2), *v16 = calloc((size_t)(nv * sp), 2);
  uint16_t *o16 = calloc((size_t)no, 2), *o16b = calloc((size_t)no, 2);
  double *q64 = calloc((size_t)nq, 8), *k64 = calloc((size_t)(nk * sp), 8), *v64 = calloc((size_t)(nv * sp), 8);
  double *o64 = calloc((size_t)no, 8), *l64 = calloc((size_t)nl, 8);
  float *lse = calloc((size_t)nl, 4), *lseb = calloc((size_t)nl, 4), *slopes = calloc((size_t)fc->Hq, 4);
  double vmax = 0;
  for (int64_t t = 0; t < nq; ++t) q64[t] = fa__bf16_to_f32(q16[t] = rand_bf16());
  for (int64_t t = 0; t < nk * sp; ++t) k64[t] = fa__bf16_to_f32(k16[t] = rand_bf16());
  for (int64_t t = 0; t < nv * sp; ++t) {
    v64[t] = fa__bf16_to_f32(v16[t] = rand_bf16());
    vmax = fmax(vmax, fabs(v64[t]));
  }
  for (int64_t h = 0; h < fc->Hq; ++h) slopes[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)fc->Hq);

  fa_options opt;
  fa_options_init(&opt);
  opt.causal = fc->causal;
  opt.align = fc->br ? FA_ALIGN_BOTTOM_RIGHT : FA_ALIGN_TOP_LEFT;
  if (fc->wl >= 0 || fc->wr >= 0) opt.use_window = 1, opt.window_left = fc->wl, opt.window_right = fc->wr;
  opt.softcap = fc->softcap;
  opt.dropout_p = fc->dropout;
  opt.dropout_seed = 0x1234;
  opt.alibi_slopes = fc->alibi ? slopes : NULL;
  opt.block_q = fc->bq;
  opt.block_k = fc->bk;

  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  { /* ref in float64 on the same values */
    fa_tensor Q = make_t(q64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              K = make_t(k64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              V = make_t(v64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              O = make_t(o64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              L = fa_tensor_contiguous(l64, FA_F64, fc->B, fc->Hq, fc->Lq, 1);
    if (fa_forward(ctx, FA_BACKEND_REF, &Q, &K, &V, &opt, &O, &L) != FA_OK)
      fail_msg("%s: ref: %s", fc->name, fa_context_last_error(ctx));
  }
  for (int pass = 0; pass < 2; ++pass) { /* the bf16 ISA, then avx512 (f32 products) for contrast */
    assert_int_equal(fa_context_set_cpu_isa(ctx, pass == 0 ? isa : FA_ISA_AVX512), FA_OK);
    fa_tensor Q = make_t(q16, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              K = make_t(k16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              V = make_t(v16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              O = make_t(pass == 0 ? o16 : o16b, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              L = fa_tensor_contiguous(pass == 0 ? lse : lseb, FA_F32, fc->B, fc->Hq, fc->Lq, 1);
    if (fa_forward(ctx, FA_BACKEND_CPU, &Q, &K, &V, &opt, &O, &L) != FA_OK)
      fail_msg("%s: cpu: %s", fc->name, fa_context_last_error(ctx));
    const char *names = isa == FA_ISA_AMX ? "tdpbf16ps" : "vdpbf16ps";
    if (pass == 0 && !strstr(fa_context_dispatch_report(ctx), names))
      fail_msg("%s: the dispatch report does not name %s:\n%s", fc->name, names, fa_context_dispatch_report(ctx));
  }
  { /* the backward on the bf16 kernels (from the bf16 ISA's O and LSE) against ref's gradients */
    uint16_t *do16 = calloc((size_t)no, 2), *dq16 = calloc((size_t)nq, 2), *dk16 = calloc((size_t)(nk * sp), 2),
             *dv16 = calloc((size_t)(nv * sp), 2);
    double *do64 = calloc((size_t)no, 8), *dq64 = calloc((size_t)nq, 8), *dk64 = calloc((size_t)(nk * sp), 8),
           *dv64 = calloc((size_t)(nv * sp), 8);
    for (int64_t t = 0; t < no; ++t) do64[t] = fa__bf16_to_f32(do16[t] = rand_bf16());
    fa_tensor Q = make_t(q64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              K = make_t(k64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              V = make_t(v64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              O = make_t(o64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              dO = make_t(do64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              dQ = make_t(dq64, FA_F64, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              dK = make_t(dk64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              dV = make_t(dv64, FA_F64, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              L = fa_tensor_contiguous(l64, FA_F64, fc->B, fc->Hq, fc->Lq, 1);
    if (fa_backward(ctx, FA_BACKEND_REF, &Q, &K, &V, &O, &dO, &L, &opt, &dQ, &dK, &dV, NULL) != FA_OK)
      fail_msg("%s: ref backward: %s", fc->name, fa_context_last_error(ctx));
    assert_int_equal(fa_context_set_cpu_isa(ctx, isa), FA_OK);
    fa_tensor Qb = make_t(q16, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              Kb = make_t(k16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              Vb = make_t(v16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              Ob = make_t(o16, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              dOb = make_t(do16, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->Dv, fc->blhd, 0),
              dQb = make_t(dq16, FA_BF16, fc->B, fc->Hq, fc->Lq, fc->D, fc->blhd, 0),
              dKb = make_t(dk16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->D, fc->blhd, fc->spread),
              dVb = make_t(dv16, FA_BF16, fc->B, fc->Hkv, fc->Lk, fc->Dv, fc->blhd, fc->spread),
              Lb = fa_tensor_contiguous(lse, FA_F32, fc->B, fc->Hq, fc->Lq, 1);
    if (fa_backward(ctx, FA_BACKEND_CPU, &Qb, &Kb, &Vb, &Ob, &dOb, &Lb, &opt, &dQb, &dKb, &dVb, NULL) != FA_OK)
      fail_msg("%s: cpu backward: %s", fc->name, fa_context_last_error(ctx));
    const struct {
      const char *name;
      const uint16_t *x;
      const double *r;
      int64_t n;
    } g[] = {{"dQ", dq16, dq64, nq}, {"dK", dk16, dk64, nk * sp}, {"dV", dv16, dv64, nv * sp}};
    for (int k = 0; k < 3; ++k) { /* the spread layouts' gaps are 0 on both sides */
      double rmax = 0;
      for (int64_t t = 0; t < g[k].n; ++t) rmax = fmax(rmax, fabs(g[k].r[t]));
      for (int64_t t = 0; t < g[k].n; ++t) {
        const double got = fa__bf16_to_f32(g[k].x[t]), tol = 2e-2 * rmax + 0x1p-8 * fabs(g[k].r[t]) + 1e-6;
        if (!(fabs(got - g[k].r[t]) <= tol))
          fail_msg("%s: %s[%lld] = %.7g, ref %.7g (tol %.3g)", fc->name, g[k].name, (long long)t, got, g[k].r[t], tol);
      }
    }
    free(do16), free(dq16), free(dk16), free(dv16), free(do64), free(dq64), free(dk64), free(dv64);
  }
  fa_context_destroy(ctx);

  const double pscale = fc->dropout > 0 ? 1.0 / (1.0 - fc->dropout) : 1.0;
  int differs = 0;
  for (int64_t t = 0; t < no; ++t) { /* same memory order for both (same strides) */
    const double r = o64[t], got = fa__bf16_to_f32(o16[t]);
    const double tol = 0x1p-9 * vmax * pscale + 0x1p-8 * fabs(r) + 1e-4 * vmax * pscale;
    if (!(fabs(got - r) <= tol))
      fail_msg("%s: O[%lld] = %.7g, ref %.7g (tol %.3g)", fc->name, (long long)t, got, r, tol);
    differs |= o16[t] != o16b[t];
  }
  for (int64_t t = 0; t < nl; ++t) {
    const double r = l64[t];
    if (isinf(r)) {
      if (lse[t] != (float)r) fail_msg("%s: LSE[%lld] = %g, ref %g", fc->name, (long long)t, (double)lse[t], r);
      continue;
    }
    if (!(fabs(lse[t] - r) <= 1e-4 * (1 + fabs(r))))
      fail_msg("%s: LSE[%lld] = %.7g, ref %.7g", fc->name, (long long)t, (double)lse[t], r);
    differs |= lse[t] != lseb[t];
  }
  g_differs |= differs;
  free(q16), free(k16), free(v16), free(o16), free(o16b), free(q64), free(k64), free(v64), free(o64), free(l64);
  free(lse), free(lseb), free(slopes);
}

static void forward_tails(fa_cpu_isa isa) {
  if (!bf16_table(isa)) skip();
  g_differs = 0;
  for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; ++i) run_case(&g_cases[i], isa);
  if (!g_differs) fail_msg("%s gave the bits of avx512 everywhere: did the bf16 kernels run?", fa_cpu_isa_name(isa));
}

static void test_forward_tails(void **state) {
  (void)state;
  forward_tails(FA_ISA_AVX512BF16);
}

/* The same cases on AMX tiles: the same rule, so the same bounds (the
 * products' sums differ from avx512bf16's in order only). */
static void test_forward_tails_amx(void **state) {
  (void)state;
  forward_tails(FA_ISA_AMX);
}

/* Asked for where the CPU lacks it, amx is an error that says so, never
 * another ISA in its place (FLASHATTN_ISA=amx too). */
static void test_amx_absent_is_an_error(void **state) {
  (void)state;
  if (fa__cpu_isa_have(FA_ISA_AMX)) {
    print_message("skipped: this CPU has amx\n");
    skip();
  }
  assert_int_equal(fa_cpu_isa_supported(FA_ISA_AMX), 0);
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  uint16_t q[2 * 8] = {0}, k[3 * 8] = {0}, v[3 * 8] = {0}, o[2 * 8];
  float lse[2];
  fa_tensor Q = fa_tensor_contiguous(q, FA_BF16, 1, 1, 2, 8), K = fa_tensor_contiguous(k, FA_BF16, 1, 1, 3, 8),
            V = fa_tensor_contiguous(v, FA_BF16, 1, 1, 3, 8), O = fa_tensor_contiguous(o, FA_BF16, 1, 1, 2, 8),
            L = fa_tensor_contiguous(lse, FA_F32, 1, 1, 2, 1);
  const fa_status st = fa_context_set_cpu_isa(ctx, FA_ISA_AMX);
  if (st == FA_OK) {
    assert_int_equal(fa_forward(ctx, FA_BACKEND_CPU, &Q, &K, &V, NULL, &O, &L), FA_ERR_UNSUPPORTED);
    if (!strstr(fa_context_last_error(ctx), "amx"))
      fail_msg("the error does not name amx: %s", fa_context_last_error(ctx));
  }
  assert_int_equal(fa_context_set_cpu_isa(ctx, FA_ISA_AUTO), FA_OK);
  setenv("FLASHATTN_ISA", "amx", 1);
  assert_int_equal(fa_forward(ctx, FA_BACKEND_CPU, &Q, &K, &V, NULL, &O, &L), FA_ERR_UNSUPPORTED);
  const char *msg = fa_context_last_error(ctx);
  if (!strstr(msg, "FLASHATTN_ISA=amx") || !strstr(msg, "but "))
    fail_msg("FLASHATTN_ISA=amx without AMX: the error does not say so: %s", msg);
  unsetenv("FLASHATTN_ISA");
  fa_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_pack),
      cmocka_unit_test(test_forward_tails),
      cmocka_unit_test(test_gemm_amx),
      cmocka_unit_test(test_pack_t_amx),
      cmocka_unit_test(test_forward_tails_amx),
      cmocka_unit_test(test_amx_absent_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
