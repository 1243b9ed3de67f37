"""The two torch.library custom ops, flashattn::fwd and flashattn::bwd, over
the C library; their fake (meta) kernels, so torch.compile traces them
without graph breaks; and the autograd formula that ties them together.

Tensors arrive in the C library's logical order, [B, H, L, D] (views of any
strides: a [B, L, H, D] tensor comes as its transpose, no copy); mask and
bias are 4-d with size-1 broadcast dims. Outputs are allocated in the
physical dim order of the tensor they mirror, so a [B, L, H, D] caller gets
a contiguous [B, L, H, D] result back.
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


def _code(t, arg):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise _capi.invalid(
            f"{arg}.dtype = {t.dtype}: flashattn takes float32, float64, float16, bfloat16", "FA_ERR_DTYPE"
        ) from None


def _fa(t, arg):
    """The fa_tensor viewing t (1 to 4 dims; lse is 3-d)."""
    if t is None:
        return None
    mem = _capi.MEMORY_CUDA if t.is_cuda else _capi.MEMORY_HOST
    return _capi.tensor(t.data_ptr(), _code(t, arg), t.shape, t.stride(), mem)


def _ptr(t):
    return None if t is None else t.data_ptr()


def alloc_like(t, last):
    """An empty tensor of t's shape (last dim = last) laid out in t's physical
    dim order (largest stride first)."""
    shape = list(t.shape)
    shape[-1] = last
    strides = t.stride()
    order = sorted(range(t.dim() - 1), key=lambda d: -strides[d]) + [t.dim() - 1]
    phys = torch.empty([shape[d] for d in order], dtype=t.dtype, device=t.device)
    inverse = [order.index(d) for d in range(t.dim())]
    return phys.permute(inverse)


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


class _Call:
    """The C context for one call: current device and stream (cuda) or
    torch's thread count (cpu), the options struct, the backend code."""

    def __init__(
        self,
        q,
        mask,
        bias,
        alibi,
        sq,
        sk,
        cuq,
        cuk,
        rng,
        scale,
        softcap,
        causal,
        bottom_right,
        wl,
        wr,
        dropout_p,
        deterministic,
        backend,
    ):
        seed, offset = (0, 0) if rng is None else (int(x) for x in rng.tolist())
        self.backend = _capi.code_of(backend, _capi.BACKENDS, "backend")
        self.opt = _capi.options(
            scale=scale or None,
            softcap=softcap,
            causal=causal,
            align="bottom_right" if bottom_right else "top_left",
            window=(wl, wr) if (wl >= 0 or wr >= 0) else None,
            seqlens_q=_ptr(sq),
            seqlens_k=_ptr(sk),
            cu_seqlens_q=_ptr(cuq),
            cu_seqlens_k=_ptr(cuk),
            num_seqs=0 if cuq is None else cuq.shape[0] - 1,
            mask=_fa(mask, "mask"),
            bias=_fa(bias, "bias"),
            alibi_slopes=_ptr(alibi),
            dropout_p=dropout_p,
            dropout_seed=seed % 2**64,
            dropout_offset=offset,
            deterministic=deterministic,
        )
        self.device = q.device
        self.ctx = _capi.context()
        if q.is_cuda:
            self.ctx.configure(0, 0, torch.cuda.current_stream(q.device).cuda_stream)
        else:
            self.ctx.configure(torch.get_num_threads(), 0, None)

    def run(self, fn, *args):
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                fn(self.ctx, self.backend, *args)
        else:
            fn(self.ctx, self.backend, *args)


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(
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
) -> Tuple[Tensor, Tensor]:
    """o [B, Hq, Lq, Dv] and lse [B, Hq, Lq] (rng: CPU int64 (seed, offset), for dropout)."""
    c = _Call(
        q,
        mask,
        bias,
        alibi_slopes,
        seqlens_q,
        seqlens_k,
        cu_seqlens_q,
        cu_seqlens_k,
        rng,
        scale,
        softcap,
        causal,
        bottom_right,
        window_left,
        window_right,
        dropout_p,
        deterministic,
        backend,
    )
    o = alloc_like(q, v.shape[-1])
    lse = torch.empty(q.shape[:3], dtype=_lse_dtype(q), device=q.device)
    if cu_seqlens_q is not None:  # C writes only the rows of the packed sequences: define the rest
        o.zero_()
        lse.fill_(float("-inf"))
    c.run(_capi.forward, _fa(q, "q"), _fa(k, "k"), _fa(v, "v"), c.opt, _fa(o, "o"), _fa(lse, "lse"))
    return o, lse


