"""FlashAttention 2's Python interface (flash_attn.flash_attn_interface), on
flashattn: the same names, arguments and [B, L, H, D] layout, causal and
window aligned bottom-right as FlashAttention does, so code that uses
FlashAttention runs by changing its import.

Differences: return_attn_probs returns (out, softmax_lse, None) — the
probabilities are never materialized; block_table (paged KV) is not taken
yet; the dropout mask comes from flashattn's Philox rule (seeded from
torch's generator), not FlashAttention's.
"""

import torch

from .. import _capi
from . import _fast
from ._attention import attention


def _fa_call(
    q,
    k,
    v,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    deterministic,
    return_attn_probs,
    backend,
    **varlen,
):
    out, lse = attention(
        q,
        k,
        v,
        causal=causal,
        align="bottom_right",
        window=window_size,
        scale=softmax_scale,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        dropout_p=dropout_p,
        deterministic=deterministic,
        backend=backend,
        layout="bshd",
        return_lse=True,
        **varlen,
    )
    return out, lse


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    backend="auto",
    q_descale=None,
    k_descale=None,
    v_descale=None,
    out_dtype=None,
):
    """q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] -> out [B, Lq, Hq, Dv]
    (and softmax_lse [B, Hq, Lq] if return_attn_probs).

    FP8 (FlashAttention 3's): torch.float8_e4m3fn q, k, v with q_descale,
    k_descale, v_descale ([B, Hkv] float32 or numbers; q_descale indexed by
    the query head's kv head) -> out in out_dtype (torch.bfloat16, the
    default, or torch.float16); forward only."""
    if q.dtype == torch.float8_e4m3fn:
        out, lse = _fa_call(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                            deterministic, return_attn_probs, backend, q_descale=q_descale, k_descale=k_descale,
                            v_descale=v_descale, out_dtype=out_dtype)  # fmt: skip
        return (out, lse, None) if return_attn_probs else out
    if alibi_slopes is None and not dropout_p:  # the hot path of a model's layer (_fast.py)
        r = _fast.attention(q, k, v, True, softmax_scale, softcap, causal, True, window_size, deterministic, backend,
                           return_attn_probs)  # fmt: skip
        if r is not None:
            return (r[0], r[1], None) if return_attn_probs else r[0]
    out, lse = _fa_call(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend,
    )
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    backend="auto",
):
    """qkv [B, L, 3, H, D] -> out [B, L, H, D]."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise _capi.invalid(f"qkv has shape {tuple(qkv.shape)}, expected [B, L, 3, H, D]", "FA_ERR_SHAPE")
    return flash_attn_func(
        qkv[:, :, 0],
        qkv[:, :, 1],
        qkv[:, :, 2],
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend=backend,
    )


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    backend="auto",
):
    """q [B, Lq, Hq, D], kv [B, Lk, 2, Hkv, D] -> out [B, Lq, Hq, D]."""
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise _capi.invalid(f"kv has shape {tuple(kv.shape)}, expected [B, Lk, 2, Hkv, D]", "FA_ERR_SHAPE")
    return flash_attn_func(
        q,
        kv[:, :, 0],
        kv[:, :, 1],
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend=backend,
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    backend="auto",
):
    """Packed sequences: q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv],
    cu_seqlens_* [num_seqs + 1] int32 -> out [total_q, Hq, Dv] (softmax_lse [Hq, total_q]).
    max_seqlen_* are accepted for compatibility; the library reads the lengths itself."""
    if block_table is not None:
        raise _capi.error("FA_ERR_UNSUPPORTED", "block_table: paged KV caches are not supported by flashattn yet")
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        if t.dim() != 3:
            raise _capi.invalid(f"{n} has shape {tuple(t.shape)}, expected [total, H, D]", "FA_ERR_SHAPE")
    out, lse = _fa_call(
        q[None],
        k[None],
        v[None],
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
    )
    return (out[0], lse[0], None) if return_attn_probs else out[0]


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    backend="auto",
):
    """qkv [total, 3, H, D] -> out [total, H, D]."""
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise _capi.invalid(f"qkv has shape {tuple(qkv.shape)}, expected [total, 3, H, D]", "FA_ERR_SHAPE")
    return flash_attn_varlen_func(
        qkv[:, 0],
        qkv[:, 1],
        qkv[:, 2],
        cu_seqlens,
        cu_seqlens,
        max_seqlen,
        max_seqlen,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend=backend,
    )


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    backend="auto",
):
    """q [total_q, Hq, D], kv [total_k, 2, Hkv, D] -> out [total_q, Hq, D]."""
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise _capi.invalid(f"kv has shape {tuple(kv.shape)}, expected [total_k, 2, Hkv, D]", "FA_ERR_SHAPE")
    return flash_attn_varlen_func(
        q,
        kv[:, 0],
        kv[:, 1],
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        deterministic,
        return_attn_probs,
        backend=backend,
    )
