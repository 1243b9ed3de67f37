"""An additive bias or a boolean mask on the cuda backend, forward and
backward, in one process with what a PyTorch user would run instead: TFLOP/s
of

  ws      ours, the warp-specialized kernels copying the bias / mask tile by
          tile (src/cuda/score_tile.cuh; the default for these calls; the
          backward's at D = 64 and 128, a bias's at 128); the D = 256
          backward: its wide kernels' arithmetic form reading the tensor
          from global memory (src/cuda/score_global.cuh)
  elem    ours, the per-element kernels (FLASHATTN_CUDA_WS_TILE=0: every
          element's bias or mask read from global memory, as before)
  plain   ours without the bias / mask (what the tensor costs)
  sdpa    PyTorch SDPA with the same tensor as attn_mask (cuDNN backend; the
          memory-efficient one where cuDNN refuses: the "by" column says
          which ran)

and the largest difference of elem's and SDPA's O (and dQ, dK, dV) from
ws's, relative to the largest magnitude. Shapes as bench/gpu/anchors.py: bf16, hidden 2048
(H = 2048 / D), B * L = 16384. The tensors (bf16 bias N(0, 1); a mask keeps
90%):
  bias        [B, H, L, L]   a bias per sequence and head
  bias-heads  [1, H, L, L]   shared by the batch (a relative-position bias)
  bias-keys   [B, 1, 1, L]   one row per sequence (key padding as -inf, 10%)
  mask        [B, H, L, L]
  mask-batch  [1, 1, L, L]   one pattern for every sequence and head
  mask-keys   [B, 1, 1, L]   key padding
Causal calls give ours the band and SDPA the band inside its tensor (-inf
or False above the diagonal, materialized at [B or 1, H or 1, L, L]). FLOPs
as anchors.py counts them (4 B H L^2 D, halved under causal; backward 2.5x).
The bias asks for no gradient (dBias has a bench of its own:
bench/gpu/dbias.py).

With --dropout P every call (ours, plain, SDPA) also drops with probability
P: ours then runs the tiles and the keep bits together (kScoreTileDrop;
elem: the per-element kernels), and SDPA's outputs are not compared (other
random numbers).

usage: python3 bench/gpu/score_tile.py --lib build-gpu/libflashattn.so
       [--d 64,128,256] [--l 2048,8192] [--causal 0,1] [--options bias,mask,...] [--reps 10] [--dropout 0.1]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes as fa  # noqa: E402
from anchors import FlashAttn, median_ms, problem_tensors, relerr, shapes, time_ours, time_peer  # noqa: E402

SHAPES = {  # option: (dims kept of [B, H, L(q), L(k)], is a mask)
    "bias": ((1, 1, 1, 1), False),
    "bias-heads": ((0, 1, 1, 1), False),
    "bias-keys": ((1, 0, 0, 1), False),
    "mask": ((1, 1, 1, 1), True),
    "mask-batch": ((0, 0, 1, 1), True),
    "mask-keys": ((1, 0, 0, 1), True),
}


def make_tensor(opt, B, H, L, gen):
    keep, is_mask = SHAPES[opt]
    shape = [n if k else 1 for n, k in zip((B, H, L, L), keep)]
    if is_mask:
        return torch.rand(*shape, device="cuda", generator=gen) < 0.9
    t = torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32)
    if opt == "bias-keys":  # key padding as an additive bias
        t = t.masked_fill(torch.rand(*shape, device="cuda", generator=gen) >= 0.9, float("-inf"))
    return t.to(torch.bfloat16)


def sdpa_mask(t, L, causal):
    """The tensor SDPA gets: ours with the causal band folded in."""
    if not causal:
        return t
    i = torch.arange(L, device="cuda")
    above = i[None, :] > i[:, None]
    if t.dtype == torch.bool:
        return t & ~above
    return t.masked_fill(above, float("-inf"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--l", default="2048,8192")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--options", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="every call with this dropout too (ours: the tiles and the keep bits together, src/cuda/"
        "dropout_tile.cuh; plain: dropout without the tensor; SDPA: dropout_p; peers' outputs not compared: other "
        "random numbers)",
    )
    a = ap.parse_args()

    ours = FlashAttn(a.lib)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, lib {a.lib}")
    print(f"# bf16, hidden 2048, B * L = 16384, dropout {a.dropout:g}, TFLOP/s, median of {a.reps} after 3 warm-ups")
    cols = ["ws", "elem", "plain", "sdpa"]
    print(
        f"{'option':>10} {'D':>4} {'L':>6} {'c':>1} {'pass'} | "
        + " ".join(f"{c:>6}" for c in cols)
        + " | ws/elem ws/plain ws/sdpa | by    | max diff from ws"
    )
    for D, H, B, L, causal in shapes(a.d, a.l, a.causal):
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        gen = torch.Generator(device="cuda").manual_seed(L * 1000 + D)
        flops = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
        plain = ours.options(causal)
        plain.dropout_p, plain.dropout_seed = a.dropout, 1234
        fwd = ours.forward(q, k, v, o, lse, plain)
        fwd()
        plain_ms = {
            "fwd": median_ms(fwd, a.reps),
            "bwd": median_ms(ours.backward(q, k, v, o, do, lse, dq, dk, dv, plain), a.reps),
        }
        for opt_name in a.options.split(","):
            if opt_name not in SHAPES:
                sys.exit(f"unknown option {opt_name}; known: {','.join(SHAPES)}")
            t = make_tensor(opt_name, B, H, L, gen)
            opt = ours.options(causal)
            opt.dropout_p, opt.dropout_seed = a.dropout, 1234
            is_mask = t.dtype == torch.bool
            if is_mask:
                opt.mask = fa.tensor_of(t.view(torch.uint8), fa.FA_BOOL)
            else:
                opt.bias = fa.tensor_of(t, fa.FA_BF16)
            res = {("plain", p): plain_ms[p] for p in ("fwd", "bwd")}
            outs, diffs = {}, []
            for var in ("ws", "elem"):
                env = {"FLASHATTN_CUDA_WS_TILE": "1" if var == "ws" else "0"}
                res[(var, "fwd")], res[(var, "bwd")], outs[var] = time_ours(
                    ours, (q, k, v, do, o, lse, dq, dk, dv), opt, a.reps, env
                )
            ref = outs["ws"]
            diffs.append("elem " + "/".join(f"{relerr(x, r):.0e}" for x, r in zip(outs["elem"], ref)))
            m = sdpa_mask(t, L, causal)
            by = "-"
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("eff", SDPBackend.EFFICIENT_ATTENTION)):
                try:
                    with sdpa_kernel([backend]):
                        sdpa = lambda qq, kk, vv: F.scaled_dot_product_attention(  # noqa: E731
                            qq, kk, vv, attn_mask=m, dropout_p=a.dropout
                        )
                        res[("sdpa", "fwd")], res[("sdpa", "bwd")], out, grads = time_peer(sdpa, (q, k, v), do, a.reps)
                    if not a.dropout:
                        diffs.append("sdpa " + "/".join(f"{relerr(x, r):.0e}" for x, r in zip((out, *grads), ref)))
                    by = name
                    del out, grads
                    break
                except RuntimeError as e:  # this backend refuses the mask
                    diffs.append(f"{name}: {str(e).splitlines()[0][:60]}")
            for p in ("fwd", "bwd"):
                f = flops * (2.5 if p == "bwd" else 1.0)
                tf = {c: f / (res[(c, p)] * 1e-3) / 1e12 for c in cols if (c, p) in res}
                line = " ".join(f"{tf[c]:6.1f}" if c in tf else f"{'-':>6}" for c in cols)
                vs = f"{tf['ws'] / tf['sdpa']:7.2f}" if "sdpa" in tf else f"{'-':>7}"
                print(
                    f"{opt_name:>10} {D:4d} {L:6d} {int(causal):1d} {p} | {line} | {tf['ws'] / tf['elem']:7.2f} "
                    f"{tf['ws'] / tf['plain']:8.2f} {vs} | {by:5s} | " + ("; ".join(diffs) if p == "fwd" else ""),
                    flush=True,
                )
            del t, m
        del q, k, v, do, o, lse, dq, dk, dv
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
