"""The eager hot path: what a model calls in every layer, at the cost of one
ctypes call and a dict lookup.

A call qualifies when it has no tensor-valued option (no mask, bias, ALiBi,
seqlens, cu_seqlens or dropout; scalar options are fine: scale, softcap,
causal either alignment, window, deterministic, GQA), its q, k, v are plain
4-d tensors of one dtype on one cpu or cuda device, and nothing traces or
transforms it (plain_eager). Everything else goes through flashattn::fwd
(_ops.py); both reach the same C function with the same arguments, so they
give the same bits, output strides and gradients (tests/python/test_torch.py
checks).

A plan per call signature: everything that follows from q, k, v's shapes,
strides, dtypes and devices and the scalar options is worked out once and
kept in this thread's fa_context (ctx.fast_plans), keyed on exactly those
values: the five fa_tensors (q, k, v, o in the caller's layout, described
to C by permuted strides, never by a transposed view; lse) packed into the
plan's own buffer, the fa_options, o's and lse's shape, strides, dtype and
device. A call then reads the key off the tensors, allocates o (lse only
when someone needs it), writes the data pointers into the buffer, and calls
fa_forward. With autograd (q, k or v requires grad) the same runs inside an
autograd.Function, entered through the C apply (torch <= 2.11's Python
apply walks every argument with pytree); its backward keeps a plan of its
own for the nine fa_tensors of fa_backward, keyed on the forward's key and
the incoming gradient's strides.

Why: each torch call costs a few microseconds on a GPU server's host (a
view, a torch.empty), and the general path (option parsing, the dispatcher,
transposed views, an lse nobody reads) added 45-96 us to a 12 us C call
(bench/results/2026-11-30-h200-python-overhead.txt).
"""

import ctypes as C

import torch

from .. import _capi
from . import _ops

_Tensor = torch.Tensor
_T = _capi._TENSOR.size
_W = _T // 8  # 8-byte words per fa_tensor: slot i's data pointer is word i * _W
assert _T % 8 == 0 and _capi.Tensor.data.offset == 0, "fa_tensor layout"
_BACKEND = {name: i for i, name in enumerate(_capi.BACKENDS)}
_DTYPES = {torch.float32: _capi.F32, torch.float64: _capi.F64, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}
_HOST, _CUDA, _F64 = _capi.MEMORY_HOST, _capi.MEMORY_CUDA, _capi.F64
_MAX_PLANS = 128  # per thread; a model has a few signatures, a growing decode length one per step
_fa_forward = _capi.lib.fa_forward
_fa_backward = _capi.lib.fa_backward
_context = _capi.context
_grad_enabled = torch.is_grad_enabled
_num_threads = torch.get_num_threads
_empty_strided = torch.empty_strided
_empty_like = torch.empty_like
_empty = torch.empty
_stream_of = _ops._raw_stream or _ops.stream_of
_current_device = _ops.current_device
_local = _capi._local  # the thread-local that holds this thread's context (_capi.context)

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


def attention(q, k, v, bshd, scale, softcap, causal, bottom_right, window, deterministic, backend, want_lse, gqa=True):
    """(o, lse or None) through the hot path, with autograd when q, k or v
    needs it; None when the call does not qualify (see the module's
    docstring: the caller then takes the general path, which also raises the
    errors). o is in q's layout (bshd: [B, L, H, Dv]) and physical dim
    order; lse [B, H, Lq] only if want_lse. gqa=False: only calls with as
    many k / v heads as q heads qualify (SDPA's enable_gqa)."""
    if _compiling() or _function_mode() or _dispatch_modes() or _peek() is not None:
        return None
    if type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor:
        return None
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, q.device,
           k.device, v.device, bshd, scale, softcap, causal, bottom_right, window, deterministic, backend, gqa)  # fmt: skip
    try:
        ctx = _local.ctx
        plan = ctx.fast_plans[key]
    except (AttributeError, KeyError, TypeError):  # no context or plans yet, a new signature, an unhashable option
        ctx = _context()
        plan = _new_plan(ctx, key, q, k, v)
        if plan is None:
            return None
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if _UNWRAP:
            q, k, v = _unwrap(q), _unwrap(k), _unwrap(v)
        if want_lse:
            return _apply(q, k, v, plan, ctx, True)
        return _apply(q, k, v, plan, ctx, False), None
    return _run(ctx, q, k, v, plan, want_lse)


