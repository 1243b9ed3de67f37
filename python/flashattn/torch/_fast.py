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

_PACK5 = struct.Struct("@" + _capi._TENSOR.format[1:] * 5)  # q, k, v, o, lse in slots 0 .. 4
_T = _capi._TENSOR.size
_BACKEND = {name: i for i, name in enumerate(_capi.BACKENDS)}
_HOST, _CUDA = _capi.MEMORY_HOST, _capi.MEMORY_CUDA
_fa_forward = _capi.lib.fa_forward
_NO_TENSOR = (0,) * 11  # data NULL: no lse


def _options(ctx, key):
    """The address of the fa_options for key = (scale, softcap, causal,
    bottom_right, window_left, window_right, deterministic), built once."""
    scale, softcap, causal, bottom_right, wl, wr, det = key
    return ctx.cached_options_address(
        key,
        lambda: _capi.options(
            scale=scale or None,
            softcap=softcap,
            causal=causal,
            align="bottom_right" if bottom_right else "top_left",
            window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
            deterministic=det,
        ),
    )


def plan(q, k, v, bshd, backend):
    """What forward() needs, read off q, k, v, or None when the call does not
    qualify (see the module's docstring; the caller then takes the general
    path, which also raises the errors)."""
    code = _BACKEND.get(backend)
    dt = _ops._DTYPES.get(q.dtype)
    sq, sk, sv = q.shape, k.shape, v.shape
    if code is None or dt is None or k.dtype != q.dtype or v.dtype != q.dtype:
        return None
    if len(sq) != 4 or len(sk) != 4 or len(sv) != 4:
        return None
    dev = q.get_device()
    if k.get_device() != dev or v.get_device() != dev:
        return None
    a, b, c, d = q.stride()
    if bshd:  # [B, L, H, D] described to C as [B, H, L, D] by its strides
        B, Lq, Hq, D = sq
        qs, h_outer = (a, c, b, d), c >= b
        _, Lk, Hkv, Dk = sk
        a2, b2, c2, d2 = k.stride()
        kt = (k.data_ptr(), dt, B, Hkv, Lk, Dk, a2, c2, b2, d2)
        a2, b2, c2, d2 = v.stride()
        vt = (v.data_ptr(), dt, B, Hkv, Lk, sv[3], a2, c2, b2, d2)
    else:
        B, Hq, Lq, D = sq
        qs, h_outer = (a, b, c, d), b >= c
        kt = (k.data_ptr(), dt, *sk, *k.stride())
        vt = (v.data_ptr(), dt, *sv, *v.stride())
    if B > 1 and a < (b if b > c else c):  # B not outermost: left to alloc_like's general order
        return None
    return (code, dt, dev, (q.data_ptr(), dt, B, Hq, Lq, D, *qs), kt, vt, sv[3], h_outer)


def forward(q, bshd, key, p, want_lse):
    """(o, lse or None) for the plan p of a qualifying call; o in q's layout
    (bshd: [B, L, H, Dv]) and physical dim order; key as for _options."""
    code, dt, dev, qt, kt, vt, Dv, h_outer = p
    B, Hq, Lq = qt[2], qt[3], qt[4]
    if h_outer:
        o = q.new_empty((B, Hq, Lq, Dv))
        os_ = (Hq * Lq * Dv, Lq * Dv, Dv, 1)
    else:
        o = q.new_empty((B, Lq, Hq, Dv))
        os_ = (Lq * Hq * Dv, Dv, Hq * Dv, 1)
    mem = _CUDA if dev >= 0 else _HOST
    ctx = _capi.context()
    base = ctx.base
    if want_lse:
        f64 = dt == _capi.F64
        lse = q.new_empty((B, Hq, Lq), dtype=torch.float64 if f64 else torch.float32)
        lt = (lse.data_ptr(), _capi.F64 if f64 else _capi.F32, B, Hq, Lq, 1, Hq * Lq, Lq, 1, 0, mem)
        la = base + 4 * _T
    else:
        lse, lt, la = None, _NO_TENSOR, None
    _PACK5.pack_into(ctx.buf, 0, *qt, mem, *kt, mem, *vt, mem, o.data_ptr(), dt, B, Hq, Lq, Dv, *os_, mem, *lt)
    opt = _options(ctx, key)
    if dev >= 0:
        ctx.configure(0, 0, _ops.stream_of(dev))
        if dev != _ops.current_device():
            with torch.cuda.device(dev):
                st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
        else:
            st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
    else:
        ctx.configure(torch.get_num_threads(), 0, None)
        st = _fa_forward(ctx.ptr, code, base, base + _T, base + 2 * _T, opt, base + 3 * _T, la)
    if st:
        raise _capi.error(st, ctx.last_error())
    if h_outer == bshd:  # allocated in the other order: the caller's layout as a view
        o = o.transpose(1, 2)
    return o, lse


class Attention(torch.autograd.Function):
    """forward() with autograd: the backward runs flashattn::bwd's kernel
    (_ops.bwd_impl) on [B, H, L, D] views, as the general path does."""

    @staticmethod
    def forward(ctx, q, k, v, bshd, key, backend, p):
        o, lse = forward(q, bshd, key, p, True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.bshd, ctx.key, ctx.backend = bshd, key, backend
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.bshd:
            q, k, v, o, grad_o = (t.transpose(1, 2) for t in (q, k, v, o, grad_o))
        scale, softcap, causal, bottom_right, wl, wr, det = ctx.key
        scalars = (scale, softcap, causal, bottom_right, wl, wr, 0.0, det, ctx.backend)
        saved = (q, k, v) + (None,) * 8 + (o, lse)
        dq, dk, dv, _ = _ops.backward_formula(_ops.bwd_impl, saved, scalars, grad_o, False)
        if ctx.bshd:
            dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, bshd, key, backend, want_lse):
    """(o, lse) through the hot path, with autograd when q, k or v needs it;
    None when the call does not qualify. lse is None unless want_lse (or a
    gradient needs it)."""
    p = plan(q, k, v, bshd, backend)
    if p is None:
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return Attention.apply(q, k, v, bshd, key, backend, p)
    return forward(q, bshd, key, p, want_lse)
