/* AMX-BF16 kernels: the bf16 products on tdpbf16ps, which adds a 16 x 16
 * tile of f32 (C) the products of a 16-row tile of bf16 pairs (A: 16 pairs
 * = 64 bytes a row) with a tile of 16 rows of pair words (B: row k holds
 * the pairs (2k, 2k+1) of 16 columns: the pair panels of cpu_bf16.h as
 * they are). One instruction is 16 x 16 x 32 multiply-adds.
 *
 * The block kernel (kernels.h, gemm_bf16_block) takes a whole product:
 * rows in blocks of 32 (two A tiles), columns in blocks of 32 (two B
 * tiles), four C tiles in tmm0-3 for a 2 x 2 block, A in tmm4-5, B in
 * tmm6-7. Every tile is configured 16 rows x 64 bytes; tails are zero
 * padding in per-thread buffers, never a shorter tile:
 *   - A is packed per block of 32 rows into a buffer of 32 x kpp pair
 *     words (kpp = kp rounded up to 16), zeros past kp and past m, from
 *     rows of pairs (csa = 2: a copy) or from a pair panel read across
 *     (rsa = 2: the P.V and dV/dK products, 16 x 16 transposes);
 *   - B is loaded from the caller's panel for whole 16-pair steps; the
 *     last partial step comes from a copy with zero rows (a tile load
 *     reads 16 rows: past kp the panel may end, or hold NaN);
 *   - C goes through a 4 KiB buffer: alpha and accumulate are applied
 *     there as the avx512bf16 micro-kernel does (sum * alpha, then + C).
 * The tile configuration is per thread state: each call loads it first
 * and releases the tiles last (or, between tiles_hold(1) and (0), one work
 * item of the forward or backward does), so OpenMP workers and other AMX
 * users in the process (PyTorch) never see ours.
 *
 * Compiled with -mamx-tile -mamx-bf16 and AVX-512 (packing, the C epilogue);
 * only called when the CPU has AMX-BF16 and Linux granted the tile data
 * (fa__cpu_amx_usable). With FA_AMX_EMULATE (a development build option)
 * the tile instructions are C functions that follow the ISA's pseudo-code
 * and check the tile shapes, so the loops around them run and are tested
 * on CPUs without AMX. */
#define _GNU_SOURCE /* syscall */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "amx_tiles.h"
#include "kernels.h"

#define FA_INLINE static inline __attribute__((always_inline))

typedef fa__amx_cfg amx_cfg;

/* Constant (GCC's _tile_loadconfig tells the compiler it reads 8 bytes:
 * the rest must not be stores the compiler may think dead). */
static const amx_cfg g_cfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0}, {16, 16, 16, 16, 16, 16, 16, 16}};

#ifdef FA_AMX_EMULATE
/* The tile instructions as the ISA reference writes them, on a per-thread
 * register file; a shape the hardware would fault on aborts. */
static _Thread_local struct {
  int configured;
  amx_cfg cfg;
  uint8_t t[8][16][64];
} g_emu;

