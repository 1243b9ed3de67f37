"""attention(): every C option by its name on torch tensors, with autograd.
The FlashAttention- and SDPA-compatible functions are thin maps onto it.

CPU tensors run on the cpu backend (float64 on ref), CUDA tensors on the
cuda backend, on the current stream of the tensors' device; no copies
between host and device.
"""

import torch

from .. import _capi

from . import _fast, _fp8, _ops


def _padded4(t, arg):
    """mask / bias with leading size-1 dims up to [B, H, Lq, Lk] (a view)."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise _capi.invalid(f"{arg} must be a torch.Tensor, got {type(t).__name__}", "FA_ERR_DTYPE")
    if t.dim() > 4:
        raise _capi.invalid(f"{arg} has shape {tuple(t.shape)}, expected at most 4 dims [B, H, Lq, Lk]", "FA_ERR_SHAPE")
    return t[(None,) * (4 - t.dim())]


def _int32(t, arg, device, n=None):
    """seqlens / cu_seqlens as contiguous int32 on the tensors' device (C reads
    a bare pointer, so the length is checked here)."""
    if t is None:
        return None
    t = torch.as_tensor(t, device=device)
    if t.dim() != 1 or (n is not None and t.shape[0] != n):
        raise _capi.invalid(
            f"{arg} has shape {tuple(t.shape)}, expected [{n if n is not None else 'n'}]", "FA_ERR_SHAPE"
        )
    return t.to(torch.int32).contiguous()


def _rng(dropout_p, seed, offset):
    """(seed, offset) for dropout as a CPU int64 tensor, drawn from torch's
    generator unless given (so torch.manual_seed makes runs repeatable).
    Not drawn inside a CUDA graph capture: the seed would be captured with
    the call, and every replay would drop the same elements where the caller
    expects a new mask each step (PyTorch's own dropout advances a device-side
    offset per replay; ours has no such state). An explicit seed is captured
    as given."""
    if not dropout_p:
        return None
    if seed is None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise _capi.invalid(
            "dropout_p > 0 with no dropout_seed inside a CUDA graph capture: the seed drawn now would be "
            "replayed, the same dropout mask every replay; pass dropout_seed (ft.attention), or capture "
            "without dropout",
            "FA_ERR_UNSUPPORTED",
        )
    if seed is None:
        return torch.stack([torch.randint(0, 2**62, (), dtype=torch.int64), torch.tensor(offset, dtype=torch.int64)])
    if not 0 <= seed < 2**64:
        raise _capi.invalid(f"dropout_seed = {seed} must be in [0, 2**64)")
    return torch.tensor([seed - 2**64 if seed >= 2**63 else seed, offset], dtype=torch.int64)


_plain_eager = _fast.plain_eager


class _EagerAttention(torch.autograd.Function):
    """flashattn::fwd's autograd formula (_ops.backward_formula) around its
    kernel, without the dispatcher's round trip (a few microseconds a call)."""

    @staticmethod
    def forward(ctx, *args):
        o, lse = _ops.fwd_impl(*args)
        ctx.save_for_backward(*args[: _ops.TENSOR_ARGS], o, lse)
        ctx.scalars = args[_ops.TENSOR_ARGS :]
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_o, grad_lse):
        saved = ctx.saved_tensors
        want_dbias = saved[_ops.BIAS] is not None and ctx.needs_input_grad[_ops.BIAS]
        dq, dk, dv, dbias = _ops.backward_formula(_ops.bwd_impl, saved, ctx.scalars, grad_o, want_dbias)
        return (dq, dk, dv, None, dbias) + (None,) * (len(ctx.needs_input_grad) - 5)


def _call_fwd(args):
    """The op flashattn::fwd; in plain eager mode its kernel directly."""
    q, k, v, bias = args[0], args[1], args[2], args[_ops.BIAS]
    if not _plain_eager((q, k, v, args[3], bias)):
        return _ops.fwd(*args)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias))
    return _EagerAttention.apply(*args) if grad else _ops.fwd_impl(*args)


def alibi_tensor(slopes, Hq, device):
    """ALiBi slopes as a contiguous float32 [Hq] tensor on device (FlashAttention's
    [1, Hq] taken too; C reads a bare pointer, so the length is checked here)."""
    if slopes is None:
        return None
    slopes = torch.as_tensor(slopes, device=device)
    if slopes.dim() == 2 and slopes.shape[0] == 1:
        slopes = slopes[0]
    if tuple(slopes.shape) != (Hq,):
        raise _capi.invalid(
            f"alibi_slopes has shape {tuple(slopes.shape)}, expected ({Hq},) (one slope per query head, "
            "the same for every batch)",
            "FA_ERR_SHAPE",
        )
    return slopes.to(torch.float32).contiguous()


