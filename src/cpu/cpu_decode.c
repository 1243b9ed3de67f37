/* Decode on the cpu backend: few query rows against a long run of keys, a
 * memory-bound pass whose time is the bytes of K and V read once.
 *
 * A work item is (sequence b, kv head, split): the query rows of every query
 * head of that kv head and every new token (R = group * Lq rows) share each
 * K/V tile read (kt->dec_scores, kt->dec_softmax, kt->dec_pv: the
 * micro-kernels of kernels.h, which read the cache's rows in their own
 * dtype), so K and V are read once per kv head, not once per query head. When B * Hkv items cannot keep the
 * threads busy the keys are split ("flash-decoding"): each split leaves a
 * partial (o, lse) and the splits are merged in order with
 * fa__osm_merge_lse, the merge of src/rules/online_softmax.h, so a given
 * split count gives the same bits on every run and thread count.
 *
 * Keys are addressed through src/rules/kv_address.h: a tile never crosses a
 * page, so within a tile the rows are one strided matrix. The plain forward
 * takes this path too when it has few query rows against long keys and no
 * mask, bias or dropout (fa__cpu_decode_fits). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpuinfo.h"
#include "core/kv_host.h"
#include "cpu_io.h"
#include "cpu_parallel.h"
#include "cpu_passes.h"
#include "rules/layout.h"
#include "rules/online_softmax.h"
#include "rules/rotary.h"
#include "rules/score.h"

#define DEC_BK 128        /* keys per tile at most */
#define DEC_MIN_SPLIT 256 /* keys a split gets at least when the backend chooses */
/* An item of one kv head streams its K and V rows once: its tile's K rows
 * take about DEC_TILE_BYTES / R bytes (R query rows share them), as the
 * kernels prefetch the next tile into L1 only (pf_keep = 0) while they
 * work on this one, so both must fit there; with more rows the work per
 * byte leaves time for a shorter distance. On Zen 5 (48 KiB L1), 2
 * threads, D = 128: GQA 32/8 (R = 4) ran 8-18% faster with 16-key tiles
 * than with 128. Only 2 .. DEC_NT_ROWS rows take that path: MHA (R = 1)
 * measured 3-8% slower with it (bf16), Lq_new = 4 x GQA 4 (R = 16, bound
 * by the arithmetic) 7-22% slower (more tiles, no gain from the distance).
 * Those, and interleaved heads (hg > 1, where the next head reads the
 * lines beside this one's: 10% slower at 32768 keys paged), keep DEC_BK
 * keys and prefetch into every level. On Intel the rows go to L2 instead
 * and every contiguous item keeps DEC_BK keys (DEC_PF_L2 below). */
#define DEC_NT_ROWS 8
#define DEC_TILE_BYTES 16384
/* Interleaved heads (hg > 1) whose rows of one key are one block ([pages,
 * page, Hkv, D] or [B, L, Hkv, D], K and V alike): a tile's K rows of all
 * heads are then one contiguous block of bk * Hkv * D elements, and while
 * the item works head by head on this tile, head x's kernels prefetch the
 * x-th nh-th of the next tile's block, in address order, into every level
 * (the head-by-head prefetch reads 256 B at a 2 KiB stride, which the DRAM
 * pages and the hardware prefetcher take badly). The tile then holds about
 * DEC_REGION_BYTES of K (2 bytes an element, 2 .. 8 rows) or twice that
 * (one row): on Zen 5, 2 threads, D = 128, paged 256, 16 keys for bf16
 * GQA 32/8 (3.7 -> 2.8 ms at 32768 keys), 8 for bf16 MHA, 4 for f32 MHA;
 * half or twice those measured slower, and f32 GQA 32/8 (8 keys) and
 * Lq_new = 4 (16 rows) slower than the 128-key tiles: those keep them. */
