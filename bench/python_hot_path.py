"""What flashattn.torch's hot path (_fast.py) adds over the bare C call, in
interleaved rounds: robust to a shared, noisy host (each round times every
path once, in turn, so a burst of other load hits all paths alike; the
median over rounds is reported).

Paths, on the same tensors (q, k, v [B, L, H, D]; SDPA gets their
[B, H, L, D] transposed views, as bench/python_overhead.py does):

  C fwd            fa_forward through ctypes, every struct packed once before
                   the loop (addresses passed as ints): the floor
  C fwd+bwd        fa_forward then fa_backward, prebuilt: the floor of (e2)
  (b) flash_attn_func
  (c) scaled_dot_product_attention
  (d) flashattn.torch.attention(layout="bshd", align="bottom_right")
  (e1) flash_attn_func / SDPA on inputs that require grad, forward only
  (e2) the same, forward + torch.autograd.grad (against C fwd+bwd)
  (f) torch's own F.scaled_dot_product_attention (reference; with grad too)

"added" = a path's median minus its C floor's median. The shape is tiny
(default B = H = 1, L = 16, D = 64) so the C call is a few microseconds.

    FLASHATTN_LIBRARY=build/x/libflashattn.so PYTHONPATH=python \\
        python bench/python_hot_path.py [--device cpu|cuda] [--rounds 20] [--iters 2000] [--threads 1]
"""

