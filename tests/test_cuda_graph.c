/* The cuda backend inside CUDA graphs, and its read-backs in stream order.
 *
 * A decode server captures a step into a CUDA graph once and replays it
 * (vLLM, SGLang): the calls must enqueue only stream work (no host wait, no
 * copy the host reads), and a replay must compute what an eager call on the
 * same inputs computes. Here each captured call is replayed over several
 * steps whose inputs (q, the new tokens, cache_seqlens, the parts of a
 * merge) change in place between replays, and every replay is held to an
 * eager call on a second set of buffers with the same inputs: the same bits
 * (the split count depends only on the shapes, and the graph runs the same
 * kernels). Covered: fa_forward_kvcache appending one token (contiguous and
 * paged caches; split merges in the combine kernel, and again with the
 * eager calls merging in the decode kernel's last blocks through their
 * stream's counters, FLASHATTN_CUDA_DECODE_FUSED_MERGE=1, while a captured
 * call merges in the combine kernel: the same bits),
 * fa_forward and the deterministic fa_backward (stream-ordered scratch
 * becomes the graph's own memory, where the eager calls take it from the
 * library's scratch pool, src/cuda/scratch_pool.h, or on odd steps, with
 * FLASHATTN_CUDA_SCRATCH_KEEP=0, from the device's default pool: the same
 * bits every way), fa_merge_states.
 *
 * What cannot be captured is refused before anything is enqueued, with a
 * message naming the argument, and the capture stays valid: checked
 * kv-cache calls (they read cache_seqlens back), fa_forward with device
 * lengths, fa_merge_states of more parts than its kernel's parameters hold.
 *
 * And outside graphs: the checks read the lengths in the order of the
 * context's stream (a length written on a non-blocking stream after a slow
 * host callback must be the value checked; a plain cudaMemcpy, on the
 * legacy stream, would read the old one); the decode's per-stream buffers
 * give every stream the same bits (new, grown, or past the table of
 * streams).
 *
 * Needs a GPU: without one every test is skipped and the program exits 77. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/element.h"
#include "flashattn.h"
#include "support/cm.h"
#include "support/rng.h"

#define SKIP_RETURN_CODE 77

static int g_usable;

#define CU(call)                                                              \
  do {                                                                        \
    const cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

static void *dalloc(size_t bytes) {
  void *p = NULL;
  CU(cudaMalloc(&p, bytes));
  return p;
}

/* n random elements of dtype dt (normal, scaled) into host memory. */
static void *hrandom(trng *r, fa_dtype dt, size_t n, double scale) {
  unsigned char *h = malloc(n * fa_dtype_size(dt));
  for (size_t i = 0; i < n; ++i) fa__elem_set(h, dt, (int64_t)i, scale * trng_normal(r));
  return h;
}

static fa_tensor dtensor(void *p, fa_dtype dt, int64_t b, int64_t h, int64_t l, int64_t d) {
  fa_tensor t = fa_tensor_contiguous(p, dt, b, h, l, d);
  t.memory = FA_MEMORY_CUDA;
  return t;
}

/* A context whose calls go to a new non-blocking stream (as PyTorch's side
 * streams are: no implicit ordering with the legacy stream). */