#define DEC_REGION_BYTES 32768
/* The above was measured on AMD Zen. On Intel (a 2-vCPU Xeon, Sapphire
 * Rapids class, L1d 48 KiB, L2 2 MiB; bench/results/2026-12-01-cpu-decode-
 * xeon.txt) prefetchnta fills L1 only and skips L2, and the NT path ran at
 * 32% (f32 GQA 32/8) and 40-45% (bf16) of the triad, slower than with no
 * software prefetch at all (65-68%, 28-55%); prefetcht1 (into L2, DEC_PF_L2)
 * at the same distance: 85-96%, f32 and bf16, 8192 and 32768 keys
 * (prefetcht0 85%, prefetcht2 the same as t1; tiles of 16 KiB to 256 KiB
 * and 2-4 tiles ahead made no difference there). Interleaved heads: bf16
 * GQA 32/8 paged 256 ran 78 -> 88-100% at 32768 keys with t1 instead of t0;
 * f32 MHA paged 256 (one row) 56-58 -> 77% with 4x DEC_REGION_BYTES (16
 * keys: the 4-key block of all heads is 64 KiB, already more than L1; 8 or
 * 32 keys measured 65-68%, t1 63%). So on Intel the read-once hint is t1
 * and one-row region tiles are 4x; Zen 5 keeps the Zen tuning (and Zen 4
 * takes Intel's: dec_tuning below).
 *
 * Later on the same Xeon (bench/results/2026-12-01-cpu-decode-xeon-2.txt;
 * the bench's caches sit on 4 KiB pages): one row per kv head streamed at
 * 66-76% of the triad, MHA paged 256 at 32768 keys and MHA contiguous.
 * Paged, the region's prefetch (head x fetches the x-th nh-th of the next
 * tile's block, a whole tile ahead) ran slower than no software prefetch at
 * all (f32 78 -> 84%, bf16 64 -> 80% with 16 keys); prefetching the next
 * head's rows of this tile instead (the hg > 1 path without region), 512 or
 * 256 bytes past this head's in each of the tile's key rows, so that every
 * key row is one ascending stream the L2 streamer follows: f32 101%, bf16
 * 91% (t0 or t1 alike; 16 keys, 32 measured 93% for f32; bf16 16 or 32
 * keys alike). So one row, interleaved heads, on Intel: the region's tile,
 * not its prefetch (3 rounds: f32 75 -> 103%, bf16 66 -> 92%). Contiguous
 * (one kv head an item), one row: prefetcht1 instead of t0, bf16 73 -> 81%,
 * f32 84 -> 88% at 32768 keys (t2 78%, 64 or 256 keys a tile 77-79%).
 *
 * Interleaved heads with 2 .. DEC_NT_ROWS rows (bf16 GQA 32/8, vLLM's pages
 * or not; bench/results/2026-12-01-cpu-decode-xeon-4.txt): the region's
 * prefetch hands head x the x-th nh-th of the next tile's block, but head 0
 * of the next tile reads a row of every key of it, so the part the last
 * head fetched is needed almost at once; each head fetching its own rows
 * of the next tile (256 B at the key-row stride) gives every line a whole
 * tile of lead. 8192 keys (page 256, 1024 or 8192 alike: not the pages):
 * region 69-79%, own rows 76-79% of the triad; prefetching 2 or 4 tiles
 * ahead (70%), no software prefetch (42%), the next head's rows of this
 * tile (64%), every 4th line (37%), all heads' rows of 4 keys at a time
 * (68-73%), 8, 32 or 64 keys a tile (44-73%) were slower. So on Intel these
 * items keep the region's 16-key tile and t1 and take c.own.
 *
 * With prefetcht1 the next tile goes to L2, not L1, so on Intel the NT rows'
 * tile need not fit L1 beside this one. On a 2-vCPU Emerald Rapids class
 * Xeon (bench/results/2026-12-06-cpu-decode-intel-tiles.txt, alternating
 * rounds on a noisy host) DEC_BK keys instead of DEC_TILE_BYTES / R (16
 * keys at D = 128): bf16 GQA 32/8 contiguous 2.25 -> 2.03 ms at 8192 keys
 * and 9.06 -> 7.41 at 32768 (medians of 5 rounds' medians, faster in 4 of
 * 5), f32 GQA 3.33 -> 3.18 and 13.3 -> 12.7 (4 and 3 of 4); 32 or 64 keys
 * in between (on the Sapphire Rapids guest of 12-01 tile sizes had made no
 * difference). Paged (the hg > 1 items above) 64 or 128 keys were slower:
 * those keep their 16. */
#define DEC_PF_L2 2
/* The bf16 pair kernels (kernels.h's dec_scores_pairs, dec_pv_pairs: q and
 * P rounded to bf16, both products on vdpbf16ps, where the avx512bf16 ISA
 * has them) for items of at least this many rows: several new tokens a
 * step (speculative decoding) or large GQA groups, where the f32 kernels'
 * arithmetic, not the memory, set the pace. On the 2-vCPU Zen 4 guest
 * (bench/results/2026-12-07-cpu-decode-bf16-pairs.txt), 16 rows (GQA 32/8,
 * Lq_new = 4), 2 threads, 8192 keys cold: 6.3-6.5 -> 8.1-8.3 GB/s; warm,
 * one thread: 2.6x. With 4 rows (GQA 32/8, one token) they were 1.2-1.5x
 * faster warm but 11% slower cold on one thread (13.5 against 15.2 GB/s,
 * 8 rounds of 8), so the rows that memory bounds keep the f32 kernels. */
#define DEC_PAIRS_ROWS (DEC_NT_ROWS + 1)
#define DEC_REGION_ONE_ROW_INTEL 4
/* Interleaved heads on Intel that take neither the region nor the own
 * path (f32 with 2 .. 8 rows, any dtype with more than DEC_NT_ROWS: GQA
 * 32/8 f32, or Lq_new = 4): 16-key tiles instead of DEC_BK. On the 2-vCPU
 * Sapphire Rapids guest (2026-12-07, bench/results/2026-12-07-cpu-decode-
 * honest-rotation.txt, pages of 256) f32 GQA 32/8 ran at 69-74% of the
 * triad with 128 keys, 93-97% with 16 (8 keys 65-67%, 32 84-91%, 64
 * 78-81%); Lq_new = 4 (16 rows) f32 42-44% -> 58-59%, bf16 31 -> 33%. Each
 * head's rows of a tile are 256-512 B at a 2-4 KiB stride: the tile of all
 * heads is 64 KiB of K at 16 keys (f32), 512 KiB at 128, and the next head's
 * rows (prefetched while this head works) must still be in L2 when read. */
