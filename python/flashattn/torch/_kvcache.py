"""Decode on torch tensors: flash_attn_with_kvcache (FlashAttention 2's) and merge_states, thin over
C's fa_forward_kvcache and fa_merge_states through two torch.library custom ops:

- flashattn::fwd_kvcache, which mutates k_cache and v_cache (the new tokens are written into them in
  place), so torch.compile sees the writes and keeps them in order;
- flashattn::merge_states, a pure function.

Neither has an autograd formula: decode needs no backward (FlashAttention's flash_attn_with_kvcache has
none either). flash_attn_with_kvcache detaches q, k and v, so its outputs never require grad, on the op
path and the eager path alike; merge_states' outputs do not require grad either.

The op takes the tensors in FlashAttention's layout ([B, L, H, D]; paged caches [num_pages, page_size,
Hkv, D]) and describes them to C in its logical [B, H, L, D] order by their strides (no copies).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _capi
from . import _fast_kvcache, _ops
from ._attention import _check_4d, _int32, _plain_eager, alibi_tensor


def _bshd(t, arg):
    """(data, dtype, shape, strides, memory) in C's [B, H, L, D] order of a [B, L, H, D] tensor."""
    n, s = t.shape, t.stride()
    return (t.data_ptr(), _ops._code(t, arg), (n[0], n[2], n[1], n[3]), (s[0], s[2], s[1], s[3]), _ops._mem(t))


def _words(t, arg, shape):
    """An int32 / float32 array C reads through a bare pointer: its shape checked here, contiguous."""
    if tuple(t.shape) != tuple(shape):
        raise _capi.invalid(f"{arg} has shape {tuple(t.shape)}, expected {tuple(shape)}", "FA_ERR_SHAPE")
    return t.contiguous()


def fwd_kvcache_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k_new: Optional[Tensor],
    v_new: Optional[Tensor],
    cache_seqlens: Tensor,
    block_table: Optional[Tensor],
    rotary_cos: Optional[Tensor],
    rotary_sin: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    scale: float,
    softcap: float,
    causal: bool,
    window_left: int,
    window_right: int,
    rotary_interleaved: bool,
    num_splits: int,
    device_checks: bool,
    backend: str,
) -> Tuple[Tensor, Tensor]:
    """out [B, Lq, Hq, Dv] and lse [B, Hq, Lq] float32 (float64 for float64 q); q [B, Lq, Hq, D]; k_cache / v_cache [B, Lcap,
    Hkv, D] or, with block_table [B, max_blocks] int32, [num_pages, page_size, Hkv, D]; k_new / v_new
    [B, L_new, Hkv, D] (written into the caches at cache_seqlens [B] int32 first); rotary_cos / sin
    [rotary_len, rotary_dim / 2] float32; alibi_slopes [Hq] float32."""
    B, Lq, Hq, _ = q.shape
    for t, n in ((cache_seqlens, "cache_seqlens"), (block_table, "block_table")):
        if t is not None and t.dtype != torch.int32:
            raise _capi.invalid(f"{n}.dtype = {t.dtype}, expected torch.int32", "FA_ERR_DTYPE")
    for t, n in ((rotary_cos, "rotary_cos"), (rotary_sin, "rotary_sin"), (alibi_slopes, "alibi_slopes")):
        if t is not None and t.dtype != torch.float32:
            raise _capi.invalid(f"{n}.dtype = {t.dtype}, expected torch.float32", "FA_ERR_DTYPE")
    seqlens = _words(cache_seqlens, "cache_seqlens", (B,))
    if block_table is None:
        bt, max_blocks = None, 0
        if k_cache.shape[0] > B:  # as FlashAttention: sequence b uses cache row b
            k_cache, v_cache = k_cache[:B], v_cache[:B]
    else:
        if block_table.dim() != 2:
            raise _capi.invalid(f"block_table has shape {tuple(block_table.shape)}, expected [{B}, max_blocks]")
        bt = _words(block_table, "block_table", (B, block_table.shape[1]))
        max_blocks = bt.shape[1]
    rotary = None
    if rotary_cos is not None and rotary_sin is not None:
        if rotary_cos.dim() != 2:
            raise _capi.invalid(
                f"rotary_cos has shape {tuple(rotary_cos.shape)}, expected [rotary_len, rotary_dim / 2]", "FA_ERR_SHAPE"
            )
        cos = rotary_cos.contiguous()
        sin = _words(rotary_sin, "rotary_sin", cos.shape)
        rotary = (cos.data_ptr(), sin.data_ptr(), cos.shape[0], 2 * cos.shape[1], rotary_interleaved)
    elif rotary_cos is not None or rotary_sin is not None:
        raise _capi.invalid("rotary_cos and rotary_sin go together", "FA_ERR_NULL_POINTER")
    if alibi_slopes is not None:
        alibi_slopes = _words(alibi_slopes, "alibi_slopes", (Hq,))

    ctx = _ops._context(q)
    ctx.set_device_checks(device_checks)
    code = _capi.code_of(backend, _capi.BACKENDS, "backend")
    opt = _ops._options(ctx, None, None, alibi_slopes, None, None, None, None, None, scale, softcap, causal, True,
                        window_left, window_right, 0.0, False)  # fmt: skip
    Dv = v_cache.shape[-1]
    o = torch.empty((B, Lq, Hq, Dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Lq), dtype=_ops._lse_dtype(q), device=q.device)
    tq = ctx.tensor(0, *_bshd(q, "q"))
    to = ctx.tensor(1, *_bshd(o, "o"))
    tl = ctx.tensor(2, lse.data_ptr(), _ops._code(lse, "lse"), lse.shape, lse.stride(), _ops._mem(lse))
    if (k_new is None) != (v_new is None):
        raise _capi.invalid("k and v go together: pass both new tokens or neither", "FA_ERR_NULL_POINTER")
    new = (None, None) if k_new is None else (_bshd(k_new, "k"), _bshd(v_new, "v"))
    cache = ctx.kvcache(_bshd(k_cache, "k_cache"), _bshd(v_cache, "v_cache"), seqlens.data_ptr(),
                        None if bt is None else bt.data_ptr(), max_blocks, *new, rotary, int(num_splits))  # fmt: skip
    _ops._launch(q, _capi.forward_kvcache, ctx, code, tq, cache, opt, to, tl)
    return o, lse


fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"))(fwd_kvcache_impl)


@fwd_kvcache.register_fake
def _fwd_kvcache_fake(q, k_cache, v_cache, *rest):
    B, Lq, Hq, _ = q.shape
    return q.new_empty((B, Lq, Hq, v_cache.shape[-1])), q.new_empty((B, Hq, Lq), dtype=_ops._lse_dtype(q))


def _merge_dtype(lse):
    return torch.float64 if lse.dtype == torch.float64 else torch.float32


def merge_states_impl(o_parts: List[Tensor], lse_parts: List[Tensor], backend: str) -> Tuple[Tensor, Tensor]:
    """o [B, H, L, Dv] (o_parts[0]'s dtype) and lse [B, H, L] (float64 if lse_parts[0] is, else float32).
    Both take o_parts[0]'s shape, so that C names the part whose shape differs."""
    o_parts, lse_parts = _capi.merge_parts(o_parts, lse_parts)
    tos, tls = [], []
    for parts, out, n, want in ((o_parts, tos, "o_parts", 4), (lse_parts, tls, "lse_parts", 3)):
        for i, t in enumerate(parts):
            if t.dim() != want:
                dims = "[B, H, L, Dv]" if want == 4 else "[B, H, L]"
                raise _capi.invalid(f"{n}[{i}] has shape {tuple(t.shape)}, expected {dims}", "FA_ERR_SHAPE")
            out.append(_capi.tensor(*_ops._spec(t, f"{n}[{i}]")))
    o0, l0 = o_parts[0], lse_parts[0]
    o = torch.empty(o0.shape, dtype=o0.dtype, device=o0.device)
    lse = torch.empty(o0.shape[:3], dtype=_merge_dtype(l0), device=o0.device)
    ctx = _ops._context(o0)
    code = _capi.code_of(backend, _capi.BACKENDS, "backend")
    to = ctx.tensor(0, o.data_ptr(), _ops._code(o, "o"), o.shape, o.stride(), _ops._mem(o))
    tl = ctx.tensor(1, lse.data_ptr(), _ops._code(lse, "lse"), lse.shape, lse.stride(), _ops._mem(lse))
    _ops._launch(o0, _capi.merge_states, ctx, code, tos, tls, to, tl)
    return o, lse


