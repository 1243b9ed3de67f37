"""numpy entry points of the decode calls: fa_forward_kvcache and fa_merge_states (thin over C)."""

import numpy as np

from . import _capi
from ._ndarray import _Call, _empty, _int32, _tensor


def attention_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    k_new=None,
    v_new=None,
    block_table=None,
    rotary_cos=None,
    rotary_sin=None,
    rotary_interleaved=False,
    num_splits=0,
    *,
    layout="bhsd",
    **options,
):
    """Attention of q against a KV cache (FlashAttention's flash_attn_with_kvcache), returns (o, lse).

    q [B, Hq, Lq, D]; k_cache/v_cache [B, Hkv, Lcap, D] or, with block_table [B, max_blocks] int32,
    paged [num_pages, Hkv, page_size, D] (layout="bshd": [B, Lcap, Hkv, D] / [num_pages, page_size,
    Hkv, D], FlashAttention's and vLLM's). k_new/v_new [B, Hkv, L_new, D] are written into the caches
    (in place) at cache_seqlens[b] first; cache_seqlens is not updated. rotary_cos/sin
    [rotary_len, rotary_dim / 2]. Always bottom-right aligned; options as flashattn.attention
    (causal, window, softcap, alibi_slopes, scale, backend, threads, isa).
    """
    c = _Call(q, k_cache, v_cache, layout, options)
    B, Hq, Lq, _ = c.q.shape
    Dv = c.v.shape[3]
    kv = _capi.KvCache()
    kv.k_cache, kv.v_cache = c.k, c.v
    seq = _int32(cache_seqlens, "cache_seqlens", B)
    keep = [seq]
    kv.cache_seqlens = seq.ctypes.data
    if block_table is not None:
        bt = np.ascontiguousarray(block_table, dtype=np.int32)
        if bt.ndim != 2 or bt.shape[0] != B:
            raise _capi.invalid(f"block_table has shape {bt.shape}, expected [{B}, max_blocks]", "FA_ERR_SHAPE")
        keep.append(bt)
        kv.block_table, kv.max_blocks, kv.block_table_stride = bt.ctypes.data, bt.shape[1], bt.shape[1]
    if (k_new is None) != (v_new is None):
        raise _capi.invalid("k_new and v_new go together", "FA_ERR_NULL_POINTER")
    if k_new is not None:
        kv.k_new, kv.v_new = _tensor(k_new, "k_new", layout), _tensor(v_new, "v_new", layout)
    if (rotary_cos is None) != (rotary_sin is None):
        raise _capi.invalid("rotary_cos and rotary_sin go together", "FA_ERR_NULL_POINTER")
    if rotary_cos is not None:
        cs = np.ascontiguousarray(rotary_cos, dtype=np.float32)
        sn = np.ascontiguousarray(rotary_sin, dtype=np.float32)
        if cs.ndim != 2 or cs.shape != sn.shape:
            raise _capi.invalid(
                f"rotary_cos {cs.shape} and rotary_sin {sn.shape}: expected both [rotary_len, rotary_dim / 2]",
                "FA_ERR_SHAPE",
            )
        keep += [cs, sn]
        kv.rotary_cos, kv.rotary_sin = cs.ctypes.data, sn.ctypes.data
        kv.rotary_len, kv.rotary_dim = cs.shape[0], 2 * cs.shape[1]
        kv.rotary_interleaved = int(bool(rotary_interleaved))
    kv.num_splits = int(num_splits)
    o = _empty((B, Hq, Lq, Dv), q.dtype, layout, False)
    lse = np.empty((B, Hq, Lq), np.float32)
    to, tl = _tensor(o, "o", layout), _tensor(lse, "lse", layout, ndim=3)
    _capi.forward_kvcache(c.ctx, c.backend, c.q, kv, c.opt, to, tl)
    return o, lse


def merge_states(o_parts, lse_parts, *, backend="auto"):
    """Merges partial results over disjoint key sets: returns (o, lse) with lse = logsumexp_i lse_i and
    o = sum_i exp(lse_i - lse) o_i (o = 0, lse = -inf where every lse_i = -inf). o_i [B, H, L, Dv],
    lse_i [B, H, L]."""
    o_parts, lse_parts = _capi.merge_parts(o_parts, lse_parts)
    be = _capi.code_of(backend, _capi.BACKENDS, "backend")
    tos = [_tensor(x, f"o_parts[{i}]", "bhsd") for i, x in enumerate(o_parts)]
    tls = [_tensor(x, f"lse_parts[{i}]", "bhsd", ndim=3) for i, x in enumerate(lse_parts)]
    o = np.empty(o_parts[0].shape, o_parts[0].dtype)
    lse = np.empty(o.shape[:3], np.float64 if lse_parts[0].dtype == np.float64 else np.float32)
    to, tl = _tensor(o, "o", "bhsd"), _tensor(lse, "lse", "bhsd", ndim=3)
    _capi.merge_states(_capi.context(), be, tos, tls, to, tl)
    return o, lse
