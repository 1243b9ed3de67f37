"""The two torch.library custom ops, flashattn::fwd and flashattn::bwd, over
the C library; their fake (meta) kernels, so torch.compile traces them
without graph breaks; and the autograd formula that ties them together.

Tensors arrive in the C library's logical order, [B, H, L, D] (views of any
strides: a [B, L, H, D] tensor comes as its transpose, no copy); mask and
bias are 4-d with size-1 broadcast dims. Outputs are allocated in the
physical dim order of the tensor they mirror, so a [B, L, H, D] caller gets
a contiguous [B, L, H, D] result back.

fwd_impl and bwd_impl are the ops' real kernels; _attention.py calls them
directly (through an autograd.Function) in plain eager mode, where the
dispatcher's round trip would cost more than the C call.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _capi

_DTYPES = {
    torch.float32: _capi.F32,
    torch.float64: _capi.F64,
    torch.float16: _capi.F16,
    torch.bfloat16: _capi.BF16,
    torch.bool: _capi.BOOL,
}
# the raw stream and device getters of torch's CUDA runtime (what inductor
# calls); the public ones cost microseconds a call
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def stream_of(index):
    """The current CUDA stream of device index, as an address."""
    return _raw_stream(index) if _raw_stream else torch.cuda.current_stream(index).cuda_stream


def _code(t, arg):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise _capi.invalid(
            f"{arg}.dtype = {t.dtype}: flashattn takes float32, float64, float16, bfloat16", "FA_ERR_DTYPE"
        ) from None


def _mem(t):
    return _capi.MEMORY_CUDA if t.is_cuda else _capi.MEMORY_HOST


def _spec(t, arg):
    """(data, dtype, shape, strides, memory) of a tensor, or None."""
    if t is None:
        return None
    return (t.data_ptr(), _code(t, arg), tuple(t.shape), t.stride(), _mem(t))


def _ptr(t):
    return None if t is None else t.data_ptr()


def like_strides(shape, strides, last):
    """(shape, strides) of a dense tensor of shape (last dim = last) laid out
    in the physical dim order of strides (largest first, ties in dim order);
    alloc_like's layout, also what the hot path (_fast.py) allocates."""
    shape = list(shape)
    shape[-1] = last
    n = len(shape)
    order = sorted(range(n - 1), key=lambda d: -strides[d])
    out = [0] * n
    out[n - 1], step = 1, last
    for d in reversed(order):
        out[d] = step
        step *= shape[d]
    return shape, out


def alloc_like(t, last):
    """An empty tensor of t's shape (last dim = last) laid out in t's physical
    dim order (largest stride first)."""
    shape, strides = like_strides(t.shape, t.stride(), last)
    return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device)


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _context(q):
    """This thread's C context, set to q's stream (cuda) or torch's thread count (cpu)."""
    ctx = _capi.context()
    if q.is_cuda:
        ctx.configure(0, 0, stream_of(q.get_device()))
    else:
        ctx.configure(torch.get_num_threads(), 0, None)
    return ctx


def _options(
    ctx, mask, bias, alibi, sq, sk, cuq, cuk, rng, scale, softcap, causal, bottom_right, wl, wr, p, det, qo=0, ko=0
):
    """The fa_options of a call, cached on the context (qo, ko: q_offset, k_offset)."""
    seed, offset = (0, 0) if rng is None else rng.tolist()
    mask_s, bias_s = _spec(mask, "mask"), _spec(bias, "bias")
    ptrs = (_ptr(sq), _ptr(sk), _ptr(cuq), _ptr(cuk), _ptr(alibi))
    num_seqs = 0 if cuq is None else cuq.shape[0] - 1
    # the arrays' addresses AND the packed count: a new cu_seqlens of another
    # length can sit where a freed one was
    key = (mask_s, bias_s, ptrs, num_seqs, seed, offset, scale, softcap, causal, bottom_right, wl, wr, p, det, qo, ko)

    def make():
        return _capi.options(
            scale=scale or None,
            softcap=softcap,
            causal=causal,
            align="bottom_right" if bottom_right else "top_left",
            window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
            seqlens_q=ptrs[0],
            seqlens_k=ptrs[1],
            cu_seqlens_q=ptrs[2],
            cu_seqlens_k=ptrs[3],
            num_seqs=num_seqs,
            mask=None if mask_s is None else _capi.tensor(*mask_s),
            bias=None if bias_s is None else _capi.tensor(*bias_s),
            alibi_slopes=ptrs[4],
            dropout_p=p,
            dropout_seed=seed % 2**64,
            dropout_offset=offset,
            deterministic=det,
            q_offset=qo,
            k_offset=ko,
        )

    return ctx.cached_options(key, make)


def _tensor(ctx, slot, t, arg):
    return ctx.tensor(slot, t.data_ptr(), _code(t, arg), t.shape, t.stride(), _mem(t))


def _launch(q, fn, *args):
    """fn(*args) on q's device (a guard only when it is not the current one)."""
    if q.is_cuda and q.get_device() != current_device():
        with torch.cuda.device(q.device):
            fn(*args)
    else:
        fn(*args)


def fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor],
    bias: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    seqlens_q: Optional[Tensor],
    seqlens_k: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    rng: Optional[Tensor],
    scale: float,
    softcap: float,
    causal: bool,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    dropout_p: float,
    deterministic: bool,
    backend: str,
    q_offset: int,
    k_offset: int,
) -> Tuple[Tensor, Tensor]:
    """o [B, Hq, Lq, Dv] and lse [B, Hq, Lq] (rng: CPU int64 (seed, offset), for dropout;
    q_offset, k_offset: positions of row 0 and key 0 in the whole sequence, fa_options')."""
    ctx = _context(q)
    code = _capi.code_of(backend, _capi.BACKENDS, "backend")
    opt = _options(ctx, mask, bias, alibi_slopes, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k, rng, scale,
                   softcap, causal, bottom_right, window_left, window_right, dropout_p, deterministic, q_offset,
                   k_offset)  # fmt: skip
    o = alloc_like(q, v.shape[-1])
    lse = torch.empty(q.shape[:3], dtype=_lse_dtype(q), device=q.device)
    if cu_seqlens_q is not None:  # C writes only the rows of the packed sequences: define the rest
        o.zero_()
        lse.fill_(float("-inf"))
    ts = [_tensor(ctx, i, t, n) for i, (t, n) in enumerate(((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse")))]
    _launch(q, _capi.forward, ctx, code, ts[0], ts[1], ts[2], opt, ts[3], ts[4])
    return o, lse


fwd = torch.library.custom_op("flashattn::fwd", mutates_args=())(fwd_impl)


@fwd.register_fake
def _fwd_fake(q, k, v, *rest):
    return alloc_like(q, v.shape[-1]), q.new_empty(q.shape[:3], dtype=_lse_dtype(q))


def bwd_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    mask: Optional[Tensor],
    bias: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    seqlens_q: Optional[Tensor],
    seqlens_k: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    rng: Optional[Tensor],
    scale: float,
    softcap: float,
    causal: bool,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    dropout_p: float,
    deterministic: bool,
    backend: str,
    q_offset: int,
    k_offset: int,
    want_dbias: bool,
) -> List[Tensor]:
    """[dq, dk, dv, dbias] (dbias empty unless want_dbias)."""
    ctx = _context(q)
    code = _capi.code_of(backend, _capi.BACKENDS, "backend")
    opt = _options(ctx, mask, bias, alibi_slopes, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k, rng, scale,
                   softcap, causal, bottom_right, window_left, window_right, dropout_p, deterministic, q_offset,
                   k_offset)  # fmt: skip
    dq, dk, dv = alloc_like(q, q.shape[-1]), alloc_like(k, k.shape[-1]), alloc_like(v, v.shape[-1])
    if cu_seqlens_q is not None:  # rows past the last packed sequence get no gradient
        for t in (dq, dk, dv):
            t.zero_()
    # (every backend writes each dBias element: the shared suite poisons it first)
    dbias = torch.empty(bias.shape, dtype=bias.dtype, device=bias.device) if want_dbias else q.new_empty(0)
    named = ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (dout, "dout"), (lse, "lse"), (dq, "dq"), (dk, "dk"), (dv, "dv"))
    ts = [_tensor(ctx, i, t, n) for i, (t, n) in enumerate(named)]
    tdb = _tensor(ctx, 9, dbias, "dbias") if want_dbias else None
    _launch(q, _capi.backward, ctx, code, *ts[:6], opt, *ts[6:], tdb)
    return [dq, dk, dv, dbias]


bwd = torch.library.custom_op("flashattn::bwd", mutates_args=())(bwd_impl)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, o, lse, mask, bias, *rest):
    dbias = bias.new_empty(bias.shape) if rest[-1] else q.new_empty(0)
    return [alloc_like(q, q.shape[-1]), alloc_like(k, k.shape[-1]), alloc_like(v, v.shape[-1]), dbias]


# ---- autograd: d(o)/d(q, k, v, bias) through flashattn::bwd -----------------
TENSOR_ARGS = 11  # q .. rng, in fwd's order
BIAS = 4


def backward_formula(bwd_fn, saved, scalars, grad_o, want_dbias):
    """(dq, dk, dv, dbias or None) from the tensors fwd saved (its tensor
    arguments, then o and lse) and o's gradient. The gradient through lse is
    not computed (as in FlashAttention)."""
    q, k, v, mask, bias, alibi, sq, sk, cuq, cuk, rng, o, lse = saved
    if grad_o.stride(-1) != 1:  # e.g. the expanded ones of a .sum(): the cuda kernels want a unit last stride
        grad_o = grad_o.contiguous()
    dq, dk, dv, dbias = bwd_fn(grad_o, q, k, v, o, lse, mask, bias, alibi, sq, sk, cuq, cuk, rng, *scalars, want_dbias)
    return dq, dk, dv, dbias if want_dbias else None


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:TENSOR_ARGS], *output)
    ctx.scalars = inputs[TENSOR_ARGS:]


def _backward(ctx, grad_o, grad_lse):
    saved = ctx.saved_tensors
    want_dbias = saved[BIAS] is not None and ctx.needs_input_grad[BIAS]
    dq, dk, dv, dbias = backward_formula(bwd, saved, ctx.scalars, grad_o, want_dbias)
    return (dq, dk, dv, None, dbias) + (None,) * (TENSOR_ARGS - 5 + len(ctx.scalars))


torch.library.register_autograd("flashattn::fwd", _backward, setup_context=_setup_context)
