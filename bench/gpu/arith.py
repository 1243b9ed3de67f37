"""Softcap and ALiBi on the cuda backend, forward and backward, in one process
with what a PyTorch user would run instead: TFLOP/s of

  ws      ours, the warp-specialized kernels with the arithmetic options
          (src/cuda/score_arith.cuh; the default for these calls)
  elem    ours, the per-element kernels (FLASHATTN_CUDA_WS_ARITH=0: every
          option element by element, as before the change)
  plain   ours without the option (the band-only call: what the option costs)
  bias    PyTorch SDPA with ALiBi as an additive bf16 bias [1, H, L, L] (the
          causal band as -inf in it), cuDNN backend (EFFICIENT where cuDNN
          refuses); ALiBi only: SDPA has no softcap
  flex    torch.nn.attention.flex_attention with the option as a score_mod
          (compiled; --flex)
  FA4     FlashAttention 4 (flash_attn.cute.flash_attn_func, softcap=...);
          softcap only: it takes no ALiBi slopes (--fa4)

and the largest difference of each peer's O (and dQ, dK, dV) from ws's,
relative to the largest magnitude. Shapes as bench/gpu/anchors.py: bf16,
hidden 2048 (H = 2048 / D), B * L = 16384; softcap 50 (Gemma 2's), ALiBi
slopes 2^(-8 (h + 1) / H) (the ALiBi paper's), bottom-right causal.
Forward and backward timed apart (CUDA events, median of --reps after 3
warm-ups); FLOPs as anchors.py counts them (4 B H L^2 D, halved under causal;
backward 2.5x).

usage: python3 bench/gpu/arith.py --lib build-gpu/libflashattn.so
       [--d 64,128] [--l 2048,8192] [--causal 0,1] [--options softcap,alibi,softcap-alibi]
       [--reps 10] [--flex] [--fa4]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchors import FlashAttn, problem_tensors, relerr, shapes, tflops, time_ours, time_peer  # noqa: E402

CAP = 50.0


def alibi_slopes(H):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda", dtype=torch.float32)


def alibi_bias(slopes, L, causal):
    """-slope |i - j| as a [1, H, L, L] bf16 tensor, -inf above the diagonal when causal (Lq = Lk)."""
    i = torch.arange(L, device="cuda")
    dist = (i[:, None] - i[None, :]).abs().float()
    bias = -slopes[:, None, None] * dist[None]
    if causal:
        bias = bias.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return bias[None].to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--l", default="2048,8192")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--options", default="softcap,alibi,softcap-alibi")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--flex", action="store_true", help="also time flex_attention with a score_mod")
    ap.add_argument("--fa4", action="store_true", help="also time FlashAttention 4 with softcap")
    a = ap.parse_args()

    ours = FlashAttn(a.lib)
    flex = fa4 = None
    if a.flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex = torch.compile(flex_attention)
    if a.fa4:
        try:
            from flash_attn.cute import flash_attn_func as fa4
        except Exception as e:  # not installed here
            print(f"FA4 unavailable: {type(e).__name__}: {e}".splitlines()[0])

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, lib {a.lib}")
    print(f"# bf16, hidden 2048, B * L = 16384, softcap {CAP:g}; TFLOP/s, median of {a.reps} after 3 warm-ups")
    cols = ["ws", "elem", "plain", "bias", "flex", "FA4"]
    print(
        f"{'option':>13} {'D':>4} {'L':>6} {'c':>1} {'pass':>4} | "
        + " ".join(f"{c:>6}" for c in cols)
        + " | ws/elem ws/plain ws/best | max diff from ws"
    )
    for D, H, B, L, causal in shapes(a.d, a.l, a.causal):
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        slopes = alibi_slopes(H)
        for opt_name in a.options.split(","):
            cap = CAP if "softcap" in opt_name else 0.0
            use_alibi = "alibi" in opt_name
            opt = ours.options(causal)
            opt.align = 1  # bottom-right (Lq = Lk: the same band)
            opt.softcap = cap
            opt.alibi_slopes = slopes.data_ptr() if use_alibi else None
            res, diffs = {}, []

            def run_ours(var, options):
                env = {"FLASHATTN_CUDA_WS_ARITH": "0"} if var == "elem" else None
                res[(var, "fwd")], res[(var, "bwd")], outs = time_ours(
                    ours, (q, k, v, do, o, lse, dq, dk, dv), options, a.reps, env
                )
                return outs

            ref = run_ours("ws", opt)
            other = run_ours("elem", opt)
            diffs.append("elem " + "/".join(f"{relerr(x, r):.0e}" for x, r in zip(other, ref)))
            run_ours("plain", ours.options(causal))

            def peer(name, f):
                """Times f (returns o) forward and forward + backward, diffs against ws."""
                try:
                    res[(name, "fwd")], res[(name, "bwd")], out, grads = time_peer(f, (q, k, v), do, a.reps)
                    diffs.append(name + " " + "/".join(f"{relerr(x, r):.0e}" for x, r in zip((out, *grads), ref)))
                except Exception as e:  # a backend that refuses the shape
                    diffs.append(f"{name}: {type(e).__name__}")

            if use_alibi and not cap:
                bias = alibi_bias(slopes, L, causal)

                def sdpa_bias(qq, kk, vv):
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
                        return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=bias)

                peer("bias", sdpa_bias)
                del bias
            if flex is not None:
                sl = slopes

                def score_mod(score, b, h, qi, kv):
                    if cap:
                        score = CAP * torch.tanh(score / CAP)
                    if use_alibi:
                        score = score - sl[h] * (qi - kv).abs()
                    return score

                bm = None
                if causal:
                    bm = create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, L, L, device="cuda")
                peer("flex", lambda qq, kk, vv: flex(qq, kk, vv, score_mod=score_mod, block_mask=bm))
            if fa4 is not None and cap and not use_alibi:

                def fa4_call(qq, kk, vv):
                    return fa4(qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), causal=causal, softcap=CAP)[
                        0
                    ].transpose(1, 2)

                peer("FA4", fa4_call)

            for p in ("fwd", "bwd"):
                tf = {c: tflops(B, H, L, D, causal, res[(c, p)], p == "bwd") for c in cols if (c, p) in res}
                peers = [tf[c] for c in ("bias", "flex", "FA4") if c in tf]
                line = " ".join(f"{tf[c]:6.1f}" if c in tf else f"{'-':>6}" for c in cols)
                best = f"{tf['ws'] / max(peers):7.2f}" if peers else f"{'-':>7}"
                print(
                    f"{opt_name:>13} {D:4d} {L:6d} {int(causal):1d} {p:>4} | {line} | "
                    f"{tf['ws'] / tf['elem']:7.2f} {tf['ws'] / tf['plain']:8.2f} {best} | "
                    + ("; ".join(diffs) if p == "fwd" else ""),
                    flush=True,
                )
        del q, k, v, do, o, lse, dq, dk, dv
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