def _run(ctx, q, k, v, plan, want_lse):
    """fa_forward for a planned call: (o, lse or None)."""
    mv, code, aq, ak, av, aopt, ao, al, oshape, ostrides, dtype, device, lshape, o_like_q, ldtype, dev, _ = plan
    # empty_like and empty parse no shape / strides: on a GPU server's host
    # each saves ~0.8 us over empty_strided (bench/python_call_parts.py)
    o = _empty_like(q) if o_like_q else _empty_strided(oshape, ostrides, dtype=dtype, device=device)
    mv[0] = q.data_ptr()
    mv[_W] = k.data_ptr()
    mv[2 * _W] = v.data_ptr()
    mv[3 * _W] = o.data_ptr()
    if want_lse:
        lse = _empty(lshape, dtype=ldtype, device=device)
        mv[4 * _W] = lse.data_ptr()
    else:
        lse = al = None
    if dev >= 0:
        stream = _stream_of(dev)
        if stream != ctx.stream:
            ctx.configure(0, 0, stream)
        if dev != _current_device():
            with torch.cuda.device(dev):
                st = _fa_forward(ctx.ptr, code, aq, ak, av, aopt, ao, al)
        else:
            st = _fa_forward(ctx.ptr, code, aq, ak, av, aopt, ao, al)
    else:
        threads = _num_threads()
        if threads != ctx.threads or ctx.isa != 0:
            ctx.configure(threads, 0, ctx.stream)
        st = _fa_forward(ctx.ptr, code, aq, ak, av, aopt, ao, al)
    if st:
        raise _capi.error(st, ctx.last_error())
    return o, lse


def _c_order(shape, strides, bshd):
    """A 4-d tensor's shape and strides as C reads them, [B, H, L, D]."""
    if bshd:
        return (shape[0], shape[2], shape[1], shape[3]), (strides[0], strides[2], strides[1], strides[3])
    return tuple(shape), tuple(strides)


def _remember(ctx, key, plan):
    plans = ctx.__dict__.setdefault("fast_plans", {})
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    try:
        plans[key] = plan
    except TypeError:  # an unhashable option value (a list as window): planned again on every call
        pass
    return plan


def _new_plan(ctx, key, q, k, v):
    """The plan of a call (see the module's docstring), kept in ctx; None
    when the call does not qualify. key is attention()'s."""
    bshd, scale, softcap, causal, bottom_right, window, deterministic, backend, gqa = key[12:]
    if type(backend) is not str or backend not in _BACKEND:
        return None
    dt = _DTYPES.get(q.dtype)
    if dt is None or k.dtype != q.dtype or v.dtype != q.dtype:
        return None
    device = q.device
    if device.type not in ("cpu", "cuda") or k.device != device or v.device != device:
        return None
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None
    if not gqa and q.shape[2 if bshd else 1] != k.shape[2 if bshd else 1]:
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
    dev = -1 if device.type == "cpu" else device.index
    mem = _CUDA if dev >= 0 else _HOST
    qs, qst = _c_order(q.shape, q.stride(), bshd)
    ks, kst = _c_order(k.shape, k.stride(), bshd)
    vs, vst = _c_order(v.shape, v.stride(), bshd)
    B, Hq, Lq, _ = qs
    os_, ost = _ops.like_strides(qs, qst, vs[3])  # alloc_like's layout, as the op path allocates o
    ldt = _F64 if dt == _F64 else _capi.F32
    descs = (
        (dt, *qs, *qst, mem),
        (dt, *ks, *kst, mem),
        (dt, *vs, *vst, mem),
        (dt, *os_, *ost, mem),
        (ldt, B, Hq, Lq, 1, Hq * Lq, Lq, 1, 0, mem),
    )
    buf = C.create_string_buffer(5 * _T)
    for i, d in enumerate(descs):
        _capi._TENSOR.pack_into(buf, i * _T, 0, *d)
    opt = _capi.options(
        scale=float(scale or 0.0) or None,
        softcap=float(softcap or 0.0),
        causal=bool(causal),
        align="bottom_right" if bottom_right else "top_left",
        window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
        deterministic=bool(deterministic),
    )
    base = C.addressof(buf)
    oshape, ostrides = _c_order(os_, ost, bshd)  # the caller's layout (the permutation is its own inverse)
    # o laid out as q (D = Dv, q dense): empty_like(q) makes it; asked of
    # empty_like itself, so that its layout rule and ours never disagree
    o_like_q = oshape == tuple(q.shape) and ostrides == tuple(q.stride()) and _empty_like(q).stride() == ostrides
    extra = (key, bshd, descs, opt, buf)
    plan = (memoryview(buf).cast("B").cast("Q"), _BACKEND[backend], base, base + _T, base + 2 * _T, C.addressof(opt),
            base + 3 * _T, base + 4 * _T, oshape, ostrides, q.dtype, device, (B, Hq, Lq), o_like_q,
            torch.float64 if ldt == _F64 else torch.float32, dev, extra)  # fmt: skip
    return _remember(ctx, key, plan)


def _new_backward_plan(ctx, bkey, plan, grad_o):
    """fa_backward's nine fa_tensors (q, k, v, o, do, lse, dq, dk, dv) for a
    forward plan and o's gradient's strides, kept in ctx (the backward's
    thread's context: autograd may run it on another thread)."""
    _, code, _, _, _, aopt, _, _, _, _, dtype, device, _, _, _, dev, extra = plan
    key, bshd, descs, opt, _ = extra
    mem = descs[0][-1]
    ds, dst = _c_order(grad_o.shape, grad_o.stride(), bshd)
    grads, alloc = [], []
    for d in descs[:3]:  # dq, dk, dv: alloc_like of q, k, v as the op path's backward allocates them
        shape, strides = _ops.like_strides(d[1:5], d[5:9], d[4])
        grads.append((d[0], *shape, *strides, mem))
        alloc.append(_c_order(shape, strides, bshd))
    all9 = (*descs[:4], (descs[3][0], *ds, *dst, mem), descs[4], *grads)
    buf = C.create_string_buffer(9 * _T)
    for i, d in enumerate(all9):
        _capi._TENSOR.pack_into(buf, i * _T, 0, *d)
    base = C.addressof(buf)
    a = tuple(base + i * _T for i in range(9))
    bplan = (memoryview(buf).cast("B").cast("Q"), code, *a, aopt, *alloc, dtype, device, dev, (opt, buf))
    return _remember(ctx, bkey, bplan)