static void emu_check(int ok) {
  if (!ok) abort();
}
static void emu_loadcfg(const void *p) {
  memcpy(&g_emu.cfg, p, sizeof g_emu.cfg);
  emu_check(g_emu.cfg.palette == 1);
  for (int t = 0; t < 8; ++t) emu_check(g_emu.cfg.rows[t] <= 16 && g_emu.cfg.colsb[t] <= 64);
  memset(g_emu.t, 0, sizeof g_emu.t);
  g_emu.configured = 1;
}
static void emu_release(void) {
  memset(g_emu.t, 0, sizeof g_emu.t);
  g_emu.configured = 0;
}
static void emu_loadd(int t, const void *base, long stride) {
  emu_check(g_emu.configured && g_emu.cfg.rows[t] > 0);
  memset(g_emu.t[t], 0, sizeof g_emu.t[t]);
  for (int r = 0; r < g_emu.cfg.rows[t]; ++r)
    memcpy(g_emu.t[t][r], (const char *)base + (ptrdiff_t)r * stride, g_emu.cfg.colsb[t]);
}
static void emu_stored(int t, void *base, long stride) {
  emu_check(g_emu.configured && g_emu.cfg.rows[t] > 0);
  for (int r = 0; r < g_emu.cfg.rows[t]; ++r)
    memcpy((char *)base + (ptrdiff_t)r * stride, g_emu.t[t][r], g_emu.cfg.colsb[t]);
}
static void emu_zero(int t) {
  emu_check(g_emu.configured);
  memset(g_emu.t[t], 0, sizeof g_emu.t[t]);
}
static float emu_bf16(const uint8_t *p) { /* bf16 to f32; denormals are zero (DAZ) */
  uint16_t h;
  memcpy(&h, p, 2);
  if (!(h & 0x7f80)) h &= 0x8000;
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void emu_dp(int c, int a, int b) {
  const amx_cfg *g = &g_emu.cfg;
  const int M = g->rows[c], N = g->colsb[c] / 4, K = g->colsb[a] / 4;
  emu_check(g_emu.configured && M > 0 && g->rows[a] == M && g->rows[b] == K && g->colsb[b] == g->colsb[c]);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc;
      memcpy(&acc, &g_emu.t[c][m][4 * n], 4);
      for (int k = 0; k < K; ++k) {
        acc += emu_bf16(&g_emu.t[a][m][4 * k]) * emu_bf16(&g_emu.t[b][k][4 * n]);
        acc += emu_bf16(&g_emu.t[a][m][4 * k + 2]) * emu_bf16(&g_emu.t[b][k][4 * n + 2]);
      }
      memcpy(&g_emu.t[c][m][4 * n], &acc, 4);
    }
}
#define T_LOADCFG(p) emu_loadcfg(p)
#define T_RELEASE() emu_release()
#define T_LOADD(t, p, s) emu_loadd(t, p, (long)(s))
#define T_STORED(t, p, s) emu_stored(t, p, (long)(s))
#define T_ZERO(t) emu_zero(t)
#define T_DP(c, a, b) emu_dp(c, a, b)
#else
#define T_LOADCFG(p) _tile_loadconfig(p)
#define T_RELEASE() _tile_release()
#define T_LOADD(t, p, s) _tile_loadd(t, p, s)
#define T_STORED(t, p, s) _tile_stored(t, p, s)
#define T_ZERO(t) _tile_zero(t)
#define T_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

/* GCC's tileloadd does not tell the compiler that it reads memory: the
 * packed buffers must be in memory before the loads. */
#define MEM_BARRIER() __asm__ __volatile__("" ::: "memory")

/* ---- Linux: permission to use the tile data (once per process) --------- */

static int g_amx_ok;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_request(void) {
#ifdef FA_AMX_EMULATE
  g_amx_ok = 1;
#else
  g_amx_ok = fa__amx_request_tiles();
#endif
}

int fa__cpu_amx_usable(void) {
  pthread_once(&g_amx_once, amx_request);
  return g_amx_ok;
}

/* ---- per-thread scratch --------------------------------------------------- */

typedef struct amx_scratch {
  size_t bytes;
  float *c;    /* 4 tiles of 16 x 16 */
  uint32_t *a; /* 32 x kpp */
  uint32_t *b; /* 16 x n: the last partial pair step of B */
} amx_scratch;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void scratch_free(void *p) {
  amx_scratch *s = (amx_scratch *)p;
  if (s) free(s->c);
  free(s);
}
static void key_make(void) {
  g_key_ok = pthread_key_create(&g_key, scratch_free) == 0;
}

/* Grown (never in the steady state: the tile sizes of a run repeat), freed
 * when the thread exits. NULL when out of memory. */