static fa_context *context_on_new_stream(cudaStream_t *st) {
  CU(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
  fa_context *ctx;
  assert_int_equal(fa_context_create(&ctx), FA_OK);
  assert_int_equal(fa_context_set_stream(ctx, *st), FA_OK);
  return ctx;
}

/* Device buffers a and b hold the same bytes. */
static void expect_same_bytes(const void *a, const void *b, size_t bytes, const char *what, int step) {
  unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
  size_t i = 0;
  while (i < bytes && ha[i] == hb[i]) ++i;
  free(ha);
  free(hb);
  if (i < bytes)
    fail_msg("%s, step %d: the replay differs from the eager call at byte %zu of %zu", what, step, i, bytes);
}

static int has_nonzero(const void *d, size_t bytes) {
  unsigned char *h = malloc(bytes);
  CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  int any = 0;
  for (size_t i = 0; i < bytes && !any; ++i) any = h[i] != 0;
  free(h);
  return any;
}

/* ---- a decode step in a graph ------------------------------------------ */

/* Split calls merge in the combine kernel unless
 * FLASHATTN_CUDA_DECODE_FUSED_MERGE=1 asks for the fused merge (each item's
 * last split block merges, through its stream's counters; a captured call
 * merges in the combine kernel either way). The tests run once as they
 * are and once with it set (fused_merge_setup / _teardown), so that the
 * fused path is held to the same bits and the stream's counters are used
 * (test_stream_buffers runs with it set). */
static const char kFusedMerge[] = "FLASHATTN_CUDA_DECODE_FUSED_MERGE";
static char *g_fused_was; /* its value before the setup; NULL: unset */

static int fused_merge_setup(void **state) {
  (void)state;
  const char *was = getenv(kFusedMerge);
  g_fused_was = was ? strdup(was) : NULL;
  return was && !g_fused_was ? -1 : setenv(kFusedMerge, "1", 1);
}

static int fused_merge_teardown(void **state) {
  (void)state;
  const int r = g_fused_was ? setenv(kFusedMerge, g_fused_was, 1) : unsetenv(kFusedMerge);
  free(g_fused_was);
  g_fused_was = NULL;
  return r;
}

typedef struct decode_shape {
  const char *name;
  int B, Hq, Hkv, page; /* page 0: contiguous [B, Hkv, cap, D] */
} decode_shape;

/* few items and 32 items (every shape splits its keys) */
static const decode_shape shapes[] = {
    {"B=2 GQA 8/2 contiguous", 2, 8, 2, 0},
    {"B=2 GQA 8/2 pages of 16", 2, 8, 2, 16},
    {"B=8 GQA 16/4 contiguous (32 items)", 8, 16, 4, 0},
    {"B=8 GQA 16/4 pages of 16 (32 items)", 8, 16, 4, 16},
};

enum { DEC_D = 128, DEC_CAP = 512, DEC_STEPS = 3 };

typedef struct decode_bufs {
  void *k, *v, *o, *lse;
} decode_bufs;

static fa_kvcache decode_cache(const decode_shape *s, const decode_bufs *b, void *seqlens, void *bt, void *kn,
                               void *vn) {
  fa_kvcache kv;
  memset(&kv, 0, sizeof kv);
  const fa_dtype dt = FA_BF16;
  if (s->page) {
    const int64_t blocks = DEC_CAP / s->page, pages = s->B * blocks;
    const int64_t sh[4] = {pages, s->Hkv, s->page, DEC_D}, sd[4] = {s->page * s->Hkv * DEC_D, DEC_D, s->Hkv * DEC_D, 1};
    kv.k_cache = dtensor(b->k, dt, 1, 1, 1, 1);
    kv.v_cache = dtensor(b->v, dt, 1, 1, 1, 1);
    memcpy(kv.k_cache.shape, sh, sizeof sh);
    memcpy(kv.k_cache.stride, sd, sizeof sd);
    memcpy(kv.v_cache.shape, sh, sizeof sh);
    memcpy(kv.v_cache.stride, sd, sizeof sd);
    kv.block_table = bt;
    kv.max_blocks = blocks;
  } else {
    kv.k_cache = dtensor(b->k, dt, s->B, s->Hkv, DEC_CAP, DEC_D);
    kv.v_cache = dtensor(b->v, dt, s->B, s->Hkv, DEC_CAP, DEC_D);
  }
  kv.cache_seqlens = seqlens;
  kv.k_new = dtensor(kn, dt, s->B, s->Hkv, 1, DEC_D);
  kv.v_new = dtensor(vn, dt, s->B, s->Hkv, 1, DEC_D);
  return kv;
}

static void test_decode_step_replays(void **state) {
  (void)state;
  if (!g_usable) skip();
  const fa_dtype dt = FA_BF16;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
    const decode_shape *s = &shapes[si];
    trng r = {0x9a9b + si};
    const size_t cache_n = (size_t)s->B * s->Hkv * DEC_CAP * DEC_D, q_n = (size_t)s->B * s->Hq * DEC_D,
                 new_n = (size_t)s->B * s->Hkv * DEC_D, es = fa_dtype_size(dt);
    /* one cache for the graph, one for the eager calls, the same bytes */
    void *hk = hrandom(&r, dt, cache_n, 1.0), *hv = hrandom(&r, dt, cache_n, 1.0);
    decode_bufs g = {dalloc(cache_n * es), dalloc(cache_n * es), dalloc(q_n * es), dalloc((size_t)s->B * s->Hq * 4)};
    decode_bufs e = {dalloc(cache_n * es), dalloc(cache_n * es), dalloc(q_n * es), dalloc((size_t)s->B * s->Hq * 4)};
    CU(cudaMemcpy(g.k, hk, cache_n * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(g.v, hv, cache_n * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(e.k, hk, cache_n * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(e.v, hv, cache_n * es, cudaMemcpyHostToDevice));
    /* the step's inputs, shared by both: q, the new token, the lengths, pages shuffled */
    void *q = dalloc(q_n * es), *kn = dalloc(new_n * es), *vn = dalloc(new_n * es);
    void *seqlens = dalloc((size_t)s->B * 4), *bt = NULL;
    int32_t hlen[8];
    for (int b = 0; b < s->B; ++b) hlen[b] = 100 + (int32_t)(trng_u64(&r) % 380);
    if (s->page) {
      const int blocks = DEC_CAP / s->page, pages = s->B * blocks;
      int32_t *hbt = malloc((size_t)pages * sizeof(int32_t));
      for (int i = 0; i < pages; ++i) hbt[i] = i;
      for (int i = pages - 1; i > 0; --i) {
        const int j = (int)(trng_u64(&r) % (uint64_t)(i + 1));
        const int32_t t = hbt[i];
        hbt[i] = hbt[j];
        hbt[j] = t;
      }
      bt = dalloc((size_t)pages * sizeof(int32_t));
      CU(cudaMemcpy(bt, hbt, (size_t)pages * sizeof(int32_t), cudaMemcpyHostToDevice));
      free(hbt);
    }
    cudaStream_t st;
    fa_context *ctx = context_on_new_stream(&st);
    assert_int_equal(fa_context_set_device_checks(ctx, 0), FA_OK);
    fa_options opt;
    fa_options_init(&opt);
    opt.causal = 1;
    fa_tensor tq = dtensor(q, dt, s->B, s->Hq, 1, DEC_D);
    fa_tensor tgo = dtensor(g.o, dt, s->B, s->Hq, 1, DEC_D), tgl = dtensor(g.lse, FA_F32, s->B, s->Hq, 1, 1);
    fa_tensor teo = dtensor(e.o, dt, s->B, s->Hq, 1, DEC_D), tel = dtensor(e.lse, FA_F32, s->B, s->Hq, 1, 1);
    fa_kvcache kg = decode_cache(s, &g, seqlens, bt, kn, vn), ke = decode_cache(s, &e, seqlens, bt, kn, vn);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    const fa_status cst = fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &tq, &kg, &opt, &tgo, &tgl);
    CU(cudaStreamEndCapture(st, &graph));
    if (cst != FA_OK) fail_msg("%s: captured call: %s: %s", s->name, fa_status_name(cst), fa_context_last_error(ctx));
    CU(cudaGraphInstantiate(&exec, graph, 0));
    /* capturing ran nothing: the cache is as it was */
    expect_same_bytes(g.k, e.k, cache_n * es, s->name, -1);

    for (int step = 0; step < DEC_STEPS; ++step) {
      void *hq = hrandom(&r, dt, q_n, 1.0), *hkn = hrandom(&r, dt, new_n, 1.0), *hvn = hrandom(&r, dt, new_n, 1.0);
      CU(cudaMemcpyAsync(q, hq, q_n * es, cudaMemcpyHostToDevice, st));
      CU(cudaMemcpyAsync(kn, hkn, new_n * es, cudaMemcpyHostToDevice, st));
      CU(cudaMemcpyAsync(vn, hvn, new_n * es, cudaMemcpyHostToDevice, st));
      CU(cudaMemcpyAsync(seqlens, hlen, (size_t)s->B * 4, cudaMemcpyHostToDevice, st));
      CU(cudaStreamSynchronize(st));
      CU(cudaGraphLaunch(exec, st));
      const fa_status est = fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &tq, &ke, &opt, &teo, &tel);
      if (est != FA_OK) fail_msg("%s: eager call: %s", s->name, fa_context_last_error(ctx));
      CU(cudaStreamSynchronize(st));
      expect_same_bytes(g.o, e.o, q_n * es, s->name, step);
      expect_same_bytes(g.lse, e.lse, (size_t)s->B * s->Hq * 4, s->name, step);
      assert_true(has_nonzero(g.o, q_n * es));
      for (int b = 0; b < s->B; ++b) hlen[b] += 1 + step; /* the appended token, and a jump */
      free(hq);
      free(hkn);
      free(hvn);
    }
    /* the appends of every replay landed where the eager calls put theirs */
    expect_same_bytes(g.k, e.k, cache_n * es, s->name, DEC_STEPS);
    expect_same_bytes(g.v, e.v, cache_n * es, s->name, DEC_STEPS);

    CU(cudaGraphExecDestroy(exec));
    CU(cudaGraphDestroy(graph));
    fa_context_destroy(ctx);
    CU(cudaStreamDestroy(st));
    decode_bufs *all[2] = {&g, &e};
    for (int i = 0; i < 2; ++i) {
      cudaFree(all[i]->k);
      cudaFree(all[i]->v);
      cudaFree(all[i]->o);
      cudaFree(all[i]->lse);
    }
    cudaFree(q);
    cudaFree(kn);
    cudaFree(vn);
    cudaFree(seqlens);
    cudaFree(bt);
    free(hk);
    free(hv);
  }
}

/* ---- forward and deterministic backward in a graph ---------------------- */

static void test_forward_backward_replays(void **state) {
  (void)state;
  if (!g_usable) skip();
  enum { B = 2, HQ = 4, HKV = 2, L = 300, D = 64, STEPS = 2 };
  const fa_dtype dt = FA_BF16;
  const size_t es = fa_dtype_size(dt), qn = (size_t)B * HQ * L * D, kn = (size_t)B * HKV * L * D,
               ln = (size_t)B * HQ * L;
  trng r = {0xf00d};
  void *q = dalloc(qn * es), *k = dalloc(kn * es), *v = dalloc(kn * es), *dout = dalloc(qn * es);
  /* [0]: the graph's outputs, [1]: the eager calls' */
  void *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
  for (int i = 0; i < 2; ++i) {
    o[i] = dalloc(qn * es);
    lse[i] = dalloc(ln * 4);
    dq[i] = dalloc(qn * es);
    dk[i] = dalloc(kn * es);
    dv[i] = dalloc(kn * es);
  }
  cudaStream_t st;
  fa_context *ctx = context_on_new_stream(&st);
  fa_options opt;
  fa_options_init(&opt);
  opt.causal = 1;
  opt.deterministic = 1;
  fa_tensor tq = dtensor(q, dt, B, HQ, L, D), tk = dtensor(k, dt, B, HKV, L, D), tv = dtensor(v, dt, B, HKV, L, D),
            tdo = dtensor(dout, dt, B, HQ, L, D);
  fa_tensor to[2], tl[2], tdq[2], tdk[2], tdv[2];
  for (int i = 0; i < 2; ++i) {
    to[i] = dtensor(o[i], dt, B, HQ, L, D);
    tl[i] = dtensor(lse[i], FA_F32, B, HQ, L, 1);
    tdq[i] = dtensor(dq[i], dt, B, HQ, L, D);
    tdk[i] = dtensor(dk[i], dt, B, HKV, L, D);
    tdv[i] = dtensor(dv[i], dt, B, HKV, L, D);
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  fa_status fs = fa_forward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &opt, &to[0], &tl[0]);
  fa_status bs = fs == FA_OK ? fa_backward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &to[0], &tdo, &tl[0], &opt, &tdq[0],
                                           &tdk[0], &tdv[0], NULL)
                             : fs;
  CU(cudaStreamEndCapture(st, &graph));
  if (bs != FA_OK) fail_msg("captured forward + backward: %s: %s", fa_status_name(bs), fa_context_last_error(ctx));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int step = 0; step < STEPS; ++step) {
    void *h[4] = {hrandom(&r, dt, qn, 1.0), hrandom(&r, dt, kn, 1.0), hrandom(&r, dt, kn, 1.0),
                  hrandom(&r, dt, qn, 1.0)};
    void *d[4] = {q, k, v, dout};
    const size_t n[4] = {qn, kn, kn, qn};
    for (int i = 0; i < 4; ++i) CU(cudaMemcpyAsync(d[i], h[i], n[i] * es, cudaMemcpyHostToDevice, st));
    CU(cudaStreamSynchronize(st));
    CU(cudaGraphLaunch(exec, st));
    fs = fa_forward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &opt, &to[1], &tl[1]);
    if (fs != FA_OK) fail_msg("eager forward: %s", fa_context_last_error(ctx));
    if (step % 2) setenv("FLASHATTN_CUDA_SCRATCH_KEEP", "0", 1);
    bs = fa_backward(ctx, FA_BACKEND_CUDA, &tq, &tk, &tv, &to[1], &tdo, &tl[1], &opt, &tdq[1], &tdk[1], &tdv[1], NULL);
    unsetenv("FLASHATTN_CUDA_SCRATCH_KEEP");
    if (bs != FA_OK) fail_msg("eager backward: %s", fa_context_last_error(ctx));
    CU(cudaStreamSynchronize(st));
    expect_same_bytes(o[0], o[1], qn * es, "forward o", step);
    expect_same_bytes(lse[0], lse[1], ln * 4, "forward lse", step);
    expect_same_bytes(dq[0], dq[1], qn * es, "deterministic backward dq", step);
    expect_same_bytes(dk[0], dk[1], kn * es, "deterministic backward dk", step);
    expect_same_bytes(dv[0], dv[1], kn * es, "deterministic backward dv", step);
    assert_true(has_nonzero(dq[0], qn * es));
    for (int i = 0; i < 4; ++i) free(h[i]);
  }
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  fa_context_destroy(ctx);
  CU(cudaStreamDestroy(st));
  void *all[] = {q, k, v, dout, o[0], o[1], lse[0], lse[1], dq[0], dq[1], dk[0], dk[1], dv[0], dv[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
}

/* ---- fa_merge_states in a graph ----------------------------------------- */

static void test_merge_replays(void **state) {
  (void)state;
  if (!g_usable) skip();
  enum { NP = 3, B = 2, H = 3, L = 5, DV = 40, STEPS = 2 };
  const size_t on = (size_t)B * H * L * DV, ln = (size_t)B * H * L;
  trng r = {0x3e3e};
  void *po[NP], *pl[NP];
  fa_tensor to[NP], tl[NP];
  for (int k = 0; k < NP; ++k) {
    po[k] = dalloc(on * 4);
    pl[k] = dalloc(ln * 4);
    to[k] = dtensor(po[k], FA_F32, B, H, L, DV);
    tl[k] = dtensor(pl[k], FA_F32, B, H, L, 1);
  }
  void *o[2], *lse[2];
  fa_tensor tro[2], trl[2];
  for (int i = 0; i < 2; ++i) {
    o[i] = dalloc(on * 2);
    lse[i] = dalloc(ln * 4);
    tro[i] = dtensor(o[i], FA_BF16, B, H, L, DV);
    trl[i] = dtensor(lse[i], FA_F32, B, H, L, 1);
  }
  cudaStream_t st;
  fa_context *ctx = context_on_new_stream(&st);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  const fa_status cst = fa_merge_states(ctx, FA_BACKEND_CUDA, NP, to, tl, &tro[0], &trl[0]);
  CU(cudaStreamEndCapture(st, &graph));
  if (cst != FA_OK) fail_msg("captured merge: %s: %s", fa_status_name(cst), fa_context_last_error(ctx));
  CU(cudaGraphInstantiate(&exec, graph, 0));
  for (int step = 0; step < STEPS; ++step) {
    for (int k = 0; k < NP; ++k) {
      void *ho = hrandom(&r, FA_F32, on, 1.0), *hl = hrandom(&r, FA_F32, ln, 3.0);
      CU(cudaMemcpyAsync(po[k], ho, on * 4, cudaMemcpyHostToDevice, st));
      CU(cudaMemcpyAsync(pl[k], hl, ln * 4, cudaMemcpyHostToDevice, st));
      CU(cudaStreamSynchronize(st));
      free(ho);
      free(hl);
    }
    CU(cudaGraphLaunch(exec, st));
    const fa_status est = fa_merge_states(ctx, FA_BACKEND_CUDA, NP, to, tl, &tro[1], &trl[1]);
    if (est != FA_OK) fail_msg("eager merge: %s", fa_context_last_error(ctx));
    CU(cudaStreamSynchronize(st));
    expect_same_bytes(o[0], o[1], on * 2, "merge o", step);
    expect_same_bytes(lse[0], lse[1], ln * 4, "merge lse", step);
    assert_true(has_nonzero(o[0], on * 2));
  }
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  fa_context_destroy(ctx);
  CU(cudaStreamDestroy(st));
  for (int k = 0; k < NP; ++k) {
    cudaFree(po[k]);
    cudaFree(pl[k]);
  }
  for (int i = 0; i < 2; ++i) {
    cudaFree(o[i]);
    cudaFree(lse[i]);
  }
}

/* ---- what a capture cannot take ---------------------------------------- */

/* Begins a capture on st, runs what, ends it: the capture must still be
 * valid (cudaStreamEndCapture succeeds) and hold nothing. */
static void expect_refused_in_capture(cudaStream_t st, fa_context *ctx, fa_status (*what)(fa_context *, void *),
                                      void *arg, fa_status want, const char *needle1, const char *needle2,
                                      const char *label) {
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  const fa_status got = what(ctx, arg);
  const cudaError_t end = cudaStreamEndCapture(st, &graph);
  if (end != cudaSuccess) fail_msg("%s: the refused call invalidated the capture (%s)", label, cudaGetErrorString(end));
  size_t nodes = 99;
  CU(cudaGraphGetNodes(graph, NULL, &nodes));
  CU(cudaGraphDestroy(graph));
  if (got != want)
    fail_msg("%s: %s (%s), expected %s", label, fa_status_name(got), fa_context_last_error(ctx), fa_status_name(want));
  const char *msg = fa_context_last_error(ctx);
  if (!strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
    fail_msg("%s: the message does not name '%s'%s%s: %s", label, needle1, needle2 ? " and " : "",
             needle2 ? needle2 : "", msg);
  if (nodes != 0) fail_msg("%s: the refused call enqueued %zu operations", label, nodes);
}

typedef struct refusal_args {
  fa_tensor q, k, v, o, lse;
  fa_kvcache kv;
  fa_options opt;
  int nparts;
  fa_tensor *po, *pl;
} refusal_args;

static fa_status call_kvcache(fa_context *ctx, void *a) {
  refusal_args *x = a;
  return fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &x->q, &x->kv, &x->opt, &x->o, &x->lse);
}

static fa_status call_forward(fa_context *ctx, void *a) {
  refusal_args *x = a;
  return fa_forward(ctx, FA_BACKEND_CUDA, &x->q, &x->k, &x->v, &x->opt, &x->o, &x->lse);
}

static fa_status call_merge(fa_context *ctx, void *a) {
  refusal_args *x = a;
  return fa_merge_states(ctx, FA_BACKEND_CUDA, x->nparts, x->po, x->pl, &x->o, &x->lse);
}

static void test_capture_refusals(void **state) {
  (void)state;
  if (!g_usable) skip();
  enum { B = 2, H = 2, L = 64, D = 64, NP = 40 };
  const fa_dtype dt = FA_BF16;
  const size_t n = (size_t)B * H * L * D;
  void *q = dalloc(n * 2), *k = dalloc(n * 2), *v = dalloc(n * 2), *o = dalloc(n * 2), *lse = dalloc(B * H * L * 4);
  void *lens = dalloc(B * 4), *parts = dalloc(n * 4), *plse = dalloc(B * H * L * 4);
  CU(cudaMemset(q, 0, n * 2));
  CU(cudaMemset(k, 0, n * 2));
  CU(cudaMemset(v, 0, n * 2));
  const int32_t hl[B] = {10, 20};
  CU(cudaMemcpy(lens, hl, sizeof hl, cudaMemcpyHostToDevice));
  cudaStream_t st;
  fa_context *ctx = context_on_new_stream(&st);
  refusal_args a;
  memset(&a, 0, sizeof a);
  a.q = dtensor(q, dt, B, H, 1, D);
  a.o = dtensor(o, dt, B, H, 1, D);
  a.lse = dtensor(lse, FA_F32, B, H, 1, 1);
  a.kv.k_cache = dtensor(k, dt, B, H, L, D);
  a.kv.v_cache = dtensor(v, dt, B, H, L, D);
  a.kv.cache_seqlens = lens;
  fa_options_init(&a.opt);
  /* checked kv-cache call: refused, pointing at the switch */
  expect_refused_in_capture(st, ctx, call_kvcache, &a, FA_ERR_UNSUPPORTED, "cache->cache_seqlens", "device_checks",
                            "checked fa_forward_kvcache in a capture");
  /* the same call unchecked is taken (the test above replays such calls) */
  assert_int_equal(fa_context_set_device_checks(ctx, 0), FA_OK);
  assert_int_equal(call_kvcache(ctx, &a), FA_OK);
  assert_int_equal(fa_context_set_device_checks(ctx, 1), FA_OK);
  /* fa_forward with lengths in device memory */
  a.q = dtensor(q, dt, B, H, L, D);
  a.k = dtensor(k, dt, B, H, L, D);
  a.v = dtensor(v, dt, B, H, L, D);
  a.o = dtensor(o, dt, B, H, L, D);
  a.lse = dtensor(lse, FA_F32, B, H, L, 1);
  a.opt.seqlens_k = lens;
  expect_refused_in_capture(st, ctx, call_forward, &a, FA_ERR_UNSUPPORTED, "opt->seqlens_k", "host memory",
                            "fa_forward with device seqlens_k in a capture");
  a.opt.seqlens_k = NULL;
  /* merging more parts than the kernel's parameters hold */
  fa_tensor po[NP], pl[NP];
  for (int i = 0; i < NP; ++i) {
    po[i] = dtensor(parts, FA_F32, B, H, L, D);
    pl[i] = dtensor(plse, FA_F32, B, H, L, 1);
  }
  a.nparts = NP;
  a.po = po;
  a.pl = pl;
  expect_refused_in_capture(st, ctx, call_merge, &a, FA_ERR_UNSUPPORTED, "n = 40", NULL,
                            "fa_merge_states of 40 parts in a capture");
  CU(cudaStreamSynchronize(st));
  fa_context_destroy(ctx);
  CU(cudaStreamDestroy(st));
  void *all[] = {q, k, v, o, lse, lens, parts, plse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
}

/* ---- the checks read in the stream's order ------------------------------ */

static void CUDART_CB slow_host(void *arg) {
  (void)arg;
  const struct timespec t = {0, 300 * 1000 * 1000};
  nanosleep(&t, NULL);
}

static void test_checks_follow_the_stream(void **state) {
  (void)state;
  if (!g_usable) skip();
  enum { B = 2, H = 2, L = 64, D = 64 };
  const fa_dtype dt = FA_BF16;
  const size_t n = (size_t)B * H * L * D;
  void *q = dalloc(B * H * D * 2), *k = dalloc(n * 2), *v = dalloc(n * 2), *o = dalloc(B * H * D * 2),
       *lse = dalloc(B * H * 4), *lens = dalloc(B * 4);
  CU(cudaMemset(q, 0, B * H * D * 2));
  CU(cudaMemset(k, 0, n * 2));
  CU(cudaMemset(v, 0, n * 2));
  cudaStream_t st;
  fa_context *ctx = context_on_new_stream(&st);
  fa_options opt;
  fa_options_init(&opt);
  fa_kvcache kv;
  memset(&kv, 0, sizeof kv);
  kv.k_cache = dtensor(k, dt, B, H, L, D);
  kv.v_cache = dtensor(v, dt, B, H, L, D);
  kv.cache_seqlens = lens;
  fa_tensor tq = dtensor(q, dt, B, H, 1, D), to = dtensor(o, dt, B, H, 1, D), tl = dtensor(lse, FA_F32, B, H, 1, 1);
  /* good lengths now; a bad one queued behind a slow callback */
  const int32_t good[B] = {10, 20}, bad[B] = {10, L + 5};
  CU(cudaMemcpy(lens, good, sizeof good, cudaMemcpyHostToDevice));
  CU(cudaLaunchHostFunc(st, slow_host, NULL));
  CU(cudaMemcpyAsync(lens, bad, sizeof bad, cudaMemcpyHostToDevice, st));
  fa_status got = fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &tq, &kv, &opt, &to, &tl);
  if (got != FA_ERR_SEQLENS)
    fail_msg(
        "a length queued on the context's stream before the call: %s (%s), expected FA_ERR_SEQLENS: the check "
        "read the array before the stream's earlier work",
        fa_status_name(got), fa_context_last_error(ctx));
  assert_non_null(strstr(fa_context_last_error(ctx), "cache->cache_seqlens[1]"));
  /* and the other way round: bad now, good queued */
  CU(cudaLaunchHostFunc(st, slow_host, NULL));
  CU(cudaMemcpyAsync(lens, good, sizeof good, cudaMemcpyHostToDevice, st));
  got = fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &tq, &kv, &opt, &to, &tl);
  if (got != FA_OK) fail_msg("good lengths queued before the call: %s", fa_context_last_error(ctx));
  CU(cudaStreamSynchronize(st));
  fa_context_destroy(ctx);
  CU(cudaStreamDestroy(st));
  void *all[] = {q, k, v, o, lse, lens};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
}

