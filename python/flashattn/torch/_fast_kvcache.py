"""The eager hot path of flash_attn_with_kvcache: a decode step calls it once
per layer per token, so its host time adds to every token's.

A call qualifies when it is plain eager on plain tensors (_fast.plain_eager's
conditions), q, the caches and the new tokens are 4-d tensors of one dtype on
one cpu or cuda device, cache_seqlens is a contiguous int32 tensor [B] there
and block_table (if any) a contiguous int32 [B, max_blocks], and it has no
rotary tables, ALiBi slopes or cache_batch_idx. Everything else goes the
general way (_kvcache.py: its checks, the flashattn::fwd_kvcache op), which
also raises the errors; both reach fa_forward_kvcache with the same
arguments, so they give the same bits and the same cache writes
(tests/python/test_torch_kvcache.py checks).

As _fast.py does for attention, what follows from the call's shapes,
strides, dtypes, devices and scalar options is worked out once per signature
and kept in this thread's fa_context (ctx.fast_plans, with attention's): the fa_tensors of q, o
and lse and the fa_kvcache, packed in the plan's buffer, and the fa_options.
A call then allocates o (and lse when it is asked for: C takes a NULL lse),
writes the data pointers into the buffer and calls fa_forward_kvcache.

Why: the general path's checks and packing cost ~18 us a call on a 2-vCPU
Xeon over the C call itself (31.9 against 14.3 us for attention's hot path
on a tiny problem), the same order as the GPU's part of a decode step at a
few thousand keys.
"""

import ctypes as C

import torch

from .. import _capi
from . import _fast

_Tensor = torch.Tensor
_T = _capi._TENSOR.size
_W = _T // 8  # 8-byte words per fa_tensor
# 8-byte word offsets of the data pointers in fa_kvcache (its ctypes layout, _capi.KvCache)
_KV_K, _KV_V, _KV_SEQLENS, _KV_BT, _KV_KNEW, _KV_VNEW = (
    getattr(_capi.KvCache, f).offset // 8
    for f in ("k_cache", "v_cache", "cache_seqlens", "block_table", "k_new", "v_new")
)
_fa_forward_kvcache = _capi.lib.fa_forward_kvcache
_int32 = torch.int32


def flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, scale, causal, window_size,
                            softcap, num_splits, want_lse, device_checks, backend):  # fmt: skip
    """(out, lse or None) through the hot path, or None when the call does
    not qualify (the caller then takes the general path)."""
    if _fast._compiling() or _fast._function_mode() or _fast._dispatch_modes() or _fast._peek() is not None:
        return None
    if type(q) is not _Tensor or type(k_cache) is not _Tensor or type(v_cache) is not _Tensor:
        return None
    if type(cache_seqlens) is not _Tensor or (block_table is not None and type(block_table) is not _Tensor):
        return None
    if (k is None) != (v is None) or (k is not None and (type(k) is not _Tensor or type(v) is not _Tensor)):
        return None
    key = (q.shape, q.stride(), q.dtype, q.device, k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device,
           v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
           None if k is None else (k.shape, k.stride(), k.dtype, k.device),
           None if v is None else (v.shape, v.stride(), v.dtype, v.device),
           cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype, cache_seqlens.device,
           None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype,
                                             block_table.device),
           scale, causal, window_size, softcap, num_splits, backend)  # fmt: skip
    try:
        ctx = _fast._local.ctx
        plan = ctx.fast_plans[key]  # attention's plans too: their keys are tuples of another length
    except (AttributeError, KeyError, TypeError):  # no context or plans yet, a new signature, an unhashable option
        ctx = _fast._context()
        plan = _new_plan(ctx, key, q, k_cache, v_cache, k, v, cache_seqlens, block_table)
        if plan is None:
            return None
    mv, code, aq, akv, aopt, ao, al, oshape, lshape, ldtype, dev, _ = plan
    o = _fast._empty(oshape, dtype=q.dtype, device=q.device)
    mv[0] = q.data_ptr()
    mv[_W] = o.data_ptr()
    if want_lse:
        lse = _fast._empty(lshape, dtype=ldtype, device=q.device)
        mv[2 * _W] = lse.data_ptr()
    else:
        lse, al = None, None
    kv = 3 * _W  # the fa_kvcache follows the three fa_tensors
    mv[kv + _KV_K] = k_cache.data_ptr()
    mv[kv + _KV_V] = v_cache.data_ptr()
    mv[kv + _KV_SEQLENS] = cache_seqlens.data_ptr()
    if block_table is not None:
        mv[kv + _KV_BT] = block_table.data_ptr()
    if k is not None:
        mv[kv + _KV_KNEW] = k.data_ptr()
        mv[kv + _KV_VNEW] = v.data_ptr()
    if device_checks != ctx.device_checks:
        ctx.set_device_checks(device_checks)
    if dev >= 0:
        stream = _fast._stream_of(dev)
        if stream != ctx.stream:
            ctx.configure(0, 0, stream)
        if dev != _fast._current_device():
            with torch.cuda.device(dev):
                st = _fa_forward_kvcache(ctx.ptr, code, aq, akv, aopt, ao, al)
        else:
            st = _fa_forward_kvcache(ctx.ptr, code, aq, akv, aopt, ao, al)
    else:
        threads = _fast._num_threads()
        if threads != ctx.threads or ctx.isa != 0:
            ctx.configure(threads, 0, ctx.stream)
        st = _fa_forward_kvcache(ctx.ptr, code, aq, akv, aopt, ao, al)
    if st:
        raise _capi.error(st, ctx.last_error())
    return o, lse