static amx_scratch *scratch_get(size_t a_words, size_t b_words) {
  pthread_once(&g_key_once, key_make);
  if (!g_key_ok) return NULL;
  amx_scratch *s = (amx_scratch *)pthread_getspecific(g_key);
  if (!s) {
    s = (amx_scratch *)calloc(1, sizeof *s);
    if (!s || pthread_setspecific(g_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  const size_t cb = 4 * 256 * sizeof(float), ab = (a_words * 4 + 63) / 64 * 64, bb = (b_words * 4 + 63) / 64 * 64;
  const size_t need = cb + ab + bb;
  if (need > s->bytes) {
    free(s->c);
    s->bytes = 0;
    const size_t want = need + need / 4;
    void *m = aligned_alloc(64, (want + 63) / 64 * 64);
    if (!m) return NULL;
    s->c = (float *)m;
    s->bytes = want;
  }
  s->a = (uint32_t *)(void *)((char *)s->c + cb);
  s->b = (uint32_t *)(void *)((char *)s->a + ab);
  return s;
}

/* ---- packing A ------------------------------------------------------------- */

/* out[j] = column j of the 16 x 16 words in r[0..15] */
FA_INLINE void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) { /* rows 4q..4q+3: u[4q + j] holds column 4L + j of them in lane L */
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(a, c, 0xdd);
    r[12 + j] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
}

/* dst[r*kpp + k] = pair word A(r, k) for r < mt, k < kp; zero for k < kpp
 * past kp and for the rows mt..rr-1 (rr: 16 or 32, the rows the tiles read). */
static void pack_a(uint32_t *dst, int kpp, int rr, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa, int mt, int kp) {
  if (csa == 2) { /* rows of pairs: a copy */
    for (int r = 0; r < mt; ++r) {
      memcpy(dst + (ptrdiff_t)r * kpp, a + r * rsa, (size_t)kp * 4);
      memset(dst + (ptrdiff_t)r * kpp + kp, 0, (size_t)(kpp - kp) * 4);
    }
  } else if (rsa == 2 && csa % 2 == 0) { /* a pair panel: word (r, k) at k * ld + r */
    const ptrdiff_t ld = csa / 2;
    const uint32_t *src = (const uint32_t *)(const void *)a;
    for (int r0 = 0; r0 < mt; r0 += 16) {
      const int nr = mt - r0 < 16 ? mt - r0 : 16;
      const __mmask16 rm = (__mmask16)((1u << nr) - 1u);
      for (int k0 = 0; k0 < kpp; k0 += 16) {
        __m512i v[16];
        for (int kk = 0; kk < 16; ++kk)
          v[kk] = k0 + kk < kp ? _mm512_maskz_loadu_epi32(rm, src + (ptrdiff_t)(k0 + kk) * ld + r0)
                               : _mm512_setzero_si512();
        transpose16(v);
        for (int rr_ = 0; rr_ < nr; ++rr_)
          _mm512_storeu_si512((void *)(dst + (ptrdiff_t)(r0 + rr_) * kpp + k0), v[rr_]);
      }
    }
  } else { /* any strides: a pair at a time */
    for (int r = 0; r < mt; ++r) {
      uint32_t *d = dst + (ptrdiff_t)r * kpp;
      for (int k = 0; k < kp; ++k) memcpy(d + k, a + r * rsa + k * csa, 4);
      memset(d + kp, 0, (size_t)(kpp - kp) * 4);
    }
  }
  for (int r = mt; r < rr; ++r) memset(dst + (ptrdiff_t)r * kpp, 0, (size_t)kpp * 4);
}

/* ---- the block kernel ------------------------------------------------------- */

static fa__cpu_gemm_bf16_fn g_micro; /* the table's vdpbf16ps micro-kernel: the fallback */
static int g_micro_mr, g_micro_nv, g_micro_vl;

/* Without scratch memory: the micro-kernel strips (as fa__cpu_gemm_bf16 cuts them). */
static void gemm_fallback(int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa, const uint32_t *b,
                          ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate, float *cmax) {
  const int w = g_micro_nv * g_micro_vl;
  for (int x = 0; x < n; x += w) {
    const int nv = (n - x < w ? n - x : w) / g_micro_vl;
    for (int i = 0; i < m; i += g_micro_mr) {
      const int mr = m - i < g_micro_mr ? m - i : g_micro_mr;
      g_micro(mr, nv, kp, a + (ptrdiff_t)i * rsa, rsa, csa, b + x, ldb, alpha, c + (ptrdiff_t)i * ldc + x, ldc,
              accumulate, cmax ? cmax + x : NULL);
    }
  }
}

/* c rows < rows of one 16 x 16 tile t: (accumulate ? c : 0) + alpha * t */
FA_INLINE void epilogue(float *c, ptrdiff_t ldc, const float *t, int rows, float alpha, int accumulate) {
  const __m512 al = _mm512_set1_ps(alpha);
  for (int r = 0; r < rows; ++r) {
    __m512 x = _mm512_load_ps(t + 16 * r);
    if (alpha != 1.0f) x = _mm512_mul_ps(x, al);
    if (accumulate) x = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc), x);
    _mm512_storeu_ps(c + r * ldc, x);
  }
}