/* ---- the decode's per-stream buffers ------------------------------------ */

typedef struct plain_decode {
  int B, Hq, Hkv, Lq, cap;
  void *q, *k, *v, *lens;
  size_t o_bytes;
} plain_decode;

static plain_decode plain_make(trng *r, int B, int Hq, int Hkv, int Lq, int cap) {
  plain_decode P = {B, Hq, Hkv, Lq, cap, NULL, NULL, NULL, NULL, (size_t)B * Hq * Lq * DEC_D * 2};
  const size_t qn = (size_t)B * Hq * Lq * DEC_D, kn = (size_t)B * Hkv * cap * DEC_D;
  void *h[3] = {hrandom(r, FA_BF16, qn, 1.0), hrandom(r, FA_BF16, kn, 1.0), hrandom(r, FA_BF16, kn, 1.0)};
  void **d[3] = {&P.q, &P.k, &P.v};
  const size_t n[3] = {qn, kn, kn};
  for (int i = 0; i < 3; ++i) {
    *d[i] = dalloc(n[i] * 2);
    CU(cudaMemcpy(*d[i], h[i], n[i] * 2, cudaMemcpyHostToDevice));
    free(h[i]);
  }
  int32_t len[16];
  for (int b = 0; b < B; ++b) len[b] = cap / 2 + (int32_t)(trng_u64(r) % (uint64_t)(cap / 2));
  P.lens = dalloc((size_t)B * 4);
  CU(cudaMemcpy(P.lens, len, (size_t)B * 4, cudaMemcpyHostToDevice));
  return P;
}

