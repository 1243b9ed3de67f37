"""The eager hot path: what a model calls in every layer, at the cost of one
ctypes call.

A call qualifies when it has no tensor-valued option (no mask, bias, ALiBi,
seqlens, cu_seqlens or dropout; scalar options are fine: scale, softcap,
causal either alignment, window, deterministic, GQA), its q, k, v are plain
4-d tensors on one device, and nothing traces or transforms it
(_attention._plain_eager). Then the five fa_tensors are packed into the
context's buffer by one struct.pack_into, straight from the tensors' shapes
and strides in the caller's layout (a [B, L, H, D] tensor is described to C
by permuted strides, not by a transposed view), o is allocated in q's
physical dim order, lse only when someone needs it (C takes lse = NULL), and
fa_forward runs. Everything else goes through flashattn::fwd (_ops.py); both
reach the same C function with the same arguments, so they give the same
bits (tests/python/test_torch.py checks).

Why a second path: each torch call costs a few microseconds on a GPU
server's host (a view, a torch.empty), and the general path (option
parsing, the dispatcher, transposed views, an lse nobody reads) added
45-96 us to a 12 us C call (bench/results/2026-11-30-h200-python-overhead.txt).
"""

import struct

import torch

from .. import _capi
from . import _ops

_Tensor = torch.Tensor
_PACK5 = struct.Struct("@" + _capi._TENSOR.format[1:] * 5)  # q, k, v, o, lse in slots 0 .. 4
_T = _capi._TENSOR.size
_BACKEND = {name: i for i, name in enumerate(_capi.BACKENDS)}
_DTYPES = _ops._DTYPES
_HOST, _CUDA, _F32, _F64 = _capi.MEMORY_HOST, _capi.MEMORY_CUDA, _capi.F32, _capi.F64
_NO_TENSOR = (0,) * 11  # data NULL: no lse
_fa_forward = _capi.lib.fa_forward
_context = _capi.context
_grad_enabled = torch.is_grad_enabled
_num_threads = torch.get_num_threads

# what makes a call other than plain eager (torch.compile tracing, a torch
# function or dispatch mode, a functorch transform); absent ones count as "yes"
_compiling = torch.compiler.is_compiling
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: True)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
_peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None) or (lambda: True)


def plain_eager(tensors):
    """True in plain eager mode on plain tensors (None entries ignored): no
    torch.compile tracing, no tensor subclass (fake, functional, DTensor,
    Parameter), no torch function or dispatch mode, no functorch transform.
    Only then is calling an op's kernel directly the same as calling the op."""
    if _compiling() or _function_mode() or _dispatch_modes() or _peek() is not None:
        return False
    return all(type(t) is _Tensor for t in tensors if t is not None)


def _make_options(key):
    scale, softcap, causal, bottom_right, wl, wr, det, _ = key
    return _capi.options(
        scale=float(scale or 0.0) or None,
        softcap=float(softcap or 0.0),
        causal=bool(causal),
        align="bottom_right" if bottom_right else "top_left",
        window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
        deterministic=bool(det),
    )


def attention(q, k, v, bshd, scale, softcap, causal, bottom_right, window, deterministic, backend, want_lse):
    """(o, lse or None) through the hot path, with autograd when q, k or v
    needs it; None when the call does not qualify (see the module's
    docstring: the caller then takes the general path, which also raises the
    errors). o is in q's layout (bshd: [B, L, H, Dv]) and physical dim
    order; lse [B, H, Lq] only if want_lse (or a gradient needs it)."""
    if _compiling() or _function_mode() or _dispatch_modes() or _peek() is not None:
        return None
    if type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor:
        return None
    if window is None:
        wl = wr = -1
    else:
        try:
            wl, wr = window
        except (TypeError, ValueError):
            return None
        if type(wl) is not int or type(wr) is not int:
            return None
    key = (scale, softcap, causal, bottom_right, wl, wr, deterministic, backend)
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        p = _plan(q, k, v, bshd, backend)
        if p is None:
            return None
        if want_lse:
            return Attention.apply(q, k, v, bshd, key, p, True)
        return Attention.apply(q, k, v, bshd, key, p, False), None
    p = _plan(q, k, v, bshd, backend)
    return None if p is None else _forward(q, key, p, want_lse)