/* One A tile's source: 16 rows of 16 pair words, `stride` bytes apart. */
typedef struct a_src {
  const void *p;
  ptrdiff_t stride;
} a_src;

/* Set between tiles_hold(1) and tiles_hold(0): the configuration is loaded. */
static _Thread_local int g_held;

static void tiles_hold_amx(int on) {
  if (on && !g_held) T_LOADCFG(&g_cfg);
  if (!on && g_held) T_RELEASE();
  g_held = on;
}

/* cmax: the rows of a 32-row block just written, read back from L1 (two
 * chains a column block, for the vmaxps latency) */
FA_INLINE void block_max(float *cmax, const float *c, ptrdiff_t ldc, int rows, int two_n) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 x0 = _mm512_loadu_ps(cmax), x1 = two_n ? _mm512_loadu_ps(cmax + 16) : ninf, y0 = ninf, y1 = ninf;
  int r = 0;
  for (; r + 1 < rows; r += 2) {
    x0 = _mm512_max_ps(x0, _mm512_loadu_ps(c + r * ldc));
    y0 = _mm512_max_ps(y0, _mm512_loadu_ps(c + (r + 1) * ldc));
    if (two_n) {
      x1 = _mm512_max_ps(x1, _mm512_loadu_ps(c + r * ldc + 16));
      y1 = _mm512_max_ps(y1, _mm512_loadu_ps(c + (r + 1) * ldc + 16));
    }
  }
  if (r < rows) {
    x0 = _mm512_max_ps(x0, _mm512_loadu_ps(c + r * ldc));
    if (two_n) x1 = _mm512_max_ps(x1, _mm512_loadu_ps(c + r * ldc + 16));
  }
  _mm512_storeu_ps(cmax, _mm512_max_ps(x0, y0));
  if (two_n) _mm512_storeu_ps(cmax + 16, _mm512_max_ps(x1, y1));
}