def _bshd(t, B=None):
    """(shape, strides) of a [B, L, H, D] tensor in C's [B, H, L, D] order (B rows: the first B)."""
    n, s = t.shape, t.stride()
    return (n[0] if B is None else B, n[2], n[1], n[3]), (s[0], s[2], s[1], s[3])


def _new_plan(ctx, key, q, k_cache, v_cache, k, v, seqlens, block_table):
    """The plan of a call (see the module's docstring), kept in ctx; None
    when the call does not qualify."""
    scale, causal, window_size, softcap, num_splits, backend = key[-6:]
    if type(backend) is not str or backend not in _fast._BACKEND or type(num_splits) is not int:
        return None
    dt = _fast._DTYPES.get(q.dtype)
    device = q.device
    if dt is None or device.type not in ("cpu", "cuda"):
        return None
    tensors = (q, k_cache, v_cache) if k is None else (q, k_cache, v_cache, k, v)
    if any(t.dtype != q.dtype or t.device != device or t.dim() != 4 for t in tensors):
        return None
    B = q.shape[0]
    if seqlens.dtype != _int32 or seqlens.device != device or tuple(seqlens.shape) != (B,):
        return None
    if B > 1 and seqlens.stride() != (1,):
        return None
    if block_table is None:
        if k_cache.shape[0] < B or v_cache.shape[0] < B:
            return None
        max_blocks = 0
    else:
        if block_table.dtype != _int32 or block_table.device != device or block_table.dim() != 2:
            return None
        if block_table.shape[0] != B or not block_table.is_contiguous():
            return None
        max_blocks = block_table.shape[1]
    try:
        wl, wr = window_size
    except (TypeError, ValueError):
        return None
    if type(wl) is not int or type(wr) is not int:
        return None
    if scale is not None and type(scale) not in (int, float):
        return None
    if type(softcap) not in (int, float) or type(causal) is not bool:
        return None
    dev = -1 if device.type == "cpu" else device.index
    mem = _fast._CUDA if dev >= 0 else _fast._HOST
    Lq, Hq = q.shape[1], q.shape[2]
    Dv = v_cache.shape[3]
    qs, qst = _bshd(q)
    # o [B, Lq, Hq, Dv] contiguous, as the general path allocates it; lse [B, Hq, Lq]
    oshape = (B, Lq, Hq, Dv)
    os_, ost = (B, Hq, Lq, Dv), (Lq * Hq * Dv, Dv, Hq * Dv, 1)
    ldt = _fast._F64 if dt == _fast._F64 else _capi.F32
    rows = None if block_table is not None else B  # a contiguous cache with more rows: sequence b uses row b
    kcs, kcst = _bshd(k_cache, rows)
    vcs, vcst = _bshd(v_cache, rows)
    flat = lambda s, st: (0, dt, *s, *st, mem)  # noqa: E731
    new = (_capi._NO_TENSOR, _capi._NO_TENSOR) if k is None else (flat(*_bshd(k)), flat(*_bshd(v)))
    buf = C.create_string_buffer(3 * _T + _capi._KVCACHE.size)
    _capi._TENSOR.pack_into(buf, 0, *flat(qs, qst))
    _capi._TENSOR.pack_into(buf, _T, *flat(os_, ost))
    _capi._TENSOR.pack_into(buf, 2 * _T, 0, ldt, B, Hq, Lq, 1, Hq * Lq, Lq, 1, 0, mem)
    _capi._KVCACHE.pack_into(buf, 3 * _T, *flat(kcs, kcst), *flat(vcs, vcst), 0, 0, max_blocks, 0, *new[0], *new[1],
                             0, 0, 0, 0, 0, num_splits)  # fmt: skip
    opt = _capi.options(
        scale=float(scale or 0.0) or None,
        softcap=float(softcap or 0.0),
        causal=causal,
        align="bottom_right",
        window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
    )
    base = C.addressof(buf)
    plan = (memoryview(buf).cast("B").cast("Q"), _fast._BACKEND[backend], base, base + 3 * _T, C.addressof(opt),
            base + _T, base + 2 * _T, oshape, (B, Hq, Lq), torch.float64 if ldt == _fast._F64 else torch.float32, dev,
            (key, opt, buf))  # fmt: skip
    return _fast._remember(ctx, key, plan)
