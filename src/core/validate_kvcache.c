/* The checks of fa_forward_kvcache (the cache, its lengths, block table,
 * appended tokens, rotary tables) and of fa_merge_states: an fa__problem, or
 * a status and a message that names the argument, before any backend runs
 * and before anything is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "validate.h"

static fa_status kv_options(const fa_options *o, fa__err *err) {
  CHECK(fa__check_options(o, err));
  if (o->mask.data) FAIL(FA_ERR_OPTION, "opt->mask: fa_forward_kvcache takes no boolean mask");
  if (o->bias.data) FAIL(FA_ERR_OPTION, "opt->bias: fa_forward_kvcache takes no additive bias");
  if (o->dropout_p != 0) FAIL(FA_ERR_OPTION, "opt->dropout_p = %g: fa_forward_kvcache has no dropout", o->dropout_p);
  if (o->q_offset != 0 || o->k_offset != 0)
    FAIL(FA_ERR_OPTION, "opt->%s = %lld: fa_forward_kvcache takes positions from cache->cache_seqlens, not offsets",
         o->q_offset != 0 ? "q_offset" : "k_offset", (long long)(o->q_offset != 0 ? o->q_offset : o->k_offset));
  if (o->seqlens_q || o->seqlens_k || o->cu_seqlens_q || o->cu_seqlens_k)
    FAIL(FA_ERR_OPTION, "opt->%s: fa_forward_kvcache takes the lengths from cache->cache_seqlens",
         o->seqlens_q      ? "seqlens_q"
         : o->seqlens_k    ? "seqlens_k"
         : o->cu_seqlens_q ? "cu_seqlens_q"
                           : "cu_seqlens_k");
  if ((uintptr_t)o->alibi_slopes % 4 != 0)
    FAIL(FA_ERR_OPTION, "opt->alibi_slopes = %p is not aligned to its 4-byte elements", (const void *)o->alibi_slopes);
  if (o->q_descale.data || o->k_descale.data || o->v_descale.data)
    FAIL(FA_ERR_OPTION, "opt->%s_descale is given: fa_forward_kvcache has no FP8 (descales go with fa_forward's e4m3)",
         o->q_descale.data   ? "q"
         : o->k_descale.data ? "k"
                             : "v");
  return FA_OK;
}

fa_status fa__kv_problem_build(fa__problem *p, const fa__call *c, fa__err *err) {
  static const fa_options defaults;
  const fa_options *o = c->opt ? c->opt : &defaults;
  const fa_kvcache *kc = c->cache;
  memset(p, 0, sizeof *p);
  p->pass = FA__FORWARD;
  p->kvcache = 1;

  CHECK(fa__need_tensor(c->q, "q", err));
  if (!kc) FAIL(FA_ERR_NULL_POINTER, "cache is NULL");
  CHECK(fa__need_tensor(&kc->k_cache, "cache->k_cache", err));
  CHECK(fa__need_tensor(&kc->v_cache, "cache->v_cache", err));
  CHECK(fa__need_tensor(c->o, "o", err));
  const int has_lse = c->lse && c->lse->data;
  if (has_lse) CHECK(fa__need_tensor(c->lse, "lse", err));
  const int has_new = kc->k_new.data || kc->v_new.data;
  if (has_new) {
    if (!kc->k_new.data) FAIL(FA_ERR_NULL_POINTER, "cache->k_new.data is NULL but cache->v_new is given");
    if (!kc->v_new.data) FAIL(FA_ERR_NULL_POINTER, "cache->v_new.data is NULL but cache->k_new is given");
    CHECK(fa__need_tensor(&kc->k_new, "cache->k_new", err));
    CHECK(fa__need_tensor(&kc->v_new, "cache->v_new", err));
  }
  if (!kc->cache_seqlens) FAIL(FA_ERR_NULL_POINTER, "cache->cache_seqlens is NULL");
  CHECK(kv_options(o, err));
  {
    const void *arrays[] = {kc->cache_seqlens, kc->block_table, kc->rotary_cos, kc->rotary_sin};
    const char *names[] = {"cache->cache_seqlens", "cache->block_table", "cache->rotary_cos", "cache->rotary_sin"};
    for (int i = 0; i < 4; ++i)
      if ((uintptr_t)arrays[i] % 4 != 0)
        FAIL(FA_ERR_OPTION, "%s = %p is not aligned to its 4-byte elements", names[i], arrays[i]);
  }
  if (kc->num_splits < 0) FAIL(FA_ERR_OPTION, "cache->num_splits = %d must be >= 0 (0 = auto)", kc->num_splits);

  /* dtypes */
  const fa_dtype dt = c->q->dtype;
  if (!fa__is_float_dtype(dt)) FAIL(FA_ERR_DTYPE, "q->dtype = %s, expected f32, f64, f16 or bf16", fa_dtype_name(dt));
  {
    const fa_tensor *same[] = {&kc->k_cache, &kc->v_cache, c->o, has_new ? &kc->k_new : NULL,
                               has_new ? &kc->v_new : NULL};
    const char *names[] = {"cache->k_cache", "cache->v_cache", "o", "cache->k_new", "cache->v_new"};
    for (int i = 0; i < 5; ++i)
      if (same[i] && same[i]->dtype != dt)
        FAIL(FA_ERR_DTYPE, "%s->dtype = %s differs from q->dtype = %s", names[i], fa_dtype_name(same[i]->dtype),
             fa_dtype_name(dt));
  }
  if (has_lse && c->lse->dtype != FA_F32 && c->lse->dtype != FA_F64)
    FAIL(FA_ERR_DTYPE, "lse->dtype = %s, expected f32 (or f64 on ref)", fa_dtype_name(c->lse->dtype));

  /* shapes */
  CHECK(fa__need_sizes(c->q, "q", 4, err));
  CHECK(fa__need_sizes(&kc->k_cache, "cache->k_cache", 4, err));
  CHECK(fa__need_sizes(&kc->v_cache, "cache->v_cache", 4, err));
  const int64_t B = c->q->shape[0], Hq = c->q->shape[1], Lq = c->q->shape[2], D = c->q->shape[3];
  const int64_t pages = kc->k_cache.shape[0], Hkv = kc->k_cache.shape[1], rows = kc->k_cache.shape[2];
  const int64_t Dv = kc->v_cache.shape[3];
  const int paged = kc->block_table != NULL;
  int64_t capacity = rows, bt_stride = 0;
  if (kc->k_cache.shape[3] != D)
    FAIL(FA_ERR_SHAPE, "cache->k_cache->shape[3] = %lld, expected D = %lld (q->shape[3])",
         (long long)kc->k_cache.shape[3], (long long)D);
  if (paged) {
    if (kc->max_blocks <= 0)
      FAIL(FA_ERR_BAD_SIZE, "cache->max_blocks = %lld must be > 0 with a block table", (long long)kc->max_blocks);
    bt_stride = kc->block_table_stride ? kc->block_table_stride : kc->max_blocks;
    if (bt_stride < kc->max_blocks)
      FAIL(FA_ERR_SHAPE, "cache->block_table_stride = %lld is less than cache->max_blocks = %lld",
           (long long)kc->block_table_stride, (long long)kc->max_blocks);
    if (__builtin_mul_overflow(kc->max_blocks, rows, &capacity) || capacity > INT32_MAX ||
        __builtin_mul_overflow(bt_stride, B, &(int64_t){0}) || bt_stride * B > (int64_t)(SIZE_MAX / 8))
      FAIL(FA_ERR_SHAPE, "cache->max_blocks = %lld pages of %lld rows: more keys than int32 lengths describe",
           (long long)kc->max_blocks, (long long)rows);
  } else if (pages != B) {
    FAIL(FA_ERR_SHAPE, "cache->k_cache->shape[0] = %lld, expected B = %lld (q->shape[0]; no block table)",
         (long long)pages, (long long)B);
  }
  {
    const int64_t want_v[4] = {pages, Hkv, rows, Dv};
    CHECK(fa__need_shape(&kc->v_cache, "cache->v_cache", 3, want_v, err));
  }
  if (Hq % Hkv != 0)
    FAIL(FA_ERR_HEADS, "q has %lld heads, not a multiple of the %lld heads of the KV cache", (long long)Hq,
         (long long)Hkv);
  int64_t L_new = 0;
  if (has_new) {
    CHECK(fa__need_sizes(&kc->k_new, "cache->k_new", 4, err));
    L_new = kc->k_new.shape[2];
    const int64_t want_k[4] = {B, Hkv, L_new, D}, want_v[4] = {B, Hkv, L_new, Dv};
    CHECK(fa__need_shape(&kc->k_new, "cache->k_new", 4, want_k, err));
    CHECK(fa__need_shape(&kc->v_new, "cache->v_new", 4, want_v, err));
  }
  {
    const int64_t want_o[4] = {B, Hq, Lq, Dv};
    CHECK(fa__need_shape(c->o, "o", 4, want_o, err));
    if (has_lse) CHECK(fa__need_shape(c->lse, "lse", 3, want_o, err));
  }
  CHECK(fa__sizes_fit(B, Hq, Lq, capacity, D, Dv, err));
  const int has_rot = kc->rotary_cos || kc->rotary_sin;
  if (has_rot) {
    if (!kc->rotary_cos || !kc->rotary_sin)
      FAIL(FA_ERR_NULL_POINTER, "%s is NULL but %s is given",
           kc->rotary_cos ? "cache->rotary_sin" : "cache->rotary_cos",
           kc->rotary_cos ? "cache->rotary_cos" : "cache->rotary_sin");
    if (kc->rotary_dim <= 0 || kc->rotary_dim % 2 || kc->rotary_dim > D)
      FAIL(FA_ERR_OPTION, "cache->rotary_dim = %lld must be even and in [2, D = %lld]", (long long)kc->rotary_dim,
           (long long)D);
    if (kc->rotary_len <= 0) FAIL(FA_ERR_BAD_SIZE, "cache->rotary_len = %lld must be > 0", (long long)kc->rotary_len);
  }

  /* memory */
  fa_tensor q = *c->q, kcache = kc->k_cache, vcache = kc->v_cache, out = *c->o, lse, knew, vnew;
  memset(&lse, 0, sizeof lse);
  memset(&knew, 0, sizeof knew);
  memset(&vnew, 0, sizeof vnew);
  if (has_lse) lse = *c->lse;
  if (has_new) {
    knew = kc->k_new;
    vnew = kc->v_new;
  }
  {
    fa_tensor *ts[] = {&q, &kcache, &vcache, &knew, &vnew, &out, &lse};
    const char *names[] = {"q", "cache->k_cache", "cache->v_cache", "cache->k_new", "cache->v_new", "o", "lse"};
    CHECK(fa__resolve_memory(ts, names, 7, &p->memory, err));
  }

  /* extents and overlap: the caches are outputs when the call appends */
  fa__extent outs[4], ins[5];
  int no = 0, ni = 0;
  CHECK(fa__extent_of(&q, "q", 4, &ins[ni++], err));
  CHECK(fa__extent_of(&out, "o", 4, &outs[no++], err));
  CHECK(fa__output_injective(&out, "o", 4, err));
  if (has_lse) {
    CHECK(fa__extent_of(&lse, "lse", 3, &outs[no++], err));
    CHECK(fa__output_injective(&lse, "lse", 3, err));
  }
  if (has_new) {
    CHECK(fa__extent_of(&knew, "cache->k_new", 4, &ins[ni++], err));
    CHECK(fa__extent_of(&vnew, "cache->v_new", 4, &ins[ni++], err));
    CHECK(fa__extent_of(&kcache, "cache->k_cache", 4, &outs[no++], err));
    CHECK(fa__extent_of(&vcache, "cache->v_cache", 4, &outs[no++], err));
    CHECK(fa__output_injective(&kcache, "cache->k_cache", 4, err));
    CHECK(fa__output_injective(&vcache, "cache->v_cache", 4, err));
  } else {
    CHECK(fa__extent_of(&kcache, "cache->k_cache", 4, &ins[ni++], err));
    CHECK(fa__extent_of(&vcache, "cache->v_cache", 4, &ins[ni++], err));
  }
  CHECK(fa__no_overlap(outs, no, ins, ni, err));

  /* lengths, pages, rotary positions: read before anything is written
   * (device memory: one copy each), unless they live on the device and the
   * context takes them unread (fa_context_set_device_checks(ctx, 0)); then
   * the worst case stands in for them here and the cuda kernels clamp the
   * values into the same bounds */
  {
    const int trust = c->trust_device_values && p->memory == FA_MEMORY_CUDA;
    const fa__readback from = {p->memory, c->stream};
    static const char trust_hint[] =
        "turn the checks off for the capture (fa_context_set_device_checks(ctx, 0); Python: device_checks=False)";
    int32_t *len = NULL, *bt = NULL;
    fa_status st = FA_OK;
    int64_t longest = capacity - L_new, bt_end = 0;
    if (!trust) {
      CHECK(fa__read_ints(kc->cache_seqlens, B, "cache->cache_seqlens", trust_hint, from, &len, err));
      longest = 0;
      for (int64_t b = 0; b < B && st == FA_OK; ++b) {
        if (len[b] < 0 || len[b] > capacity - L_new) {
          fa__err_set(err,
                      "cache->cache_seqlens[%lld] = %d is outside [0, %lld]: the cache holds %lld keys per sequence "
                      "and the call appends %lld",
                      (long long)b, len[b], (long long)(capacity - L_new), (long long)capacity, (long long)L_new);
          st = FA_ERR_SEQLENS;
        } else if (len[b] > longest) {
          longest = len[b];
        }
      }
      /* only the entries of the pages each sequence uses: the rest need not
       * exist; read in one copy, from the first row to the last entry used */
      for (int64_t b = 0; b < B && st == FA_OK && paged; ++b) {
        const int64_t used = (len[b] + L_new + rows - 1) / rows;
        if (used > 0 && b * bt_stride + used > bt_end) bt_end = b * bt_stride + used;
      }
      if (st == FA_OK && bt_end > 0)
        st = fa__read_ints(kc->block_table, bt_end, "cache->block_table", trust_hint, from, &bt, err);
      for (int64_t b = 0; b < B && st == FA_OK && bt; ++b) {
        const int64_t used = (len[b] + L_new + rows - 1) / rows;
        for (int64_t i = 0; i < used && st == FA_OK; ++i) {
          const int32_t pg = bt[b * bt_stride + i];
          if (pg < 0 || pg >= pages) {
            fa__err_set(err, "cache->block_table[%lld][%lld] = %d is not a page of k_cache (it has %lld)", (long long)b,
                        (long long)i, pg, (long long)pages);
            st = FA_ERR_SEQLENS;
          }
        }
      }
      if (st == FA_OK && has_rot) {
        const int64_t need = longest + (Lq > L_new ? Lq : L_new);
        if (need > kc->rotary_len) {
          fa__err_set(err, "cache->rotary_len = %lld: positions up to %lld are rotated (cache_seqlens + %lld)",
                      (long long)kc->rotary_len, (long long)(need - 1), (long long)(Lq > L_new ? Lq : L_new));
          st = FA_ERR_SEQLENS;
        }
      }
    } else if (paged) {
      bt_end = (B - 1) * bt_stride + kc->max_blocks; /* every entry the table declares */
    }
    /* The backends read these arrays again while they write o, lse and
     * (appending) the caches: under an output, the values checked here
     * could change mid-call (a cache_seqlens inside k_cache, overwritten
     * by the append, would steer the next writes anywhere). */
    if (st == FA_OK) {
      fa__extent arr[5];
      int na = 0;
      arr[na++] = fa__array_extent(kc->cache_seqlens, (uint64_t)B, 4, "cache->cache_seqlens");
      if (bt_end) arr[na++] = fa__array_extent(kc->block_table, (uint64_t)bt_end, 4, "cache->block_table");
      if (has_rot) {
        uint64_t n;
        const int64_t rot_rows = trust ? kc->rotary_len : longest + (Lq > L_new ? Lq : L_new);
        if (__builtin_mul_overflow((uint64_t)rot_rows, (uint64_t)(kc->rotary_dim / 2), &n)) n = UINT64_MAX / 8;
        arr[na++] = fa__array_extent(kc->rotary_cos, n, 4, "cache->rotary_cos");
        arr[na++] = fa__array_extent(kc->rotary_sin, n, 4, "cache->rotary_sin");
      }
      if (o->alibi_slopes) arr[na++] = fa__array_extent(o->alibi_slopes, (uint64_t)Hq, 4, "opt->alibi_slopes");
      st = fa__no_overlap(outs, no, arr, na, err);
    }
    free(len);
    free(bt);
    if (st != FA_OK) return st;
  }

  {
    fa_tensor *const ts[] = {&q, &kcache, &vcache, &knew, &vnew, &out, &lse};
    fa__zero_unit_strides(ts, 7);
    lse.stride[3] = 0;
  }

  p->B = B;
  p->Hq = Hq;
  p->Hkv = Hkv;
  p->group = Hq / Hkv;
  p->Lq = Lq;
  p->Lk = capacity;
  p->D = D;
  p->Dv = Dv;
  p->dtype = dt;
  p->q = q;
  p->k = kcache;
  p->v = vcache;
  p->o = out;
  p->lse = lse;
  p->scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)D);
  p->softcap = o->softcap;
  p->alibi_slopes = o->alibi_slopes;
  p->window_left = -1;
  p->window_right = -1;
  if (o->use_window) {
    p->window_left = o->window_left < 0 ? -1 : o->window_left;
    p->window_right = o->window_right < 0 ? -1 : o->window_right;
  }
  if (o->causal) p->window_right = 0;
  if (p->window_left > Lq + capacity) p->window_left = Lq + capacity;
  if (p->window_right > Lq + capacity) p->window_right = Lq + capacity;
  p->bottom_right = 1;
  p->dropout_threshold = 0xffffffffu;
  p->dropout_scale = 1.0;
  p->block_q = o->block_q;
  p->block_k = o->block_k;

  fa__kv *kv = &p->kv;
  kv->map.block_table = kc->block_table;
  kv->map.bt_stride = bt_stride;
  kv->map.page_size = paged ? rows : capacity;
  kv->cache_seqlens = kc->cache_seqlens;
  kv->k_new = knew;
  kv->v_new = vnew;
  kv->L_new = L_new;
  kv->capacity = capacity;
  kv->pages = pages;
  kv->rotary_cos = has_rot ? kc->rotary_cos : NULL;
  kv->rotary_sin = has_rot ? kc->rotary_sin : NULL;
  kv->rotary_len = has_rot ? kc->rotary_len : 0;
  kv->rotary_dim = has_rot ? kc->rotary_dim : 0;
  kv->rotary_interleaved = kc->rotary_interleaved != 0;
  kv->num_splits = kc->num_splits;
  return FA_OK;
}

