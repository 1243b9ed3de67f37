/* flashattn: exact scaled-dot-product attention (FlashAttention), forward
 * and backward, behind one dispatch layer over three backends:
 *   ref  - float64, scalar, eager: the oracle
 *   cpu  - tiled online softmax, AVX-512 / AVX2+FMA / portable C, OpenMP
 *   cuda - tensor-core FlashAttention kernels
 *
 * The semantics (shapes, masks, fully masked rows, dropout, dispatch, bad
 * input) are fixed in DESIGN.md; this header is the whole public surface.
 * Public names are fa_ / FA_; everything else is internal. */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FA_BUILDING_SHARED)
#define FA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* ---- status ------------------------------------------------------------ */

/* Every call returns one of these; the context's last_error says more and
 * names the argument. */
typedef enum fa_status {
  FA_OK = 0,
  FA_ERR_NULL_POINTER,  /* a required pointer is NULL */
  FA_ERR_BAD_SIZE,      /* a size that must be positive is not (B, H, L, D = 0 included) */
  FA_ERR_SHAPE,         /* shapes that disagree with each other; or a tensor whose byte
                         * extent sum((shape[d]-1)*|stride[d]|)*element size overflows
                         * int64, or whose bytes would run below address 0 or past the
                         * last address; or sizes whose product (B*Hq*Lq*Lk*max(D,Dv))
                         * exceeds 2^60, beyond what the library can index */
  FA_ERR_OVERLAP,       /* an output overlaps an input or itself */
  FA_ERR_DTYPE,         /* a dtype this call or backend cannot take */
  FA_ERR_DROPOUT,       /* dropout_p outside [0, 1) */
  FA_ERR_HEADS,         /* Hq is not a multiple of Hkv */
  FA_ERR_SEQLENS,       /* seqlens / cu_seqlens / cache_seqlens / block_table values out of range
                         * (a KV cache that would grow past its capacity included) */
  FA_ERR_OPTION,        /* another option has a value out of range */
  FA_ERR_UNSUPPORTED,   /* the chosen backend lacks a feature the call uses */
  FA_ERR_NO_BACKEND,    /* backend not compiled in, or no device here */
  FA_ERR_MEMORY_SPACE,  /* host memory given where device memory is needed, or mixed */
  FA_ERR_OUT_OF_MEMORY, /* an allocation failed */
  FA_ERR_DEVICE,        /* the CUDA runtime reported an error */
  FA_ERR_INTERNAL       /* a bug: please report it */
} fa_status;

/* A constant English name for a status ("FA_ERR_SHAPE", ...). */
FA_API const char *fa_status_name(fa_status s);

/* ---- tensors ----------------------------------------------------------- */

typedef enum fa_dtype {
  FA_F32 = 0,
  FA_F64,
  FA_F16,
  FA_BF16,
  FA_BOOL,   /* one byte per element, non-zero = true; masks only */
  FA_F8_E4M3 /* one byte per element, OCP E4M3FN (torch.float8_e4m3fn): bias 7, no
              * infinities, NaN = S.1111.111, largest finite 448. q, k, v of the
              * FP8 forward only (docs/semantics.md, "FP8 (e4m3)") */
} fa_dtype;

FA_API const char *fa_dtype_name(fa_dtype t);
FA_API size_t fa_dtype_size(fa_dtype t);

typedef enum fa_memory {
  FA_MEMORY_AUTO = 0, /* ask the CUDA runtime (if built) whether data is device memory */
  FA_MEMORY_HOST,
  FA_MEMORY_CUDA
} fa_memory;

/* A tensor is a pointer plus sizes and element strides, in logical order:
 * q, k, v, o and their gradients are [B, H, L, D]; lse is [B, H, L] (shape[3]
 * and stride[3] are ignored); mask and bias are [B, Hq, Lq, Lk]. Any memory
 * layout works through the strides ([B, L, H, D] included). A stride of 0, or
 * a size of 1 where the call expects more, broadcasts (masks, biases). */
typedef struct fa_tensor {
  void *data;
  fa_dtype dtype;
  int64_t shape[4];
  int64_t stride[4];
  fa_memory memory;
} fa_tensor;