import argparse
import ctypes as C
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import flashattn
import flashattn.torch as fat
from flashattn import _capi


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=1)
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--dtype", default=None, help="default float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--iters", type=int, default=0, help="calls per path per round (default 2000 cpu, 200 cuda)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (the cpu backend follows it)")
    ap.add_argument("--only", default="", help="comma-separated substrings: time only the paths that match")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    a.iters = a.iters or (200 if cuda else 2000)  # cuda: within the launch queue, so the host never waits on the GPU
    dtype = getattr(torch, a.dtype) if a.dtype else (torch.bfloat16 if cuda else torch.float32)
    code = {torch.float32: _capi.F32, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}[dtype]
    mem = _capi.MEMORY_CUDA if cuda else _capi.MEMORY_HOST
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    B, H, L, D = a.B, a.H, a.L, a.D
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(B, L, H, D, generator=g).to(a.device, dtype) for _ in range(4))
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
    qgt, kgt, vgt = (x.transpose(1, 2) for x in (qg, kg, vg))
    dot = do.transpose(1, 2)

    # the C floor: every struct packed once, addresses as ints
    o, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
    lse = torch.empty(B, H, L, device=a.device, dtype=torch.float32)
    ctx = _capi.context()
    ctx.configure(0, 0, torch.cuda.current_stream().cuda_stream) if cuda else ctx.configure(a.threads, 0, None)
    ts = []
    for x in (q, k, v, o, do, lse, dq, dk, dv):
        x = x.transpose(1, 2) if x.dim() == 4 else x
        c = code if x.dtype == dtype else _capi.F32
        ts.append(_capi.tensor(x.data_ptr(), c, x.shape, x.stride(), mem))
    opt = _capi.options(align="bottom_right")
    aq, ak, av, ao, ado, alse, adq, adk, adv = (C.addressof(t) for t in ts)
    aopt, p = C.addressof(opt), ctx.ptr
    fwd, bwd = _capi.lib.fa_forward, _capi.lib.fa_backward

    def c_fwd():
        fwd(p, 0, aq, ak, av, aopt, ao, alse)

    def c_fwd_bwd():
        fwd(p, 0, aq, ak, av, aopt, ao, alse)
        bwd(p, 0, aq, ak, av, ao, ado, alse, aopt, adq, adk, adv, None)

    assert fwd(p, 0, aq, ak, av, aopt, ao, alse) == 0, ctx.last_error()
    assert bwd(p, 0, aq, ak, av, ao, ado, alse, aopt, adq, adk, adv, None) == 0, ctx.last_error()
    sync()
    ref = fat.flash_attn_func(q, k, v)
    assert torch.equal(ref, o), "the C floor and flash_attn_func disagree"
    grad = torch.autograd.grad

    paths = [
        ("C fwd (floor)", c_fwd, None),
        ("(b) flash_attn_func", lambda: fat.flash_attn_func(q, k, v), "C fwd (floor)"),
        ("(c) flashattn SDPA", lambda: fat.scaled_dot_product_attention(qt, kt, vt), "C fwd (floor)"),
        (
            "(d) flashattn.torch.attention(bshd)",
            lambda: fat.attention(q, k, v, layout="bshd", align="bottom_right"),
            "C fwd (floor)",
        ),
        ("(e1) flash_attn_func, requires_grad, fwd", lambda: fat.flash_attn_func(qg, kg, vg), "C fwd (floor)"),
        ("(e1) flashattn SDPA, requires_grad, fwd", lambda: fat.scaled_dot_product_attention(qgt, kgt, vgt),
         "C fwd (floor)"),  # fmt: skip
        ("(f) torch F.sdpa", lambda: F.scaled_dot_product_attention(qt, kt, vt), None),
        ("(f) torch F.sdpa, requires_grad, fwd", lambda: F.scaled_dot_product_attention(qgt, kgt, vgt), None),
        ("C fwd+bwd (floor)", c_fwd_bwd, None),
        ("(e2) flash_attn_func, fwd+bwd", lambda: grad(fat.flash_attn_func(qg, kg, vg), (qg, kg, vg), do),
         "C fwd+bwd (floor)"),  # fmt: skip
        ("(e2) flashattn SDPA, fwd+bwd",
         lambda: grad(fat.scaled_dot_product_attention(qgt, kgt, vgt), (qgt, kgt, vgt), dot),
         "C fwd+bwd (floor)"),  # fmt: skip
        ("(f) torch F.sdpa, fwd+bwd",
         lambda: grad(F.scaled_dot_product_attention(qgt, kgt, vgt), (qgt, kgt, vgt), dot), None),  # fmt: skip
    ]
    if a.only:
        keep = [s for s in a.only.split(",") if s]
        paths = [x for x in paths if "floor" in x[0] or any(s in x[0] for s in keep)]
    times = {name: [] for name, _, _ in paths}
    host = {name: [] for name, _, _ in paths}  # cuda: the clock read before the final synchronize
    clock = time.perf_counter_ns
    for name, fn, _ in paths:  # warm up
        for _ in range(200):
            fn()
    sync()
    for _ in range(a.rounds):
        for name, fn, _ in paths:
            n = a.iters // 2 if "bwd" in name else a.iters
            sync()
            t0 = clock()
            for _ in range(n):
                fn()
            t1 = clock()
            sync()
            times[name].append((clock() - t0) / n / 1e3)
            host[name].append((t1 - t0) / n / 1e3)
    if cuda:  # the host's own time per call (the GPU's time hides it in the synchronized loop)
        times = host
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"# bench/python_hot_path.py {' '.join(sys.argv[1:])}")
    print(
        f"# Python {platform.python_version()}, torch {torch.__version__}, {platform.machine()} "
        f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; flashattn from {flashattn.library_path()}"
    )
    print(f"# {a.device} B={B} H={H} L={L} D={D} {str(dtype)[6:]}; {a.rounds} rounds x {a.iters} calls (fwd+bwd: half)"
          + ("; host time per call (clock read before the synchronize)" if cuda else ""))  # fmt: skip
    print("| path | median µs/call | min | max | added over C |")
    print("|---|---:|---:|---:|---:|")
    for name, _, floor in paths:
        added = f"{med[name] - med[floor]:+.2f}" if floor in med else ""
        print(f"| {name} | {med[name]:.2f} | {min(times[name]):.2f} | {max(times[name]):.2f} | {added} |")


if __name__ == "__main__":
    main()