/* o of P's call (unchecked, split count chosen by the library) on ctx's stream st, into host memory. */
static void plain_run(fa_context *ctx, cudaStream_t st, const plain_decode *P, void *o_dev, unsigned char *o_host) {
  fa_kvcache kv;
  memset(&kv, 0, sizeof kv);
  kv.k_cache = dtensor(P->k, FA_BF16, P->B, P->Hkv, P->cap, DEC_D);
  kv.v_cache = dtensor(P->v, FA_BF16, P->B, P->Hkv, P->cap, DEC_D);
  kv.cache_seqlens = P->lens;
  fa_options opt;
  fa_options_init(&opt);
  opt.causal = 1;
  fa_tensor tq = dtensor(P->q, FA_BF16, P->B, P->Hq, P->Lq, DEC_D);
  fa_tensor to = dtensor(o_dev, FA_BF16, P->B, P->Hq, P->Lq, DEC_D);
  const fa_status s = fa_forward_kvcache(ctx, FA_BACKEND_CUDA, &tq, &kv, &opt, &to, NULL);
  if (s != FA_OK) fail_msg("decode call: %s", fa_context_last_error(ctx));
  CU(cudaStreamSynchronize(st));
  CU(cudaMemcpy(o_host, o_dev, P->o_bytes, cudaMemcpyDeviceToHost));
}