static void gemm_bf16_block_amx(int m, int n, int kp, const uint16_t *a, ptrdiff_t rsa, ptrdiff_t csa,
                                const uint32_t *b, ptrdiff_t ldb, float alpha, float *c, ptrdiff_t ldc, int accumulate,
                                float *cmax) {
  if (m <= 0 || n <= 0) return;
  const int kpp = (kp + 15) & ~15, nk = kpp / 16, nkf = kp / 16, ktail = kp % 16;
  amx_scratch *s = scratch_get((size_t)32 * (size_t)kpp, ktail ? (size_t)16 * (size_t)n : 0);
  if (!s) {
    gemm_fallback(m, n, kp, a, rsa, csa, b, ldb, alpha, c, ldc, accumulate, cmax);
    return;
  }
  if (ktail) { /* the last pair step's rows of B, then zero rows */
    const int k0 = (nk - 1) * 16;
    for (int r = 0; r < 16; ++r) {
      if (r < ktail)
        memcpy(s->b + (ptrdiff_t)r * n, b + (ptrdiff_t)(k0 + r) * ldb, (size_t)n * 4);
      else
        memset(s->b + (ptrdiff_t)r * n, 0, (size_t)n * 4);
    }
  }
  const ptrdiff_t sb = ldb * 4, sbt = (ptrdiff_t)n * 4, sc = ldc * 4;
  /* C tiles of 16 whole rows without a scale start from C (accumulate) or
   * zero and are stored to C: no copy through the buffer (the sum then
   * starts from C instead of adding C last: f32 order only). */
  const int c_direct = alpha == 1.0f;
  MEM_BARRIER();
  const int own = !g_held;
  if (own) T_LOADCFG(&g_cfg);
  for (int i0 = 0; i0 < m; i0 += 32) {
    const int mt = m - i0 < 32 ? m - i0 : 32, two_m = mt > 16;
    const uint16_t *ai = a + (ptrdiff_t)i0 * rsa;
    /* Rows of pairs (csa = 2) in whole 16-row tiles are tile rows as they
     * are: whole pair steps load from the caller's memory, only the tail
     * step is copied (zero padded); anything else is packed. */
    const int direct = csa == 2 && (mt == 16 || mt == 32);
    if (direct) {
      if (ktail) pack_a(s->a, 16, two_m ? 32 : 16, ai + (ptrdiff_t)nkf * 32, rsa, 2, mt, ktail);
    } else {
      pack_a(s->a, kpp, two_m ? 32 : 16, ai, rsa, csa, mt, kp);
    }
    MEM_BARRIER();
    const int r0 = two_m ? 16 : mt, r1 = mt - 16;
    const int d0 = c_direct && r0 == 16, d1 = c_direct && r1 == 16;
    for (int x0 = 0; x0 < n; x0 += 32) {
      const int two_n = n - x0 > 16;
      float *c0 = c + (ptrdiff_t)i0 * ldc + x0, *c1 = c0 + 16 * ldc;
      if (d0 && accumulate) {
        T_LOADD(0, c0, sc);
        if (two_n) T_LOADD(1, c0 + 16, sc);
      } else {
        T_ZERO(0);
        T_ZERO(1);
      }
      if (d1 && accumulate) {
        T_LOADD(2, c1, sc);
        if (two_n) T_LOADD(3, c1 + 16, sc);
      } else {
        T_ZERO(2);
        T_ZERO(3);
      }
      for (int kc = 0; kc < nk; ++kc) {
        a_src a0, a1;
        if (direct && kc < nkf) {
          a0.p = ai + (ptrdiff_t)kc * 32;
          a0.stride = rsa * 2;
          a1.p = ai + 16 * rsa + (ptrdiff_t)kc * 32;
        } else if (direct) {
          a0.p = s->a;
          a0.stride = 64;
          a1.p = s->a + 256;
        } else {
          a0.p = s->a + kc * 16;
          a0.stride = (ptrdiff_t)kpp * 4;
          a1.p = s->a + (ptrdiff_t)16 * kpp + kc * 16;
        }
        const int tail = ktail && kc == nk - 1;
        const uint32_t *bk = tail ? s->b + x0 : b + (ptrdiff_t)kc * 16 * ldb + x0;
        const ptrdiff_t bs = tail ? sbt : sb;
        T_LOADD(4, a0.p, a0.stride);
        T_LOADD(6, bk, bs);
        T_DP(0, 4, 6);
        if (two_n) {
          T_LOADD(7, bk + 16, bs);
          T_DP(1, 4, 7);
        }
        if (two_m) {
          T_LOADD(5, a1.p, a0.stride);
          T_DP(2, 5, 6);
          if (two_n) T_DP(3, 5, 7);
        }
      }
      if (d0) {
        T_STORED(0, c0, sc);
        if (two_n) T_STORED(1, c0 + 16, sc);
      } else {
        T_STORED(0, s->c, 64);
        if (two_n) T_STORED(1, s->c + 256, 64);
      }
      if (two_m && d1) {
        T_STORED(2, c1, sc);
        if (two_n) T_STORED(3, c1 + 16, sc);
      } else if (two_m) {
        T_STORED(2, s->c + 512, 64);
        if (two_n) T_STORED(3, s->c + 768, 64);
      }
      MEM_BARRIER();
      if (!d0) {
        epilogue(c0, ldc, s->c, r0, alpha, accumulate);
        if (two_n) epilogue(c0 + 16, ldc, s->c + 256, r0, alpha, accumulate);
      }
      if (two_m && !d1) {
        epilogue(c1, ldc, s->c + 512, r1, alpha, accumulate);
        if (two_n) epilogue(c1 + 16, ldc, s->c + 768, r1, alpha, accumulate);
      }
      if (cmax) block_max(cmax + x0, c0, ldc, mt, two_n);
    }
  }
  if (own) T_RELEASE();
  MEM_BARRIER();
}