#define DEC_HG_BK_INTEL 16
/* Splits on Intel (bench/results/2026-12-01-cpu-decode-xeon-3.txt): an
 * item's first tile is read cold (the kernels prefetch only the next tile,
 * and the hardware prefetcher has yet to ramp up on the new stream), and
 * the default "about 8 items per thread" cut 8192 keys of bf16 GQA 32/8
 * into 16 splits of 2 MiB: 73% of the triad against 83% with 2 (paged 256:
 * 69 -> 75%, f32 GQA 86 -> 92%). So an item there carries at least this
 * much K and V, while every thread still gets one. */
#define DEC_SPLIT_BYTES_INTEL ((int64_t)16 << 20)
/* Which tuning a CPU takes. The Zen one reads the NT rows' next
 * tile into L1 only (prefetchnta) and sizes the tiles so that this tile and
 * the next fit beside each other in a 48 KiB L1 (Zen 5's). On Zen 4 (L1d
 * 32 KiB; a 2-vCPU EPYC guest, 2026-12-07, bench/results/2026-12-07-cpu-
 * decode-zen4-tuning.txt: alternating processes, 3 rounds, 2 threads) Intel's
 * (prefetcht1 into L2, DEC_BK tiles, DEC_SPLIT_BYTES_INTEL items) ran every
 * shape faster, 8k / 32k keys, medians: contiguous f32 GQA 32/8 1.32 /
 * 1.51x, bf16 GQA 1.02 / 1.35x, f32 MHA 1.48 / 1.43x, bf16 MHA 1.83 /
 * 1.86x, f16 GQA 1.13 / 1.16x; pages of 256 1.08-1.38x (f32 GQA's rounds
 * overlapping). Forcing prefetcht0 alone was no faster there than nta, t1
 * alone 1.5-1.8x on f32 GQA. So the Zen tuning is kept for AMD cores whose
 * L1d holds 48 KiB; every other x86 core takes Intel's. (Zen 3, also 32
 * KiB, was not measured with either.)
 *
 * Two of Intel's tiles then measured slower on that Zen 4 (same file,
 * sections 4, 5 and 12): interleaved heads with 2 .. 8 rows (bf16 GQA 32/8,
 * pages of 256) read 23-24 GB/s with the region's 16 keys, 26-29 with 64
 * in a sweep, and in alternating processes 1.08 / 1.14x at 8k / 32k keys
 * (f16 1.09 / 1.13x, GQA 32/4 0.99 / 1.04x): AMD cores on Intel's hints
 * (DEC_TUNE_AMD_L2) take DEC_REGION_ROWS_AMD_L2 times the region's bytes.
 * The contiguous NT rows of a 16-bit cache take the Zen tiles there too
 * (DEC_TILE_BYTES / R: 16 keys at GQA 32/8): against DEC_BK 1.21 / 1.23x
 * (bf16 GQA 32/8, 8k / 32k keys), 1.10 / 1.01x (GQA 32/4), 1.47 / 1.24x
 * (f16) in alternating processes while the memory was quiet (31 GB/s
 * reached; section 12), but 0.87-0.97x in an earlier contended spell
 * (20 GB/s; section 5). f32 keeps DEC_BK (26-32 GB/s; 16 keys 25-30).
 *
 * Nor did Intel's prefetcht0 for the interleaved heads it keeps it for
 * (those off the own-rows path): prefetcht1 instead, pages of 256, f32 GQA
 * 32/8 1.09 / 1.29x, f32 MHA 1.29 / 1.33x, bf16 MHA 1.28 / 1.26x; but 4 new
 * tokens of bf16 GQA (16 rows) 0.80 / 0.78x (section 10). So on
 * DEC_TUNE_AMD_L2 every item of 1 .. DEC_NT_ROWS rows prefetches into L2. */
enum { DEC_TUNE_ZEN, DEC_TUNE_INTEL, DEC_TUNE_AMD_L2 };
#define DEC_REGION_ROWS_AMD_L2 4
static int dec_tuning(void) {
#if defined(__x86_64__) || defined(__i386__)
  const fa__cpuinfo *ci = fa__cpuinfo_get();
  if (!ci->vendor_amd) return DEC_TUNE_INTEL;
  return ci->l1d_bytes >= 48 * 1024 ? DEC_TUNE_ZEN : DEC_TUNE_AMD_L2;
#else
  return DEC_TUNE_ZEN; /* not x86: as tuned */
#endif
}