merge_states_op = torch.library.custom_op("flashattn::merge_states", mutates_args=())(merge_states_impl)


@merge_states_op.register_fake
def _merge_states_fake(o_parts, lse_parts, backend):
    o_parts, lse_parts = _capi.merge_parts(o_parts, lse_parts)
    o0, l0 = o_parts[0], lse_parts[0]
    return o0.new_empty(o0.shape), o0.new_empty(o0.shape[:3], dtype=_merge_dtype(l0))


def _detached(t):
    return t.detach() if t is not None and t.requires_grad else t


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    device_checks=True,
    backend="auto",
):
    """FlashAttention 2's flash_attn_with_kvcache: attention of q against a KV cache, appending k, v.

    q [B, Lq, Hq, D]; k_cache / v_cache [B, Lcap, Hkv, D] (or more rows than B: sequence b uses row b),
    or paged [num_pages, page_size, Hkv, D] with block_table [B, max_blocks] int32 (pages in any order,
    any page_size on cpu). cache_seqlens: int or [B] int32, the valid keys per sequence (None: the whole
    capacity). k / v [B, L_new, Hkv, D]: written into k_cache / v_cache IN PLACE at cache_seqlens[b] ..
    + L_new - 1 before attending (cache_seqlens itself is not updated: add L_new for the next step).
    rotary_cos / rotary_sin [rotary_len, rotary_dim / 2]: RoPE of k at cache_seqlens[b] + t and of q
    row i at cache_seqlens[b] + i, interleaved (GPT-J) or not (GPT-NeoX); needs k and v. Causal and
    window_size are aligned bottom-right (the new queries are the last rows); GQA / MQA by Hq = g Hkv.
    cache_batch_idx [B] (a contiguous cache's row per sequence) is taken; cache_leftpad is refused
    (UnsupportedError). num_splits: keys split into this many chunks merged at the end (0 = the
    backend chooses); results agree up to rounding, and one value gives the same bits every run.

    device_checks (keyword): on CUDA tensors, cache_seqlens and block_table are read back to the host
    and checked before the call (a bad value raises, nothing is written), which makes every call wait
    for the GPU; device_checks=False skips that read (fa_context_set_device_checks): the call stays
    asynchronous, as a decode loop wants, and a bad value gives unspecified results for its sequence
    but never reads or writes outside the tensors. CPU tensors are always checked. Capturing the call
    in a CUDA graph (torch.cuda.graph) needs device_checks=False: a checked call inside a capture
    raises NotImplementedError naming the switch (the graph replays later, with other values).

    Returns out [B, Lq, Hq, Dv] (and softmax_lse [B, Hq, Lq] if return_softmax_lse: float32, float64
    for float64 q). No gradients: like FlashAttention's, the outputs do not require grad. CPU tensors
    run on the cpu backend (float64 on ref), CUDA tensors on the cuda backend (split-KV decode kernels).
    """
    # the hot path (_fast_kvcache.py) for calls without tables or per-sequence rows; None: the general one below
    tables = (rotary_cos, rotary_sin, alibi_slopes, cache_batch_idx, cache_leftpad)
    if all(t is None for t in tables):
        r = _fast_kvcache.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale,
                                                  causal, window_size, softcap, num_splits, return_softmax_lse,
                                                  device_checks, backend)  # fmt: skip
        if r is not None:
            return r if return_softmax_lse else r[0]
    want = "[B, L, H, D]"
    _check_4d(q, "q", want)
    _check_4d(k_cache, "k_cache", "[B, Lcap, Hkv, D] (or [num_pages, page_size, Hkv, D] with block_table)")
    _check_4d(v_cache, "v_cache", "[B, Lcap, Hkv, D] (or [num_pages, page_size, Hkv, D] with block_table)")
    if (k is None) != (v is None):
        raise _capi.invalid("k and v go together: pass both new tokens or neither", "FA_ERR_NULL_POINTER")
    if k is not None:
        _check_4d(k, "k", "[B, L_new, Hkv, D]")
        _check_4d(v, "v", "[B, L_new, Hkv, Dv]")
    if cache_leftpad is not None:
        raise _capi.error("FA_ERR_UNSUPPORTED", "cache_leftpad: a KV cache starting past row 0 is not supported")
    dev, B, Lq, Hq = q.device, q.shape[0], q.shape[1], q.shape[2]
    if cache_batch_idx is not None:
        if block_table is not None:
            raise _capi.error(
                "FA_ERR_UNSUPPORTED", "cache_batch_idx with block_table: a paged cache takes no cache_batch_idx"
            )
        # sequence b's keys are k_cache[cache_batch_idx[b]]: the cache as cache-rows-long pages
        block_table = _int32(cache_batch_idx, "cache_batch_idx", dev, B).view(B, 1)
    elif block_table is not None:
        block_table = torch.as_tensor(block_table, device=dev)
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise _capi.invalid(
                f"block_table has shape {tuple(block_table.shape)}, expected [{B}, max_blocks]", "FA_ERR_SHAPE"
            )
        block_table = block_table.to(torch.int32).contiguous()
    capacity = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
    if cache_seqlens is None:
        cache_seqlens = capacity
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=dev)
    else:
        cache_seqlens = _int32(cache_seqlens, "cache_seqlens", dev, B)
    try:
        wl, wr = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise _capi.invalid(f"window_size = {window_size!r}, expected a pair (left, right); -1 = unbounded") from None
    if (rotary_cos is None) != (rotary_sin is None):
        raise _capi.invalid("rotary_cos and rotary_sin go together", "FA_ERR_NULL_POINTER")
    if rotary_cos is not None:
        if k is None:
            raise _capi.invalid("rotary_cos / rotary_sin: rotary embedding needs the new tokens k and v")
        local = 0 <= wl < capacity or 0 <= wr < capacity
        if Lq > 1 and not (causal or local):
            raise _capi.error(
                "FA_ERR_UNSUPPORTED",
                "rotary_cos with several query rows and neither causal nor window_size: FlashAttention rotates "
                "every row at cache_seqlens, flashattn row i at cache_seqlens + i (pass causal=True)",
            )
        rotary_cos = torch.as_tensor(rotary_cos, device=dev).to(torch.float32)
        rotary_sin = torch.as_tensor(rotary_sin, device=dev).to(torch.float32)
    alibi_slopes = alibi_tensor(alibi_slopes, Hq, dev)
    q, k, v = _detached(q), _detached(k), _detached(v)
    args = (q, k_cache, v_cache, k, v, cache_seqlens, block_table, rotary_cos, rotary_sin, alibi_slopes,
            float(softmax_scale or 0.0), float(softcap or 0.0), bool(causal), wl, wr, bool(rotary_interleaved),
            int(num_splits), bool(device_checks), backend)  # fmt: skip
    if _plain_eager((q, k_cache, v_cache, k, v)):
        out, lse = fwd_kvcache_impl(*args)
    else:
        out, lse = fwd_kvcache(*args)
    return (out, lse) if return_softmax_lse else out