def _check_4d(t, arg, layout):
    if not isinstance(t, torch.Tensor):
        raise _capi.invalid(f"{arg} must be a torch.Tensor, got {type(t).__name__}", "FA_ERR_DTYPE")
    if t.dim() != 4:
        raise _capi.invalid(f"{arg} has shape {tuple(t.shape)}, expected 4 dims {layout}", "FA_ERR_SHAPE")


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    align="top_left",
    window=None,
    scale=None,
    softcap=0.0,
    alibi_slopes=None,
    bias=None,
    mask=None,
    seqlens_q=None,
    seqlens_k=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    dropout_p=0.0,
    dropout_seed=None,
    dropout_offset=0,
    deterministic=False,
    backend="auto",
    layout="bhsd",
    return_lse=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    out_dtype=None,
    q_offset=0,
    k_offset=0,
):
    """flashattn's attention on torch tensors, every option of the C library.

    q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv] (layout="bshd":
    [B, L, H, D]); returns o (same layout), and lse [B, Hq, Lq] float32 if
    return_lse. Differentiable in q, k, v and bias. Options as in
    flashattn.attention (numpy); dropout_seed=None draws the seed from
    torch's generator. q_offset, k_offset: positions of row 0 and key 0 in
    a longer sequence (causal, window, ALiBi and dropout act on positions:
    the block of the whole attention that ring_attention computes).

    FP8: torch.float8_e4m3fn q, k, v take q_descale, k_descale, v_descale
    (numbers or float32 [B, Hkv]) and out_dtype (torch.bfloat16, the
    default, or torch.float16); forward only (_fp8.py).
    """
    fp8 = _fp8.is_fp8(q)
    if not fp8 and (q_descale is not None or k_descale is not None or v_descale is not None or out_dtype is not None):
        raise _capi.invalid("q_descale, k_descale, v_descale and out_dtype are for float8_e4m3fn q, k, v only")
    plain = mask is None and bias is None and alibi_slopes is None and not dropout_p and not fp8
    plain = plain and not q_offset and not k_offset
    if plain and seqlens_q is None and seqlens_k is None and cu_seqlens_q is None and cu_seqlens_k is None:
        if layout in ("bhsd", "bshd") and align in ("top_left", "bottom_right"):
            r = _fast.attention(q, k, v, layout == "bshd", scale, softcap, causal, align == "bottom_right", window,
                                deterministic, backend, return_lse)  # fmt: skip
            if r is not None:
                return r if return_lse else r[0]
    if layout not in ("bhsd", "bshd"):
        raise _capi.invalid(f"layout = {layout!r}, expected 'bhsd' ([B, H, L, D]) or 'bshd' ([B, L, H, D])")
    want = "[B, H, L, D]" if layout == "bhsd" else "[B, L, H, D]"
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        _check_4d(t, n, want)
    if layout == "bshd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if align not in ("top_left", "bottom_right"):
        raise _capi.invalid(f"align = {align!r}, expected 'top_left' or 'bottom_right'")
    if window is None:
        wl, wr = -1, -1
    else:
        try:
            wl, wr = (int(x) for x in window)
        except (TypeError, ValueError):
            raise _capi.invalid(f"window = {window!r}, expected a pair (left, right); -1 = unbounded") from None
    dev, B, Hq = q.device, q.shape[0], q.shape[1]
    alibi_slopes = alibi_tensor(alibi_slopes, Hq, dev)
    if cu_seqlens_q is not None and cu_seqlens_k is not None and len(cu_seqlens_q) != len(cu_seqlens_k):
        raise _capi.invalid(f"cu_seqlens_q has {len(cu_seqlens_q)} entries but cu_seqlens_k has {len(cu_seqlens_k)}")
    if fp8:  # forward only: no autograd, no custom op
        if mask is not None or bias is not None or dropout_p:
            what = "mask" if mask is not None else "bias" if bias is not None else "dropout_p"
            raise _capi.invalid(f"{what}: the FP8 forward takes no mask, bias or dropout", "FA_ERR_OPTION")
        o, lse = _fp8.forward(
            q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype,
            backend=backend, scale=scale, softcap=float(softcap or 0.0), causal=bool(causal), align=align,
            window=(wl, wr) if (wl >= 0 or wr >= 0) else None, alibi_slopes=alibi_slopes,
            seqlens_q=_int32(seqlens_q, "seqlens_q", dev, B), seqlens_k=_int32(seqlens_k, "seqlens_k", dev, B),
            cu_seqlens_q=_int32(cu_seqlens_q, "cu_seqlens_q", dev),
            cu_seqlens_k=_int32(cu_seqlens_k, "cu_seqlens_k", dev), q_offset=int(q_offset), k_offset=int(k_offset),
        )  # fmt: skip
        if layout == "bshd":
            o = o.transpose(1, 2)
        return (o, lse) if return_lse else o
    args = (q, k, v, _padded4(mask, "mask"), _padded4(bias, "bias"), alibi_slopes,
            _int32(seqlens_q, "seqlens_q", dev, B), _int32(seqlens_k, "seqlens_k", dev, B),
            _int32(cu_seqlens_q, "cu_seqlens_q", dev), _int32(cu_seqlens_k, "cu_seqlens_k", dev),
            _rng(dropout_p, dropout_seed, dropout_offset), float(scale or 0.0), float(softcap or 0.0), bool(causal),
            align == "bottom_right", wl, wr, float(dropout_p), bool(deterministic), backend, int(q_offset),
            int(k_offset))  # fmt: skip
    o, lse = _call_fwd(args)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o