/* Split calls keep their partials (and the fused merge its counters) in
 * buffers of their stream: the same bits on every stream, whether the
 * stream's buffers are new, grown by a larger call (a small call, one with
 * partials over the first 1 MiB, one of 32 items, the small one again), or
 * missing because the table of streams is full (64 entries: past them a
 * call brings its own scratch and merges in the combine kernel). 70
 * streams, four calls each, against the first stream's results. */
static void test_stream_buffers(void **state) {
  (void)state;
  if (!g_usable) skip();
  enum { NSTREAMS = 70, NCALLS = 4 };
  trng r = {0xb0f};
  /* 4 items; 32 items; Lq 4, 8 kv heads, 16k keys: ~2 MiB of partials */
  plain_decode P[3] = {plain_make(&r, 2, 8, 2, 1, 512), plain_make(&r, 8, 16, 4, 1, 512),
                       plain_make(&r, 1, 32, 8, 4, 16384)};
  static const int order[NCALLS] = {0, 2, 1, 0};
  size_t most = 0;
  for (int i = 0; i < 3; ++i) most = P[i].o_bytes > most ? P[i].o_bytes : most;
  void *o_dev = dalloc(most);
  unsigned char *want[NCALLS], *got = malloc(most);
  for (int c = 0; c < NCALLS; ++c) want[c] = malloc(most);
  for (int si = 0; si < NSTREAMS; ++si) {
    cudaStream_t st;
    fa_context *ctx = context_on_new_stream(&st);
    assert_int_equal(fa_context_set_device_checks(ctx, 0), FA_OK);
    for (int c = 0; c < NCALLS; ++c) {
      const plain_decode *p = &P[order[c]];
      plain_run(ctx, st, p, o_dev, si == 0 ? want[c] : got);
      if (si > 0 && memcmp(got, want[c], p->o_bytes) != 0)
        fail_msg("stream %d, call %d (B=%d, Hkv=%d, Lq=%d, %d keys): not the first stream's bits", si, c, p->B, p->Hkv,
                 p->Lq, p->cap);
    }
    fa_context_destroy(ctx);
    CU(cudaStreamDestroy(st));
  }
  assert_true(has_nonzero(o_dev, P[order[NCALLS - 1]].o_bytes));
  for (int c = 0; c < NCALLS; ++c) free(want[c]);
  free(got);
  cudaFree(o_dev);
  for (int i = 0; i < 3; ++i) {
    cudaFree(P[i].q);
    cudaFree(P[i].k);
    cudaFree(P[i].v);
    cudaFree(P[i].lens);
  }
}

int main(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) (void)cudaGetLastError();
  g_usable = count > 0 && fa_backend_available(FA_BACKEND_CUDA, NULL, 0) == FA_OK;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_step_replays),
      {"test_decode_step_replays_fused_merge", test_decode_step_replays, fused_merge_setup, fused_merge_teardown, NULL},
      cmocka_unit_test(test_forward_backward_replays),
      cmocka_unit_test(test_merge_replays),
      cmocka_unit_test(test_capture_refusals),
      cmocka_unit_test(test_checks_follow_the_stream),
      /* with the fused merge, so that the streams' counters are used too;
       * once: the table of streams stays full after it */
      cmocka_unit_test_setup_teardown(test_stream_buffers, fused_merge_setup, fused_merge_teardown)};
  const int failed = cmocka_run_group_tests_name("cuda_graph", tests, NULL, NULL);
  return failed ? failed : g_usable ? 0 : SKIP_RETURN_CODE;
}
