"""Where a backward call's GPU time goes, kernel by kernel: flashattn's
backward next to PyTorch SDPA's cuDNN (and FLASH) backward, same shapes as
bench/gpu/anchors.py (bf16, B * L = 16384, hidden 2048), in one process.

torch.profiler records every kernel of `--reps` calls after warm-up; each
kernel's device time is printed per call (microseconds) with its share of the
call's kernel time, so the helper kernels around the main one (row sums, the
dQ accumulator's zeroing and conversion) show what they cost.

usage: python3 bench/gpu/bwd_profile.py --lib build-gpu/libflashattn.so
       [--d 128,64] [--l 2048,16384] [--causal 0,1] [--reps 20]
"""

import argparse
import collections
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchors import FlashAttn, problem_tensors, shapes  # noqa: E402


def kernel_times(fn, reps):
    """{kernel name: device microseconds per call} over reps calls of fn, and the
    span from the first kernel's start to the last one's end per call (the
    calls queue back to back, so span - sum is the device's idle time between
    kernels: launches, allocations, synchronization)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.OrderedDict()
    t0, t1 = None, None
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            acc[ev.name] = acc.get(ev.name, 0.0) + ev.device_time / reps
            start, end = ev.time_range.start, ev.time_range.end
            t0 = start if t0 is None else min(t0, start)
            t1 = end if t1 is None else max(t1, end)
    return acc, (t1 - t0) / reps if t0 is not None else 0.0


def report(title, measured):
    times, span = measured
    total = sum(times.values())
    print(f"  {title}: {total:9.1f} us of kernels a call, {span:9.1f} us from first start to last end")
    for name, us in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"    {us:9.1f} us {100.0 * us / total:5.1f}%  {name[:110]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--d", default="128,64")
    ap.add_argument("--l", default="2048,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    fl = FlashAttn(args.lib)
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; kernels of one backward call, mean of {args.reps}"
    )
    for D, H, B, L, causal in shapes(args.d, args.l, args.causal):
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        fl.forward(q, k, v, o, lse, fl.options(causal))()
        print(f"D={D} H={H} B={B} L={L} causal={int(causal)}")
        report(
            "flashattn",
            kernel_times(fl.backward(q, k, v, o, do, lse, dq, dk, dv, fl.options(causal)), args.reps),
        )
        for name, be in (
            ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION),
            ("SDPA FLASH", SDPBackend.FLASH_ATTENTION),
        ):
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            with sdpa_kernel([be]):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

            def bwd(out=out, qg=qg, kg=kg, vg=vg):
                torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

            report(name, kernel_times(bwd, args.reps))


if __name__ == "__main__":
    main()