def _plan(q, k, v, bshd, backend):
    """What _forward needs, read off q, k, v, or None when the call does not
    qualify."""
    code = _BACKEND.get(backend)
    dt = _DTYPES.get(q.dtype)
    if code is None or dt is None or k.dtype != q.dtype or v.dtype != q.dtype:
        return None
    sq, sk, sv = q.shape, k.shape, v.shape
    if len(sq) != 4 or len(sk) != 4 or len(sv) != 4:
        return None
    dev = q.get_device()
    if k.get_device() != dev or v.get_device() != dev:
        return None
    a, b, c, d = q.stride()
    ka, kb, kc, kd = k.stride()
    va, vb, vc, vd = v.stride()
    if bshd:  # [B, L, H, D] described to C as [B, H, L, D] by its strides
        B, Lq, Hq, D = sq
        _, Lk, Hkv, Dk = sk
        qt = (q.data_ptr(), dt, B, Hq, Lq, D, a, c, b, d)
        kt = (k.data_ptr(), dt, B, Hkv, Lk, Dk, ka, kc, kb, kd)
        vt = (v.data_ptr(), dt, B, Hkv, Lk, sv[3], va, vc, vb, vd)
        h_outer = c >= b
    else:
        B, Hq, Lq, D = sq
        qt = (q.data_ptr(), dt, B, Hq, Lq, D, a, b, c, d)
        kt = (k.data_ptr(), dt, *sk, ka, kb, kc, kd)
        vt = (v.data_ptr(), dt, *sv, va, vb, vc, vd)
        h_outer = b >= c
    if B > 1 and a < (b if b > c else c):  # B not outermost: left to alloc_like's general order
        return None
    return code, dt, dev, qt, kt, vt, sv[3], h_outer, bshd


def _forward(q, key, p, want_lse):
    """(o, lse or None) for the plan p of a qualifying call."""
    code, dt, dev, qt, kt, vt, Dv, h_outer, bshd = p
    B, Hq, Lq = qt[2], qt[3], qt[4]
    if h_outer:
        o = q.new_empty((B, Hq, Lq, Dv))
        os_ = (Hq * Lq * Dv, Lq * Dv, Dv, 1)
    else:
        o = q.new_empty((B, Lq, Hq, Dv))
        os_ = (Lq * Hq * Dv, Dv, Hq * Dv, 1)
    mem = _CUDA if dev >= 0 else _HOST
    ctx = _context()
    base = ctx.base
    if want_lse:
        lt = _F64 if dt == _F64 else _F32
        lse = q.new_empty((B, Hq, Lq), dtype=torch.float64 if lt == _F64 else torch.float32)
        lt = (lse.data_ptr(), lt, B, Hq, Lq, 1, Hq * Lq, Lq, 1, 0, mem)
        la = base + 4 * _T
    else:
        lse, lt, la = None, _NO_TENSOR, None
    _PACK5.pack_into(ctx.buf, 0, *qt, mem, *kt, mem, *vt, mem, o.data_ptr(), dt, B, Hq, Lq, Dv, *os_, mem, *lt)
    opt = ctx.options_cache.get(key)
    opt = opt[1] if opt is not None else ctx.cached_options_address(key, lambda: _make_options(key))
    if dev >= 0:
        stream = _ops.stream_of(dev)
        if stream != ctx.stream:
            ctx.configure(0, 0, stream)
        if dev != _ops.current_device():
            with torch.cuda.device(dev):
                st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
        else:
            st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
    else:
        threads = _num_threads()
        if threads != ctx.threads or ctx.isa != 0:
            ctx.configure(threads, 0, ctx.stream)
        st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
    if st:
        raise _capi.error(st, ctx.last_error())
    if h_outer == bshd:  # allocated in the other order: the caller's layout as a view
        o = o.transpose(1, 2)
    return o, lse


class Attention(torch.autograd.Function):
    """The hot path with autograd: the backward runs flashattn::bwd's kernel
    (_ops.bwd_impl) on [B, H, L, D] views, as the general path does. Returns
    (o, lse) if with_lse, else o alone (autograd sets up one output less)."""

    @staticmethod
    def forward(ctx, q, k, v, bshd, key, p, with_lse):
        o, lse = _forward(q, key, p, True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.bshd, ctx.key = bshd, key
        if not with_lse:
            return o
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_o, *grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.bshd:
            q, k, v, o, grad_o = (t.transpose(1, 2) for t in (q, k, v, o, grad_o))
        scale, softcap, causal, bottom_right, wl, wr, det, backend = ctx.key
        scalars = (float(scale or 0.0), float(softcap or 0.0), bool(causal), bottom_right, wl, wr, 0.0, bool(det))
        saved = (q, k, v) + (None,) * 8 + (o, lse)
        dq, dk, dv, _ = _ops.backward_formula(_ops.bwd_impl, saved, scalars + (backend,), grad_o, False)
        if ctx.bshd:
            dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
        return dq, dk, dv, None, None, None, None