typedef struct dec_ctx {
  const fa__problem *p;
  const fa__cpu_kernels *kt;
  int R;      /* most rows of an item: group * Lq */
  int lds;    /* score row stride: bk rounded up to FA_CPU_PANEL */
  int nsplit; /* splits per (b, kv head group) */
  int hg;     /* kv heads per item: all of them when the cache interleaves heads within a token's row */
  int bk, D, Dv;
  int elementwise; /* softcap or ALiBi */
  int pf_keep;     /* the kernels' prefetch hint (kernels.h), DEC_PF_L2 */
  int own;         /* hg > 1 on Intel, 2 .. DEC_NT_ROWS rows: each head prefetches its own rows of the next tile */
  int region; /* hg > 1, a tile of all heads one block: prefetch the next one in address order (DEC_REGION_BYTES) */
  fa__cpu_dec_scores_fn scores; /* kt's dec_scores, or dec_scores_pairs (DEC_PAIRS_ROWS) */
  fa__cpu_dec_pv_fn pv;         /* kt's dec_pv, or dec_pv_pairs */
  float *part_o;                /* [items][R][Dv] when nsplit > 1 */
  float *part_lse;              /* [items][R] */
  atomic_int *left;             /* per (b, kv head group): splits not yet done; the thread that ends the last merges */
} dec_ctx;

typedef struct dec_scratch {
  float *q, *o;     /* [hg][R][D], [hg][R][Dv] */
  float *m, *l, *f; /* [hg][R] */
  float *s;         /* [R][lds]: the scores, then the probabilities, of one tile */
  float *kbuf, *vbuf;
  double *lv, *w, *acc; /* [nsplit], [nsplit], [Dv]: the merge */
} dec_scratch;

static void dec_carve(fa__cpu_arena *a, const void *ctx, void *scratch) {
  const dec_ctx *c = ctx;
  dec_scratch *s = scratch;
  const size_t rows = (size_t)c->hg * (size_t)c->R;
  s->q = fa__cpu_take_f(a, rows * (size_t)c->D);
  s->o = fa__cpu_take_f(a, rows * (size_t)c->Dv);
  s->m = fa__cpu_take_f(a, rows);
  s->l = fa__cpu_take_f(a, rows);
  s->f = fa__cpu_take_f(a, rows);
  s->s = fa__cpu_take_f(a, (size_t)c->R * (size_t)c->lds);
  s->kbuf = fa__cpu_take_f(a, (size_t)c->bk * (size_t)c->D);
  s->vbuf = fa__cpu_take_f(a, (size_t)c->bk * (size_t)c->Dv);
  s->lv = s->w = s->acc = NULL;
  if (c->nsplit > 1) { /* 64-byte aligned floats, taken as doubles */
    s->lv = (double *)(void *)fa__cpu_take_f(a, 2 * (size_t)c->nsplit);
    s->w = (double *)(void *)fa__cpu_take_f(a, 2 * (size_t)c->nsplit);
    s->acc = (double *)(void *)fa__cpu_take_f(a, 2 * (size_t)c->Dv);
  }
}

/* Sequence b as the decode loop sees it. */
static fa__seq dec_seq(const fa__problem *p, int64_t b) {
  if (!p->kvcache) return fa__seq_get(b, p->Lq, p->Lk, p->seqlens_q, p->seqlens_k, p->cu_seqlens_q, p->cu_seqlens_k);
  fa__seq s = {b, 0, 0, p->Lq, fa__kv_len(p, b)};
  return s;
}

/* Where key j of sequence sq is: the cache's page and row, or the plain
 * tensor's batch index and row. */
static fa__kvpos dec_locate(const fa__problem *p, const fa__seq *sq, int64_t b, int64_t j) {
  if (p->kvcache) return fa__kv_locate(&p->kv.map, b, j);
  fa__kvpos at = {sq->bidx, sq->k_row0 + j};
  return at;
}

/* bc rows of K (or V) of head h from position at, as the kernels take them:
 * the tensor itself (row stride *ld bytes, dtype *dt) when the kernels read
 * its dtype and its rows are contiguous, else converted to f32 into buf. */
static const void *dec_rows(const dec_ctx *c, const fa_tensor *t, fa__kvpos at, int64_t h, int bc, int cols, float *buf,
                            ptrdiff_t *ld, fa_dtype *dt) {
  const ptrdiff_t es = (ptrdiff_t)fa_dtype_size(t->dtype);
  fa__cpu_mat m;
  m.base = (const char *)t->data + (ptrdiff_t)fa__kv_offset(t->stride, at, h, 0) * es;
  m.dtype = t->dtype;
  m.rs = (ptrdiff_t)t->stride[2];
  m.cs = (ptrdiff_t)t->stride[3];
  if ((c->kt->dec_dtypes >> t->dtype & 1u) && (m.cs == 1 || cols == 1)) {
    *ld = m.rs * es;
    *dt = t->dtype;
    return m.base;
  }
  for (int r = 0; r < bc; ++r) fa__cpu_load_row(c->kt, buf + (ptrdiff_t)r * cols, &m, r, cols, 1.0f);
  *ld = (ptrdiff_t)cols * (ptrdiff_t)sizeof(float);
  *dt = FA_F32;
  return buf;
}

/* The first row of the tile at key j (for the prefetch hint), or NULL. */
static const void *dec_row0(const fa_tensor *t, fa__kvpos at, int64_t h, ptrdiff_t *ld) {
  const ptrdiff_t es = (ptrdiff_t)fa_dtype_size(t->dtype);
  *ld = (ptrdiff_t)t->stride[2] * es;
  return (const char *)t->data + (ptrdiff_t)fa__kv_offset(t->stride, at, h, 0) * es;
}