/* dst[c*ldd + k] = pair(x(2k, c), x(2k+1, c)) for c < cols, k < ceil(rows/2)
 * (x(rows, c) = 0): V or dO as the A operand of the block kernel, rows of
 * pairs along keys (query rows), so that the products read it with csa = 2
 * straight into tiles instead of transposing a pair panel per call. 32
 * rows x 16 columns at a time: the pair words of 16 columns for 16 key
 * pairs, then a 16 x 16 transpose. */
static void pair_pack_bf16_t_amx(uint32_t *dst, ptrdiff_t ldd, const uint16_t *x, ptrdiff_t ldx, int rows, int cols) {
  const int kp = (rows + 1) / 2;
  for (int c0 = 0; c0 < cols; c0 += 16) {
    const int nc = cols - c0 < 16 ? cols - c0 : 16;
    const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
    for (int k0 = 0; k0 < kp; k0 += 16) {
      const int nk = kp - k0 < 16 ? kp - k0 : 16;
      __m512i v[16];
      for (int kk = 0; kk < 16; ++kk) {
        const int r = 2 * (k0 + kk);
        const __m512i lo = r < rows ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cm, x + (ptrdiff_t)r * ldx + c0))
                                    : _mm512_setzero_si512();
        const __m512i hi = r + 1 < rows
                               ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cm, x + (ptrdiff_t)(r + 1) * ldx + c0))
                               : _mm512_setzero_si512();
        v[kk] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      transpose16(v);
      const __mmask16 km = (__mmask16)((1u << nk) - 1u);
      for (int cc = 0; cc < nc; ++cc) _mm512_mask_storeu_epi32(dst + (ptrdiff_t)(c0 + cc) * ldd + k0, km, v[cc]);
    }
  }
}

/* Over an avx512bf16 table: every bf16 product through the block kernel
 * (fa__cpu_gemm_bf16); the packers, softmax and the micro-kernel stay the
 * avx512bf16 ones, so the rounding rule is theirs. */
void fa__cpu_kernels_amx(fa__cpu_kernels *kt) {
  g_micro = kt->gemm_bf16;
  g_micro_mr = kt->mr;
  g_micro_nv = kt->nv;
  g_micro_vl = kt->vl;
  kt->isa = FA_ISA_AMX;
  kt->gemm_bf16_block = gemm_bf16_block_amx;
  kt->pair_pack_bf16_t = pair_pack_bf16_t_amx;
  kt->tiles_hold = tiles_hold_amx;
  /* decode keeps avx512's f32 kernels: where AMX is (Sapphire Rapids and
   * later), vdpbf16ps runs at the FMA's FLOP rate, so the pair kernels
   * would save only the widening of bf16, which measured no faster there
   * (bench/results/2026-12-07-cpu-decode-bf16-pair-order.txt) */
  kt->dec_scores_pairs = NULL;
  kt->dec_pv_pairs = NULL;
}
