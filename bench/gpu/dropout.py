"""Dropout on the cuda backend, forward and backward, in one process with what
a PyTorch user would run instead: TFLOP/s of

  ws      ours, the warp-specialized kernels with dropout's keep bits made
          one Philox call per four elements (src/cuda/dropout_tile.cuh; the
          default for dropout without a bias or mask)
  elem    ours, the per-element kernels (FLASHATTN_CUDA_WS_DROP=0: every
          element's keep bit by its own call, as before the change)
  plain   ours without dropout (what dropout costs)
  flash   PyTorch SDPA with dropout_p, FLASH backend (FlashAttention 2)
  cudnn   PyTorch SDPA with dropout_p, cuDNN backend
  eff     PyTorch SDPA with dropout_p, EFFICIENT backend

and the largest difference of elem's O (and dQ, dK, dV) from ws's, relative
to the largest magnitude: the same keep bits give the same result up to
rounding; the peers draw other random numbers, so their outputs are not
compared. Shapes as bench/gpu/anchors.py: bf16, hidden 2048 (H = 2048 / D),
B * L = 16384, dropout 0.1 (--p), bottom-right causal. Forward and backward
timed apart (CUDA events, median of --reps after 3 warm-ups); FLOPs as
anchors.py counts them (4 B H L^2 D, halved under causal; backward 2.5x).

usage: python3 bench/gpu/dropout.py --lib build-gpu/libflashattn.so
       [--d 64,128,256] [--l 2048,8192] [--causal 0,1] [--p 0.1] [--reps 10]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchors import FlashAttn, problem_tensors, relerr, shapes, tflops, time_ours, time_peer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--l", default="2048,8192")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--p", type=float, default=0.1, help="dropout probability")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()

    ours = FlashAttn(a.lib)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, lib {a.lib}")
    print(f"# bf16, hidden 2048, B * L = 16384, dropout {a.p:g}; TFLOP/s, median of {a.reps} after 3 warm-ups")
    cols = ["ws", "elem", "plain", "flash", "cudnn", "eff"]
    print(
        f"{'D':>4} {'L':>6} {'c':>1} {'pass':>4} | "
        + " ".join(f"{c:>6}" for c in cols)
        + " | ws/elem ws/plain ws/best | max diff of elem from ws"
    )
    for D, H, B, L, causal in shapes(a.d, a.l, a.causal):
        tensors = problem_tensors(B, H, L, D)
        q, k, v, do = tensors[0], tensors[1], tensors[2], tensors[3]
        opt = ours.options(causal)
        opt.align = 1  # bottom-right (Lq = Lk: the same band)
        opt.dropout_p = a.p
        opt.dropout_seed = 1234
        res, diffs = {}, []

        def run_ours(var, options):
            env = {"FLASHATTN_CUDA_WS_DROP": "0"} if var == "elem" else None
            res[(var, "fwd")], res[(var, "bwd")], outs = time_ours(ours, tensors, options, a.reps, env)
            return outs

        ref = run_ours("ws", opt)
        other = run_ours("elem", opt)
        diffs.append("/".join(f"{relerr(x, r):.0e}" for x, r in zip(other, ref)))
        run_ours("plain", ours.options(causal))

        for name, backend in (
            ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("eff", SDPBackend.EFFICIENT_ATTENTION),
        ):

            def sdpa(qq, kk, vv, backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qq, kk, vv, dropout_p=a.p, is_causal=causal)

            try:
                res[(name, "fwd")], res[(name, "bwd")], _, _ = time_peer(sdpa, (q, k, v), do, a.reps)
            except Exception as e:  # a backend that refuses the shape or dropout
                diffs.append(f"{name}: {type(e).__name__}")

        for p in ("fwd", "bwd"):
            tf = {c: tflops(B, H, L, D, causal, res[(c, p)], p == "bwd") for c in cols if (c, p) in res}
            peers = [tf[c] for c in ("flash", "cudnn", "eff") if c in tf]
            line = " ".join(f"{tf[c]:6.1f}" if c in tf else f"{'-':>6}" for c in cols)
            best = f"{tf['ws'] / max(peers):7.2f}" if peers else f"{'-':>7}"
            print(
                f"{D:4d} {L:6d} {int(causal):1d} {p:>4} | {line} | "
                f"{tf['ws'] / tf['elem']:7.2f} {tf['ws'] / tf['plain']:8.2f} {best} | "
                + ("; ".join(diffs) if p == "fwd" else ""),
                flush=True,
            )
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