static void dec_split(const dec_ctx *c, dec_scratch *s, int64_t it) {
  const fa__problem *p = c->p;
  const fa__cpu_kernels *kt = c->kt;
  const int64_t nhg = (p->Hkv + c->hg - 1) / c->hg;
  const int64_t sp = it % c->nsplit, bg = it / c->nsplit, b = bg / nhg, h0 = bg % nhg * c->hg;
  const int64_t h1 = h0 + c->hg < p->Hkv ? h0 + c->hg : p->Hkv;
  const fa__seq sq = dec_seq(p, b);
  const int lq = (int)sq.lq, group = (int)p->group, R = group * lq, D = c->D, Dv = c->Dv, lds = c->lds;
  const int nh = (int)(h1 - h0);
  const fa__band bd = fa__seq_band(&sq, p->window_left, p->window_right, p->bottom_right);
  if (R == 0) return;

  /* this split's keys: the union of the rows' bands, cut in nsplit chunks of whole tiles */
  int64_t jlo, jhi;
  fa__band_cols(&bd, 0, lq, &jlo, &jhi);
  const int64_t span = jhi > jlo ? jhi - jlo : 0;
  int64_t chunk = (span + c->nsplit - 1) / c->nsplit;
  chunk = (chunk + c->bk - 1) / c->bk * c->bk;
  const int64_t j0 = jlo + sp * chunk < jhi ? jlo + sp * chunk : jhi;
  const int64_t j1 = j0 + chunk < jhi ? j0 + chunk : jhi;

  /* query rows x * R + r of kv head h0 + x, r = hh * lq + i: rotated at cache_seqlens[b] + i (dec_scores scales) */
  const fa__kv *kv = &p->kv;
  for (int x = 0; x < nh; ++x)
    for (int r = 0; r < R; ++r) {
      const int hh = r / lq, i = r % lq;
      const fa__cpu_mat qm = fa__cpu_mat_of(&p->q, sq.bidx, (h0 + x) * group + hh, sq.q_row0);
      float *qr = s->q + ((ptrdiff_t)x * R + r) * D;
      fa__cpu_load_row(kt, qr, &qm, i, D, 1.0f);
      if (p->kvcache && kv->rotary_cos) {
        const int64_t pos = (int64_t)kv->cache_seqlens[b] + i, half = kv->rotary_dim / 2;
        fa__rotary_f(qr, kv->rotary_dim, kv->rotary_interleaved, kv->rotary_cos + pos * half,
                     kv->rotary_sin + pos * half);
      }
    }
  for (int r = 0; r < nh * R; ++r) {
    s->m[r] = -INFINITY;
    s->l[r] = 0.0f;
  }
  memset(s->o, 0, (size_t)nh * (size_t)R * (size_t)Dv * sizeof(float));
  const float cap = (float)p->softcap;

  /* tiles of at most bk keys that never cross a page, each taken by the
   * item's kv heads in turn; each tile's kernels are told what comes next
   * (the next head's rows of this tile, after the last head the first
   * head's rows of the next tile), so that they prefetch it */
  int64_t j = j0;
  int bc = 0;
  fa__kvpos at = {0, 0};
  if (j < j1) {
    const int64_t run = p->kvcache ? fa__kv_run(&kv->map, j, j1) : j1 - j;
    bc = (int)(run < c->bk ? run : c->bk);
    at = dec_locate(p, &sq, b, j);
  }
  while (j < j1) {
    const int64_t jn = j + bc;
    int bcn = 0;
    fa__kvpos atn = {0, 0};
    if (jn < j1) {
      const int64_t run = p->kvcache ? fa__kv_run(&kv->map, jn, j1) : j1 - jn;
      bcn = (int)(run < c->bk ? run : c->bk);
      atn = dec_locate(p, &sq, b, jn);
    }
    const int full = fa__band_tile_full(&bd, 0, lq, j, j + bc);
    for (int x = 0; x < nh; ++x) {
      const int64_t kvh = h0 + x;
      const void *pfk = NULL, *pfv = NULL;
      ptrdiff_t ldpk = 0, ldpv = 0, ldk, ldv;
      int npf = bcn;
      if (c->region) { /* head x's share of the next tile's block: bcn rows of 1 / nh of a key's row */
        if (bcn) {
          pfk = (const char *)dec_row0(&p->k, atn, h0, &ldpk) + (ptrdiff_t)x * bcn * (ldpk / nh);
          pfv = (const char *)dec_row0(&p->v, atn, h0, &ldpv) + (ptrdiff_t)x * bcn * (ldpv / nh);
          ldpk /= nh;
          ldpv /= nh;
        }
      } else if (c->own) { /* head x's rows of the next tile: every line one tile ahead of its use */
        if (bcn) {
          pfk = dec_row0(&p->k, atn, kvh, &ldpk);
          pfv = dec_row0(&p->v, atn, kvh, &ldpv);
        }
      } else if (x + 1 < nh) { /* heads interleaved in a token's row: the next head's rows of this tile come next */
        pfk = dec_row0(&p->k, at, kvh + 1, &ldpk);
        pfv = dec_row0(&p->v, at, kvh + 1, &ldpv);
        npf = bc;
      } else if (bcn) {
        pfk = dec_row0(&p->k, atn, h0, &ldpk);
        pfv = dec_row0(&p->v, atn, h0, &ldpv);
      }
      float *q = s->q + (ptrdiff_t)x * R * D, *o = s->o + (ptrdiff_t)x * R * Dv;
      float *m = s->m + x * R, *l = s->l + x * R, *f = s->f + x * R;
      fa_dtype kdt, vdt;
      const void *K = dec_rows(c, &p->k, at, kvh, bc, D, s->kbuf, &ldk, &kdt);
      c->scores(s->s, lds, q, D, R, K, ldk, bc, D, (float)p->scale, kdt, pfk, ldpk, npf, c->pf_keep);
      if (c->elementwise || !full)
        for (int r = 0; r < R; ++r) {
          const int i = r % lq;
          float *xr = s->s + (ptrdiff_t)r * lds;
          const float slope = p->alibi_slopes ? p->alibi_slopes[kvh * group + r / lq] : 0.0f;
          for (int jj = 0; jj < bc; ++jj) {
            if (!full && !fa__band_visible(&bd, i, j + jj)) {
              xr[jj] = -INFINITY;
              continue;
            }
            if (cap > 0) xr[jj] = fa__softcap_f(xr[jj], cap);
            if (p->alibi_slopes) xr[jj] += fa__alibi_f(slope, fa__band_diag(&bd, i), j + jj);
          }
        }
      const int moved = kt->dec_softmax(s->s, lds, R, bc, m, l, f);
      const void *V = dec_rows(c, &p->v, at, kvh, bc, Dv, s->vbuf, &ldv, &vdt);
      c->pv(o, Dv, R, moved ? f : NULL, s->s, lds, V, ldv, bc, Dv, vdt, pfv, ldpv, npf, c->pf_keep);
    }
    j = jn;
    bc = bcn;
    at = atn;
  }

  /* o = acc / l, lse = m + log l (o = 0, lse = -inf where nothing was seen) */
  for (int x = 0; x < nh; ++x) {
    const int64_t kvh = h0 + x, part = (b * p->Hkv + kvh) * c->nsplit + sp; /* dec_merge's order */
    for (int r = 0; r < R; ++r) {
      float *orow = s->o + ((ptrdiff_t)x * R + r) * Dv;
      const float l = s->l[x * R + r];
      const float w = l > 0 ? 1.0f / l : 0.0f;
      for (int e = 0; e < Dv; ++e) orow[e] = l > 0 ? orow[e] * w : 0.0f;
      const float lse = l > 0 ? (float)((double)s->m[x * R + r] + log((double)l)) : -INFINITY;
      if (c->nsplit > 1) {
        memcpy(c->part_o + ((size_t)part * (size_t)c->R + (size_t)r) * (size_t)Dv, orow, (size_t)Dv * sizeof(float));
        c->part_lse[(size_t)part * (size_t)c->R + (size_t)r] = lse;
      } else {
        const int64_t h = kvh * group + r / lq, row = sq.q_row0 + r % lq;
        const fa__cpu_mat om = fa__cpu_mat_of(&p->o, sq.bidx, h, row);
        fa__cpu_store_row(&om, 0, orow, Dv);
        if (p->lse.data)
          *((float *)p->lse.data + sq.bidx * p->lse.stride[0] + h * p->lse.stride[1] + row * p->lse.stride[2]) = lse;
      }
    }
  }
}