/* A contiguous tensor of the given shape (row-major, last dim fastest). */
FA_API fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/* ---- options ----------------------------------------------------------- */

typedef enum fa_align {
  FA_ALIGN_TOP_LEFT = 0, /* diag(i) = i            (PyTorch is_causal) */
  FA_ALIGN_BOTTOM_RIGHT  /* diag(i) = i + Lk - Lq  (FlashAttention >= 2.1, decode) */
} fa_align;

/* All options. A zeroed struct is the plain, unmasked attention with
 * scale 1/sqrt(D); fa_options_init() gives the same. */
typedef struct fa_options {
  double scale;         /* 0 = 1/sqrt(D) */
  double softcap;       /* > 0: s = softcap * tanh(s / softcap) */
  int causal;           /* = window (left -1, right 0) */
  fa_align align;       /* alignment of causal, window and ALiBi distances */
  int use_window;       /* sliding window: see window_left/right */
  int64_t window_left;  /* keys j >= diag(i) - left are visible; < 0 = unbounded */
  int64_t window_right; /* keys j <= diag(i) + right are visible; < 0 = unbounded */

  /* Padded layout: per-batch actual lengths [B], int32, in the same memory
   * as q. NULL = full length. */
  const int32_t *seqlens_q;
  const int32_t *seqlens_k;
  /* Packed variable-length layout: cumulative offsets [num_seqs + 1], int32,
   * starting at 0. Then q/k/v/o have shape[0] = 1 and shape[2] = total
   * tokens; lse is [1, Hq, total_q]; mask/bias/dropout index (b, h, i, j) by
   * the sequence b and positions i, j inside it. */
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  int64_t num_seqs; /* number of sequences when cu_seqlens_* are given */

  fa_tensor mask;            /* FA_BOOL [B, Hq, Lq, Lk]; data NULL = none */
  fa_tensor bias;            /* additive [B, Hq, Lq, Lk]; data NULL = none */
  const float *alibi_slopes; /* [Hq] f32 in the same memory as q; NULL = none */

  double dropout_p;        /* in [0, 1); 0 = no dropout, no RNG touched */
  uint64_t dropout_seed;   /* Philox key */
  uint32_t dropout_offset; /* Philox counter word 3: advance between calls */

  int deterministic; /* backward: same bits on every run and thread count */

  /* Tile sizes for the tiled backends (rows of Q, rows of K/V per tile);
   * 0 = the backend's default, derived from the cache sizes. For teaching
   * and tuning: results do not depend on them beyond rounding. */
  int block_q;
  int block_k;

  /* FP8 forward (q, k, v FA_F8_E4M3) only: f32 descale factors, shape
   * [B, Hkv] in shape[0..1] (shape[2..3] and stride[2..3] are not read; B =
   * num_seqs when packed), any strides, stride 0 or size 1 broadcasts; data
   * NULL = 1. The query head h reads entry [b, h / group] of q_descale too
   * (FlashAttention 3's convention). Scores are (q8 . k8) * q_descale *
   * k_descale * scale; o = (P8 V8) * v_descale / l. Same memory as q.
   * Appended last so that the offsets of the fields above stay. */
  fa_tensor q_descale, k_descale, v_descale;

  /* Positions of this call's rows inside a longer sequence (context/ring
   * parallelism: a rank computes one block of the whole attention). Query
   * row i of a sequence is position i + q_offset, key j is position
   * j + k_offset. Causal, window and ALiBi measure diag(i) - j with
   * diag(i) = i + q_offset - k_offset (+ Lk_b - Lq_b when bottom-right),
   * and dropout decides element (b, h, i + q_offset, j + k_offset), so a
   * block computed with its global starts sees exactly the scores and
   * keep bits of the one-call attention. Both in [0, 2^60]; 0 = as before.
   * fa_forward / fa_backward on every backend; fa_forward_kvcache refuses
   * non-zero offsets. Appended last (offsets of the fields above stay). */
  int64_t q_offset;
  int64_t k_offset;
} fa_options;

FA_API void fa_options_init(fa_options *opt);

/* ---- context and backends ---------------------------------------------- */

typedef enum fa_backend {
  FA_BACKEND_AUTO = 0,
  FA_BACKEND_REF,
  FA_BACKEND_CPU,
  FA_BACKEND_CUDA,
  FA_BACKEND_COUNT
} fa_backend;