/* ---- fa_merge_states ---------------------------------------------------- */

fa_status fa__merge_check(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, const fa_tensor *o,
                          const fa_tensor *lse, fa_memory *memory, fa__err *err) {
  if (n < 1) FAIL(FA_ERR_BAD_SIZE, "n = %d must be >= 1", n);
  if (!o_parts) FAIL(FA_ERR_NULL_POINTER, "o_parts is NULL");
  if (!lse_parts) FAIL(FA_ERR_NULL_POINTER, "lse_parts is NULL");
  CHECK(fa__need_tensor(o, "o", err));
  const int has_lse = lse && lse->data;
  if (has_lse) CHECK(fa__need_tensor(lse, "lse", err));
  if (!fa__is_float_dtype(o->dtype))
    FAIL(FA_ERR_DTYPE, "o->dtype = %s, expected a float dtype", fa_dtype_name(o->dtype));
  if (has_lse && lse->dtype != FA_F32 && lse->dtype != FA_F64)
    FAIL(FA_ERR_DTYPE, "lse->dtype = %s, expected f32 or f64", fa_dtype_name(lse->dtype));
  CHECK(fa__need_sizes(o, "o", 4, err));
  if (has_lse) CHECK(fa__need_shape(lse, "lse", 3, o->shape, err));
  fa_tensor outs_t[2] = {*o, has_lse ? *lse : (fa_tensor){0}};
  fa__extent outs[2];
  int no = 0;
  fa_memory where = FA_MEMORY_AUTO;
  {
    fa_tensor *ts[] = {&outs_t[0], &outs_t[1]};
    const char *names[] = {"o", "lse"};
    CHECK(fa__resolve_memory(ts, names, 2, &where, err));
  }
  CHECK(fa__extent_of(&outs_t[0], "o", 4, &outs[no++], err));
  CHECK(fa__output_injective(&outs_t[0], "o", 4, err));
  if (has_lse) {
    CHECK(fa__extent_of(&outs_t[1], "lse", 3, &outs[no++], err));
    CHECK(fa__output_injective(&outs_t[1], "lse", 3, err));
  }
  for (int i = 0; i < n; ++i) {
    char on[32], ln[32];
    snprintf(on, sizeof on, "o_parts[%d]", i);
    snprintf(ln, sizeof ln, "lse_parts[%d]", i);
    fa_tensor op = o_parts[i], lp = lse_parts[i];
    CHECK(fa__need_tensor(&op, on, err));
    CHECK(fa__need_tensor(&lp, ln, err));
    if (!fa__is_float_dtype(op.dtype))
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s, expected a float dtype", on, fa_dtype_name(op.dtype));
    if (op.dtype != o_parts[0].dtype)
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s differs from o_parts[0]->dtype = %s", on, fa_dtype_name(op.dtype),
           fa_dtype_name(o_parts[0].dtype));
    if (lp.dtype != FA_F32 && lp.dtype != FA_F64)
      FAIL(FA_ERR_DTYPE, "%s->dtype = %s, expected f32 or f64", ln, fa_dtype_name(lp.dtype));
    CHECK(fa__need_shape(&op, on, 4, o->shape, err));
    CHECK(fa__need_shape(&lp, ln, 3, o->shape, err));
    fa_tensor *ts[] = {&outs_t[0], &op, &lp};
    const char *names[] = {"o", on, ln};
    fa_memory m2;
    CHECK(fa__resolve_memory(ts, names, 3, &m2, err));
    fa__extent ins[2];
    CHECK(fa__extent_of(&op, on, 4, &ins[0], err));
    CHECK(fa__extent_of(&lp, ln, 3, &ins[1], err));
    CHECK(fa__no_overlap(outs, no, ins, 2, err));
  }
  *memory = where;
  return FA_OK;
}