/* The splits of each row of sequence b and kv heads [h0, h1) merged in
 * order (fa__osm_merge_lse), in double: the same sums in the same order
 * whichever thread runs it. */
static void dec_merge(const dec_ctx *c, dec_scratch *s, int64_t b, int64_t h0, int64_t h1) {
  const fa__problem *p = c->p;
  const int n = c->nsplit, Dv = c->Dv;
  const fa__seq sq = dec_seq(p, b);
  const int lq = (int)sq.lq, R = (int)p->group * lq;
  double *lv = s->lv, *w = s->w, *acc = s->acc;
  float *row = s->o;
  for (int64_t kvh = h0; kvh < h1; ++kvh)
    for (int r = 0; r < R; ++r) {
      const size_t it0 = (size_t)((b * p->Hkv + kvh) * n);
      for (int k = 0; k < n; ++k) lv[k] = c->part_lse[(it0 + (size_t)k) * (size_t)c->R + (size_t)r];
      const double lse = fa__osm_merge_lse(lv, n, w);
      for (int e = 0; e < Dv; ++e) acc[e] = 0.0;
      for (int k = 0; k < n; ++k) {
        if (w[k] == 0.0) continue;
        const double wk = w[k];
        const float *po = c->part_o + ((it0 + (size_t)k) * (size_t)c->R + (size_t)r) * (size_t)Dv;
        for (int e = 0; e < Dv; ++e) acc[e] += wk * po[e];
      }
      for (int e = 0; e < Dv; ++e) row[e] = (float)acc[e];
      const int64_t h = kvh * p->group + r / lq, i = sq.q_row0 + r % lq;
      const fa__cpu_mat om = fa__cpu_mat_of(&p->o, sq.bidx, h, i);
      fa__cpu_store_row(&om, 0, row, Dv);
      if (p->lse.data)
        *((float *)p->lse.data + sq.bidx * p->lse.stride[0] + h * p->lse.stride[1] + i * p->lse.stride[2]) = (float)lse;
    }
}