def _backward_general(ctx, grad_o):
    """The op path's backward (flashattn::bwd's kernel on [B, H, L, D] views):
    for double backward (create_graph) and unusual gradients."""
    q, k, v, o, lse = ctx.saved_tensors
    key = ctx.plan[-1][0]
    bshd, scale, softcap, causal, bottom_right, window, det, backend, _ = key[12:]
    wl, wr = (-1, -1) if window is None else window
    if bshd:
        q, k, v, o, grad_o = (t.transpose(1, 2) for t in (q, k, v, o, grad_o))
    scalars = (float(scale or 0.0), float(softcap or 0.0), bool(causal), bottom_right, wl, wr, 0.0, bool(det))
    saved = (q, k, v) + (None,) * 8 + (o, lse)
    dq, dk, dv, _ = _ops.backward_formula(_ops.bwd_impl, saved, scalars + (backend, 0, 0), grad_o, False)
    if bshd:
        dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
    return dq, dk, dv, None, None, None


_backward_once = torch.autograd.function.once_differentiable(_backward_general)


class Attention(torch.autograd.Function):
    """The hot path with autograd: forward(q, k, v, plan, fa_ctx, with_lse) returns
    (o, lse) if with_lse, else o alone (autograd sets up one output less).
    The backward runs fa_backward on its own plan; it gives the op path's
    bits and strides (flashattn::bwd's kernel on the same arguments)."""

    @staticmethod
    def forward(ctx, q, k, v, plan, fa_ctx, with_lse):
        o, lse = _run(fa_ctx, q, k, v, plan, True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan = plan
        if not with_lse:
            return o
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # no zeros made for lse's (unused) gradient
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, *grad_lse):
        if grad_o is None:
            return None, None, None, None, None, None
        if _grad_enabled() or type(grad_o) is not _Tensor or grad_o.stride(-1) != 1:
            return _backward_once(ctx, grad_o)  # create_graph (once_differentiable's error), odd gradients
        q, k, v, o, lse = ctx.saved_tensors
        plan = ctx.plan
        bkey = (plan[-1][0], grad_o.stride())
        tctx = _context()
        try:
            bp = tctx.fast_plans[bkey]
        except (AttributeError, KeyError):
            bp = _new_backward_plan(tctx, bkey, plan, grad_o)
        mv, code, aq, ak, av, ao, ado, al, adq, adk, adv, aopt, sq, sk, sv, dtype, device, dev, _ = bp
        dq = _empty_strided(sq[0], sq[1], dtype=dtype, device=device)
        dk = _empty_strided(sk[0], sk[1], dtype=dtype, device=device)
        dv = _empty_strided(sv[0], sv[1], dtype=dtype, device=device)
        mv[0] = q.data_ptr()
        mv[_W] = k.data_ptr()
        mv[2 * _W] = v.data_ptr()
        mv[3 * _W] = o.data_ptr()
        mv[4 * _W] = grad_o.data_ptr()
        mv[5 * _W] = lse.data_ptr()
        mv[6 * _W] = dq.data_ptr()
        mv[7 * _W] = dk.data_ptr()
        mv[8 * _W] = dv.data_ptr()
        if dev >= 0:
            stream = _stream_of(dev)
            if stream != tctx.stream:
                tctx.configure(0, 0, stream)
            if dev != _current_device():
                with torch.cuda.device(dev):
                    st = _fa_backward(tctx.ptr, code, aq, ak, av, ao, ado, al, aopt, adq, adk, adv, None)
            else:
                st = _fa_backward(tctx.ptr, code, aq, ak, av, ao, ado, al, aopt, adq, adk, adv, None)
        else:
            threads = _num_threads()
            if threads != tctx.threads or tctx.isa != 0:
                tctx.configure(threads, 0, tctx.stream)
            st = _fa_backward(tctx.ptr, code, aq, ak, av, ao, ado, al, aopt, adq, adk, adv, None)
        if st:
            raise _capi.error(st, tctx.last_error())
        return dq, dk, dv, None, None, None


# Function.apply's C part: torch <= 2.11 wraps it in Python (a pytree walk
# over the arguments to unwrap dead functorch wrappers, done here on q, k, v
# by _unwrap; a functorch transform never reaches this: plain_eager); newer
# torch calls the C part directly
_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, Attention)
_UNWRAP = torch.autograd.Function.__dict__.get("apply") is not torch._C._FunctionBase.__dict__["apply"]
_unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None) or (lambda t: t)
