"""Where the host time of one flashattn.torch call goes: each piece of
flashattn::fwd's kernel timed alone (µs per call, best of 5 loops), next to
a bare ctypes call and a torch.empty, on the tensors of a small problem.

    PYTHONPATH=python python3 bench/python_call_parts.py [--device cuda|cpu]
"""

import argparse
import timeit

import torch

import flashattn.torch as ft
from flashattn import _capi
from flashattn.torch import _attention, _fast, _ops


class _Trivial(torch.autograd.Function):
    """An autograd.Function whose forward returns a ready tensor: apply's own cost."""

    @staticmethod
    def forward(ctx, x, out, plan):
        return out

    @staticmethod
    def backward(ctx, g):
        return g, None, None


def per_call(fn, n=5000):
    fn()
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dt = torch.bfloat16 if a.device == "cuda" else torch.float32
    q = torch.randn(1, 16, 1, 64, device=a.device, dtype=dt)
    qt = q.transpose(1, 2)
    qg = q.detach().clone().requires_grad_()
    qgt = qg.transpose(1, 2)
    nones = (None,) * 8  # mask, bias, alibi_slopes, seqlens_q/k, cu_seqlens_q/k, rng
    args = (qt, qt, qt, *nones, 0.0, 0.0, False, False, -1, -1, 0.0, False, "auto", 0, 0)  # .., q_offset, k_offset
    ctx = _ops._context(qt)
    opt = _ops._options(ctx, *args[3:11], *args[11:19], *args[20:22])
    o, lse = _ops.fwd_impl(*args)
    ts = [_ops._tensor(ctx, i, x, "x") for i, x in enumerate((qt, qt, qt, o, lse))]
    ft.flash_attn_func(q, q, q)  # the hot path's plan for these tensors
    plans = _capi.context().fast_plans

    def key():  # what the hot path reads off q, k, v for its plan key (_fast.attention)
        return (q.shape, q.stride(), q.shape, q.stride(), q.shape, q.stride(), q.dtype, q.dtype, q.dtype, q.device,
                q.device, q.device, True, None, 0.0, False, True, (-1, -1), False, "auto", True)  # fmt: skip

    assert key() in plans

    def key_ints():  # the same key with get_device() ints in place of torch.device objects
        return (q.shape, q.stride(), q.shape, q.stride(), q.shape, q.stride(), q.dtype, q.dtype, q.dtype, q.get_device(),
                q.get_device(), q.get_device(), True, None, 0.0, False, True, (-1, -1), False, "auto", True)  # fmt: skip

    ints = {key_ints(): 1}
    plan_arg = (0,) * 9 + ((0,) * 10,) * 3 + (0,) * 6  # an argument tuple as big as the old hot path's
    out = o.detach()
    c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _Trivial)
    rows = [
        ("empty Python call", lambda: None),
        ("ctypes: fa_context_last_backend(ctx)", lambda: _capi.lib.fa_context_last_backend(ctx.ptr)),
        ("C fa_forward, structs packed already", lambda: _capi.forward(ctx, 0, *ts[:3], opt, *ts[3:])),
        ("t.data_ptr()", lambda: qt.data_ptr()),
        ("t.stride()", lambda: qt.stride()),
        ("t.shape", lambda: qt.shape),
        ("t.is_cuda", lambda: qt.is_cuda),
        ("torch.empty(1, 1, 16)", lambda: torch.empty((1, 1, 16), dtype=torch.float32, device=q.device)),
        ("alloc_like (empty_strided)", lambda: _ops.alloc_like(qt, 64)),
        ("pack one fa_tensor (_ops._tensor)", lambda: _ops._tensor(ctx, 0, qt, "q")),
        ("context + stream (_ops._context)", lambda: _ops._context(qt)),
        ("options, cached (_ops._options)", lambda: _ops._options(ctx, *args[3:11], *args[11:19], *args[20:22])),
        ("_plain_eager check", lambda: _attention._plain_eager((qt, qt, qt, None, None))),
        ("hot path: plan key (q, k, v shapes, strides, dtypes, devices, options)", key),
        ("hot path: plan key + lookup", lambda: plans[key()]),
        ("plan key with get_device() ints", key_ints),
        ("plan key with get_device() ints + lookup", lambda: ints[key_ints()]),
        ("q.device", lambda: q.device),
        ("q.get_device()", lambda: q.get_device()),
        ("torch.empty_like(q)", lambda: torch.empty_like(q)),
        ("q.new_empty(q.shape)", lambda: q.new_empty((1, 16, 1, 64))),
        ("torch.empty_strided (o)", lambda: torch.empty_strided((1, 16, 1, 64), (1024, 64, 1024, 1), dtype=dt,
                                                               device=q.device)),  # fmt: skip
        (
            "autograd.Function.apply, trivial forward, a nested tuple argument",
            lambda: _Trivial.apply(qg, out, plan_arg),
        ),
        ("autograd.Function's C apply (the hot path's), the same", lambda: c_apply(qg, out, plan_arg)),
        ("fwd_impl (the whole kernel body)", lambda: _ops.fwd_impl(*args)),
        ("torch.ops.flashattn.fwd", lambda: torch.ops.flashattn.fwd(*args)),
        ("flash_attn_func (the hot path, _fast.py)", lambda: ft.flash_attn_func(q, q, q)),
        ("flashattn.torch.scaled_dot_product_attention", lambda: ft.scaled_dot_product_attention(qt, qt, qt)),
        ("flash_attn_func, inputs require grad", lambda: ft.flash_attn_func(qg, qg, qg)),
        ("F.scaled_dot_product_attention", lambda: torch.nn.functional.scaled_dot_product_attention(qt, qt, qt)),
        (
            "F.scaled_dot_product_attention, inputs require grad",
            lambda: torch.nn.functional.scaled_dot_product_attention(qgt, qgt, qgt),
        ),
    ]
    print(f"# host time per call, µs (best of 5 loops), {a.device}, torch {torch.__version__}")
    for name, fn in rows:
        us = per_call(fn)
        if a.device == "cuda":
            torch.cuda.synchronize()
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