/* One split; the thread that finishes the last split of its (b, kv head
 * group) merges that group's splits (the others' parts are visible to it
 * through the counter's acquire-release), so the merge runs in the
 * parallel loop, beside the other threads' streaming. */
static void dec_item(const void *ctx, void *scratch, int64_t it) {
  const dec_ctx *c = ctx;
  dec_scratch *s = scratch;
  dec_split(c, s, it);
  if (c->nsplit == 1) return;
  const int64_t bg = it / c->nsplit;
  if (atomic_fetch_sub_explicit(&c->left[bg], 1, memory_order_acq_rel) != 1) return;
  const fa__problem *p = c->p;
  const int64_t nhg = (p->Hkv + c->hg - 1) / c->hg, b = bg / nhg, h0 = bg % nhg * c->hg;
  dec_merge(c, s, b, h0, h0 + c->hg < p->Hkv ? h0 + c->hg : p->Hkv);
}

int fa__cpu_decode_fits(const fa__problem *p) {
  if (p->kvcache) return 1;
  if (p->mask.data || p->bias.data || p->dropout_p > 0) return 0;
  return p->Lq <= 16 && p->Lq * p->group <= 64 && p->Lk >= 256 && p->Lk >= 8 * p->Lq;
}

fa_status fa__cpu_decode(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err) {
  dec_ctx c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.kt = kt;
  c.R = (int)(p->group * p->Lq);
  /* The most keys a sequence attends to: the cache's capacity bounds it,
   * but only cache_seqlens[b] + L_new are ever read. Tiles and splits are
   * sized from it: a tile longer than the keys, or a split past the last
   * tile, would only cost memory and time (an empty split's lse is -inf,
   * its weight 0: the merged bits are the same without it). */
  int64_t keys = p->Lk;
  if (p->kvcache) {
    keys = 1;
    for (int64_t b = 0; b < p->B; ++b)
      if (fa__kv_len(p, b) > keys) keys = fa__kv_len(p, b);
  }
  const int64_t hs = p->k.stride[1] < 0 ? -p->k.stride[1] : p->k.stride[1],
                rs = p->k.stride[2] < 0 ? -p->k.stride[2] : p->k.stride[2];
  c.hg = p->Hkv > 1 && hs < rs ? (int)p->Hkv : 1;
  c.pf_keep = c.hg > 1 || c.R < 2 || c.R > DEC_NT_ROWS;
  const int ntrows = !c.pf_keep;                             /* the read-once rows of DEC_NT_ROWS */
  const int tune = dec_tuning(), zen = tune == DEC_TUNE_ZEN; /* the Zen tuning above, or Intel's (DEC_PF_L2) */
  const int64_t kes = (int64_t)fa_dtype_size(p->k.dtype);
  /* the NT rows' tile: the Zen one (DEC_TILE_BYTES / R), also for a 16-bit cache on AMD_L2 (dec_tuning) */
  const int nt_tile = ntrows && (zen || (tune == DEC_TUNE_AMD_L2 && kes == 2));
  c.region = c.hg > 1 && c.hg == p->Hkv && c.R >= 1 && c.R <= DEC_NT_ROWS && (kes == 2 || c.R == 1) &&
             p->v.dtype == p->k.dtype && (kt->dec_dtypes >> p->k.dtype & 1u) && p->k.stride[3] == 1 &&
             p->v.stride[3] == 1 && p->k.stride[1] == p->D && p->k.stride[2] == p->Hkv * p->D &&
             p->v.stride[1] == p->Dv && p->v.stride[2] == p->Hkv * p->Dv;
  /* prefetcht1: Intel's NT rows and one row (above) and its region items of more rows; AMD_L2's every item of
   * 1 .. DEC_NT_ROWS rows (dec_tuning) */
  const int pf_l2 = tune == DEC_TUNE_AMD_L2 ? c.R <= DEC_NT_ROWS
                                            : !zen && ((c.hg == 1 && c.R <= DEC_NT_ROWS) || (c.region && c.R > 1));
  if (pf_l2) c.pf_keep = DEC_PF_L2;
  /* the region's tile: DEC_REGION_BYTES of K (one row: 2x, 4x that on Intel; more: 4x on AMD_L2), 1 .. DEC_BK keys */
  if (c.region && p->block_k <= 0) {
    const int64_t one = zen ? 2 : 2 * DEC_REGION_ONE_ROW_INTEL,
                  more = tune == DEC_TUNE_AMD_L2 ? DEC_REGION_ROWS_AMD_L2 : 1;
    const int64_t bk = (c.R == 1 ? one : more) * (int64_t)DEC_REGION_BYTES / (p->Hkv * p->D * kes);
    c.bk = bk < 1 ? 1 : bk > DEC_BK ? DEC_BK : (int)bk;
  } else if (c.hg > 1 && !zen && p->block_k <= 0) { /* Intel, interleaved heads off the region path */
    c.bk = DEC_HG_BK_INTEL;
  } else if (p->block_k > 0 || !nt_tile) { /* Intel: DEC_BK for the NT rows too (DEC_PF_L2 above) */
    c.bk = p->block_k > 0 ? p->block_k : DEC_BK;
  } else { /* DEC_TILE_BYTES / R of K, whole panels, 1 .. 8 of them */
    const int64_t kb = DEC_TILE_BYTES / (c.R > 0 ? c.R : 1), rowb = p->D * (int64_t)fa_dtype_size(p->k.dtype);
    const int64_t bk = kb / rowb / FA_CPU_PANEL * FA_CPU_PANEL;
    c.bk = bk < FA_CPU_PANEL ? FA_CPU_PANEL : bk > DEC_BK ? DEC_BK : (int)bk;
  }
  if (c.region && !zen) { /* Intel (above): one row, the next head's rows come next; more, each head's own */
    c.own = c.R > 1;
    c.region = 0;
  }
  if (c.bk > 65536) c.bk = 65536; /* as fa_cpu_plan_get cuts asked-for tiles */
  if (c.bk > keys) c.bk = (int)keys;
  c.lds = (c.bk + FA_CPU_PANEL - 1) / FA_CPU_PANEL * FA_CPU_PANEL;
  c.D = (int)p->D;
  c.Dv = (int)p->Dv;
  c.elementwise = p->softcap > 0 || p->alibi_slopes != NULL;
  const int pairs = kt->dec_scores_pairs && kt->dec_pv_pairs && c.R >= DEC_PAIRS_ROWS;
  c.scores = pairs ? kt->dec_scores_pairs : kt->dec_scores;
  c.pv = pairs ? kt->dec_pv_pairs : kt->dec_pv;
  /* A cache laid out [.., L, Hkv, D] (vLLM's pages, or [B, L, H, D]) keeps
   * the kv heads of one token side by side: an item per kv head would touch
   * each 4 KiB page once per head (a TLB walk each time) and walk rows too
   * far apart for the hardware prefetcher. Then one item takes every kv
   * head of its keys, tile by tile, and the threads share the keys
   * (splits) instead (c.hg, set above). The per-head arithmetic is the
   * same either way. */
  const int64_t base = p->B * ((p->Hkv + c.hg - 1) / c.hg);
  int nsplit = p->kvcache ? p->kv.num_splits : 0;
  if (nsplit <= 0) {
    /* about 8 items per thread, each split at least DEC_MIN_SPLIT keys: the
     * items are taken one at a time, so when a thread is held up (a shared
     * machine) the others take over its share, up to the item it holds */
    const int nt = fa__cpu_threads(p, INT32_MAX);
    int64_t want = base >= 8 * (int64_t)nt ? 1 : (8 * (int64_t)nt + base - 1) / base;
    const int64_t most = p->Lk / DEC_MIN_SPLIT > 1 ? p->Lk / DEC_MIN_SPLIT : 1;
    nsplit = (int)(want < most ? want : most);
    if (!zen) { /* Intel: items of at least DEC_SPLIT_BYTES_INTEL, but one for every thread */
      const int64_t vs = (int64_t)fa_dtype_size(p->v.dtype);
      const int64_t bytes = keys * c.hg * (p->D * kes + p->Dv * vs); /* K and V of one (b, kv head group) */
      const int64_t few = bytes / DEC_SPLIT_BYTES_INTEL, one_each = (nt + base - 1) / base;
      const int64_t cap = few > one_each ? few : one_each;
      if (nsplit > cap) nsplit = (int)cap;
    }
  }
  if (nsplit > 4096) nsplit = 4096;
  if (nsplit > (keys + c.bk - 1) / c.bk) nsplit = (int)((keys + c.bk - 1) / c.bk); /* whole tiles each */
  c.nsplit = nsplit;
  const int64_t items = base * nsplit;
  if (nsplit > 1) {
    const size_t rows = (size_t)(p->B * p->Hkv * nsplit) * (size_t)c.R; /* parts: (b, kv head, split) */
    c.part_o = (float *)malloc(rows * (size_t)c.Dv * sizeof(float));
    c.part_lse = (float *)malloc(rows * sizeof(float));
    c.left = (atomic_int *)malloc((size_t)base * sizeof(atomic_int));
    if (!c.part_o || !c.part_lse || !c.left) {
      free(c.part_o);
      free(c.part_lse);
      free(c.left);
      fa__err_set(err, "cpu decode: cannot allocate the partial results of %d splits", nsplit);
      return FA_ERR_OUT_OF_MEMORY;
    }
    for (int64_t g = 0; g < base; ++g) atomic_init(&c.left[g], nsplit);
  }
  fa_status st = fa__cpu_for_items(p, items, &c, sizeof(dec_scratch), dec_carve, dec_item, err, "cpu decode");
  free(c.part_o);
  free(c.part_lse);
  free(c.left);
  return st;
}

fa_status fa__cpu_forward_kvcache(const fa__problem *p, const fa__cpu_kernels *kt, fa__err *err) {
  fa__kv_append_host(p);
  return fa__cpu_decode(p, kt, err);
}