@fwd.register_fake
def _fwd_fake(
    q,
    k,
    v,
    mask,
    bias,
    alibi_slopes,
    seqlens_q,
    seqlens_k,
    cu_seqlens_q,
    cu_seqlens_k,
    rng,
    scale,
    softcap,
    causal,
    bottom_right,
    window_left,
    window_right,
    dropout_p,
    deterministic,
    backend,
):
    return alloc_like(q, v.shape[-1]), q.new_empty(q.shape[:3], dtype=_lse_dtype(q))


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(
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
    want_dbias: bool,
) -> List[Tensor]:
    """[dq, dk, dv, dbias] (dbias empty unless want_dbias)."""
    c = _Call(
        q,
        mask,
        bias,
        alibi_slopes,
        seqlens_q,
        seqlens_k,
        cu_seqlens_q,
        cu_seqlens_k,
        rng,
        scale,
        softcap,
        causal,
        bottom_right,
        window_left,
        window_right,
        dropout_p,
        deterministic,
        backend,
    )
    dq, dk, dv = alloc_like(q, q.shape[-1]), alloc_like(k, k.shape[-1]), alloc_like(v, v.shape[-1])
    if cu_seqlens_q is not None:  # rows past the last packed sequence get no gradient
        for t in (dq, dk, dv):
            t.zero_()
    dbias = torch.zeros(bias.shape, dtype=bias.dtype, device=bias.device) if want_dbias else q.new_empty(0)
    c.run(
        _capi.backward,
        _fa(q, "q"),
        _fa(k, "k"),
        _fa(v, "v"),
        _fa(o, "o"),
        _fa(dout, "dout"),
        _fa(lse, "lse"),
        c.opt,
        _fa(dq, "dq"),
        _fa(dk, "dk"),
        _fa(dv, "dv"),
        _fa(dbias, "dbias") if want_dbias else None,
    )
    return [dq, dk, dv, dbias]


@bwd.register_fake
def _bwd_fake(
    dout,
    q,
    k,
    v,
    o,
    lse,
    mask,
    bias,
    alibi_slopes,
    seqlens_q,
    seqlens_k,
    cu_seqlens_q,
    cu_seqlens_k,
    rng,
    scale,
    softcap,
    causal,
    bottom_right,
    window_left,
    window_right,
    dropout_p,
    deterministic,
    backend,
    want_dbias,
):
    dbias = bias.new_empty(bias.shape) if want_dbias else q.new_empty(0)
    return [alloc_like(q, q.shape[-1]), alloc_like(k, k.shape[-1]), alloc_like(v, v.shape[-1]), dbias]


# ---- autograd: d(o)/d(q, k, v, bias) through flashattn::bwd -----------------
_TENSOR_ARGS = 11  # q .. rng, in fwd's order
_BIAS = 4


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:_TENSOR_ARGS], *output)
    ctx.scalars = inputs[_TENSOR_ARGS:]


def _backward(ctx, grad_o, grad_lse):
    # The gradient through lse is not computed (as in FlashAttention); the
    # autograd graph still gives o's gradient exactly.
    q, k, v, mask, bias, alibi, sq, sk, cuq, cuk, rng, o, lse = ctx.saved_tensors
    if grad_o.stride(-1) != 1:  # e.g. the expanded ones of a .sum(): the cuda kernels want a unit last stride
        grad_o = grad_o.contiguous()
    want_dbias = bias is not None and ctx.needs_input_grad[_BIAS]
    dq, dk, dv, dbias = bwd(grad_o, q, k, v, o, lse, mask, bias, alibi, sq, sk, cuq, cuk, rng, *ctx.scalars, want_dbias)
    grads = [dq, dk, dv, None, dbias if want_dbias else None]
    return tuple(grads + [None] * (_TENSOR_ARGS - len(grads)) + [None] * len(ctx.scalars))


torch.library.register_autograd("flashattn::fwd", _backward, setup_context=_setup_context)