FA_API const char *fa_backend_name(fa_backend b);
/* Parses "auto", "ref", "cpu", "cuda"; FA_ERR_OPTION otherwise. */
FA_API fa_status fa_backend_from_name(const char *name, fa_backend *out);

/* Is backend b compiled into this build and usable on this machine?
 * FA_OK, or FA_ERR_NO_BACKEND with the reason written to why (if non-NULL). */
FA_API fa_status fa_backend_available(fa_backend b, char *why, size_t why_size);

/* One line describing the current CUDA device (name, compute capability,
 * multiprocessors, memory), for tools and logs. FA_ERR_NO_BACKEND with the
 * reason in out when the build has no cuda backend or there is no device. */
FA_API fa_status fa_cuda_device_describe(char *out, size_t out_size);

/* The instruction set the cpu backend uses. */
typedef enum fa_cpu_isa {
  FA_ISA_AUTO = 0,   /* best the CPU has, unless FLASHATTN_ISA says otherwise */
  FA_ISA_GENERIC,    /* portable C */
  FA_ISA_AVX2,       /* AVX2 + FMA */
  FA_ISA_AVX512,     /* AVX-512F */
  FA_ISA_AVX512BF16, /* AVX-512F, and bf16 products on vdpbf16ps (AVX512-BF16) */
  FA_ISA_AMX         /* AVX512-BF16, and bf16 products on AMX tiles (tdpbf16ps, AMX-BF16) */
} fa_cpu_isa;

FA_API const char *fa_cpu_isa_name(fa_cpu_isa isa);
/* Does this CPU (and this build) have isa? */
FA_API int fa_cpu_isa_supported(fa_cpu_isa isa);

/* How the cpu backend tiles a problem with head dims D, Dv: the ISA it
 * would use, the tile sizes (the defaults derived from the cache sizes, or
 * block_q/block_k if non-zero), and the bytes one tile step keeps hot. */
typedef struct fa_cpu_plan {
  fa_cpu_isa isa;
  int block_q, block_k;
  size_t working_set_bytes;   /* Q tile + K and V tiles + score tile + accumulators */
  size_t l1d_bytes, l2_bytes; /* as the OS reports them (per core) */
} fa_cpu_plan;

FA_API fa_status fa_cpu_plan_get(fa_cpu_isa isa, int64_t D, int64_t Dv, int block_q, int block_k, fa_cpu_plan *out);
/* The plan for inputs of dtype dt: fa_cpu_plan_get's, with the bytes one
 * forward tile step keeps hot in the kernels dt runs on (bf16 on
 * avx512bf16: K/V tiles read in place in bf16, Q^T, P^T and V as bf16
 * pairs; any other dtype: f32 tiles, as fa_cpu_plan_get says). */
FA_API fa_status fa_cpu_plan_get_dtype(fa_cpu_isa isa, fa_dtype dt, int64_t D, int64_t Dv, int block_q, int block_k,
                                       fa_cpu_plan *out);

/* A context carries the settings of calls and what the last call did. One
 * context per thread; two threads with two contexts never interfere. */
typedef struct fa_context fa_context;

FA_API fa_status fa_context_create(fa_context **ctx);
FA_API void fa_context_destroy(fa_context *ctx);
/* Threads for the cpu backend; 0 = OpenMP's default. */
FA_API fa_status fa_context_set_threads(fa_context *ctx, int threads);
/* cpu backend instruction set for calls on this context (default FA_ISA_AUTO). */
FA_API fa_status fa_context_set_cpu_isa(fa_context *ctx, fa_cpu_isa isa);
/* CUDA stream (a cudaStream_t) for the cuda backend; NULL = default stream. */
FA_API fa_status fa_context_set_stream(fa_context *ctx, void *cuda_stream);
/* Whether fa_forward_kvcache reads cache_seqlens and block_table back from
 * device memory to check their values before anything runs (on = 1, the
 * default). The check is a synchronous copy: the host waits for the GPU to
 * finish the work queued before the call. Off (0) keeps the call
 * asynchronous, as a decode loop wants: the values are then not checked,
 * and the cuda kernels clamp every length, page index and rotary position
 * into the tensors' bounds, so a bad value gives unspecified results for its
 * sequence but never reads or writes outside a tensor. Host memory is always
 * checked (no copy is needed). The copy runs on the context's stream, after
 * the work queued there. A call made while that stream is capturing a CUDA
 * graph must have the checks off: checked, it fails with FA_ERR_UNSUPPORTED
 * and enqueues nothing (the capture stays valid); so does fa_forward with
 * seqlens / cu_seqlens in device memory, which it always reads. Unchecked
 * kv-cache calls, fa_forward, fa_backward and fa_merge_states (up to 32
 * parts) can be captured; a replay computes what the call would. */