def merge_states(o_parts, lse_parts, *, backend="auto"):
    """Merges partial results of the same queries over disjoint key sets (split-KV, ring attention, a
    shared prefix attended apart): o_parts [B, H, L, Dv] and lse_parts [B, H, L] (lists of tensors) ->
    (o, lse) with lse = logsumexp_i lse_i and o = sum_i exp(lse_i - lse) o_i (0 and -inf where every
    lse_i is -inf), computed in float64. o has o_parts[0]'s dtype, lse is float32 (float64 if
    lse_parts[0] is). No gradients (the outputs do not require grad). cpu and ref run it on CPU
    tensors, cuda on CUDA tensors."""
    o_parts, lse_parts = _capi.merge_parts(o_parts, lse_parts)
    for parts, n in ((o_parts, "o_parts"), (lse_parts, "lse_parts")):
        for i, t in enumerate(parts):
            if not isinstance(t, torch.Tensor):
                raise _capi.invalid(f"{n}[{i}] must be a torch.Tensor, got {type(t).__name__}", "FA_ERR_DTYPE")
    o_parts, lse_parts = [_detached(t) for t in o_parts], [_detached(t) for t in lse_parts]
    if _plain_eager(o_parts + lse_parts):
        return merge_states_impl(o_parts, lse_parts, backend)
    return merge_states_op(o_parts, lse_parts, backend)