FA_API fa_status fa_context_set_device_checks(fa_context *ctx, int on);
/* The message of the last failed call ("" after a success). */
FA_API const char *fa_context_last_error(const fa_context *ctx);
/* The backend that ran the last call (FA_BACKEND_AUTO if none did). */
FA_API fa_backend fa_context_last_backend(const fa_context *ctx);
/* For the last call: one line per backend, why it was taken or passed over. */
FA_API const char *fa_context_dispatch_report(const fa_context *ctx);

/* ---- attention --------------------------------------------------------- */

/* O = softmax(score(Q Kᵀ)) V with every option in opt; LSE per row (natural
 * log; -inf for rows with nothing visible, where O = 0).
 * q [B,Hq,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv] -> o [B,Hq,Lq,Dv], lse [B,Hq,Lq].
 * q, k, v, o share one dtype (FP8: e4m3 q, k, v with o bf16 or f16, forward
 * only, opt's descales; docs/semantics.md); lse is f32 (f32 or f64 on ref). lse may be
 * NULL if the caller does not need it. opt may be NULL (defaults). */
FA_API fa_status fa_forward(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_tensor *k,
                            const fa_tensor *v, const fa_options *opt, fa_tensor *o, fa_tensor *lse);

/* Gradients from the forward's q, k, v, o, lse and the incoming dO.
 * dq, dk, dv have the shapes (and dtype) of q, k, v. dbias may be NULL; if
 * given (and opt->bias is), it gets dL/dbias with bias's shape, summed over
 * the dimensions where bias broadcasts.
 * cuda: the call takes O(L) scratch in device memory, stream-ordered, from
 * a pool of the library's own per device that keeps up to
 * FLASHATTN_CUDA_SCRATCH_KEEP MiB (default 512) of it for later calls
 * instead of mapping it anew each time; 0 takes the device's default pool
 * (as does a call captured into a CUDA graph). */
FA_API fa_status fa_backward(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_tensor *k,
                             const fa_tensor *v, const fa_tensor *o, const fa_tensor *dout, const fa_tensor *lse,
                             const fa_options *opt, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv, fa_tensor *dbias);

/* ---- decode: merging partial results, KV caches ----------------------- */

/* Merges n >= 1 partial results of the same queries over disjoint key sets
 * (split-KV, ring attention, a shared prefix attended apart) into the
 * result over all the keys: per row, with lse = log(sum_i exp(lse_i)),
 *   o = sum_i exp(lse_i - lse) * o_i
 * (the online-softmax merge of DESIGN.md). Rows where every lse_i = -inf
 * give o = 0, lse = -inf. o_parts[i] [B,H,L,Dv] share one float dtype;
 * lse_parts[i] [B,H,L] are f32 (or f64); o is [B,H,L,Dv] of any float dtype,
 * lse (f32 or f64; may be NULL) [B,H,L]. Host memory: ref and cpu (and auto)
 * run it, in float64; device memory: cuda (float64 arithmetic, a fixed order). */
FA_API fa_status fa_merge_states(fa_context *ctx, fa_backend backend, int n, const fa_tensor *o_parts,
                                 const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse);

/* A KV cache for fa_forward_kvcache (FlashAttention's flash_attn_with_kvcache).
 * Key j of sequence b lives at
 *   contiguous (block_table NULL): k_cache[b, h, j, :]   (k_cache [B, Hkv, Lcap, D])
 *   paged: k_cache[block_table[b * block_table_stride + j / page_size], h, j % page_size, :]
 *          (k_cache [num_pages, Hkv, page_size, D] in logical order; the memory layout
 *          of vLLM / FlashAttention, [num_pages, page_size, Hkv, D], is the strides
 *          {page_size*Hkv*D, D, Hkv*D, 1})
 * v_cache likewise with Dv. Sequence b holds cache_seqlens[b] valid keys;
 * the call first writes k_new/v_new (if given) at positions cache_seqlens[b]
 * .. cache_seqlens[b] + L_new - 1, then attends to all cache_seqlens[b] +
 * L_new keys. cache_seqlens is not updated (the caller adds L_new). */
typedef struct fa_kvcache {
  fa_tensor k_cache, v_cache;
  const int32_t *cache_seqlens; /* [B] int32, same memory as q */

  /* paged KV: [B, max_blocks] int32 page indices (same memory as q); NULL = contiguous.
   * Only the entries of pages a sequence uses are read (and checked). */
  const int32_t *block_table;
  int64_t max_blocks;         /* entries per sequence: capacity = max_blocks * page_size */
  int64_t block_table_stride; /* elements between rows of block_table; 0 = max_blocks */

  /* new tokens, [B, Hkv, L_new, D] and [B, Hkv, L_new, Dv]; data NULL = none */
  fa_tensor k_new, v_new;

  /* rotary embedding (RoPE), f32 [rotary_len, rotary_dim / 2] rows contiguous,
   * same memory as q; NULL = none. Rotates the first rotary_dim dims of q row i
   * at position cache_seqlens[b] + i and of k_new row t at cache_seqlens[b] + t
   * (before it is written): pairs (x[2t], x[2t+1]) if interleaved (GPT-J), else
   * (x[t], x[t + rotary_dim/2]) (GPT-NeoX):  x1' = x1 cos - x2 sin, x2' = x1 sin + x2 cos. */
  const float *rotary_cos, *rotary_sin;
  int64_t rotary_len, rotary_dim;
  int rotary_interleaved;

  /* keys split across this many partial results merged at the end; 0 = the
   * backend chooses. Results for a given value are the same bits on every
   * run and thread count. */
  int num_splits;
} fa_kvcache;

/* Decode / chunked-prefill attention against a KV cache: q [B,Hq,Lq,D] ->
 * o [B,Hq,Lq,Dv], lse [B,Hq,Lq] (f32; may be NULL). Options: scale, softcap,
 * causal, window, ALiBi, always aligned bottom-right (the new queries are
 * the last rows: opt->align is not read); GQA/MQA through Hq = g * Hkv.
 * Refused with FA_ERR_OPTION: mask, bias, dropout, seqlens_*, cu_seqlens_*
 * (cache_seqlens says the lengths). Nothing is written (the cache included)
 * when the call fails its checks. No backward. q, caches, k_new, v_new and
 * o share one dtype. ref, cpu and cuda run it (cuda: f32, f16, bf16, head
 * dims that are multiples of 8 up to 256, 16-byte aligned cache rows;
 * FA_ERR_UNSUPPORTED otherwise). */
FA_API fa_status fa_forward_kvcache(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_kvcache *cache,
                                    const fa_options *opt, fa_tensor *o, fa_tensor *lse);

/* ---- dropout keep-mask, for users who reproduce a run ------------------ */

/* 1 if element (b, h, i, j) is kept by dropout with (p, seed, offset). */
FA_API int fa_dropout_keep(double p, uint64_t seed, uint32_t offset, int64_t b, int64_t h, int64_t num_heads, int64_t i,
                           int64_t j);

/* The whole keep-mask of a padded [B, H, Lq, Lk] problem: keep[((b*H + h)*Lq
 * + i)*Lk + j] = fa_dropout_keep(p, seed, offset, b, h, H, i, j), one byte
 * each (1 kept, 0 dropped). FA_ERR_DROPOUT for p outside [0, 1),
 * FA_ERR_BAD_SIZE for a size <= 0 or a product past SIZE_MAX, FA_ERR_NULL_POINTER
 * for keep; the reason, naming the argument, goes to why (if non-NULL). */
FA_API fa_status fa_dropout_mask(double p, uint64_t seed, uint32_t offset, int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                                 uint8_t *keep, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_H */
