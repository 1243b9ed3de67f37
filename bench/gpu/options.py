"""The cuda backend's calls with per-element options (bias, mask, ALiBi,
softcap, dropout: the kernels' "full" path), forward and backward, timed
with CUDA events: the anchors (bench/gpu/anchors.py) time the band-only
path, which these calls never take. For A/B runs of a change to that path,
one library per process (--lib), the same shapes and inputs every run.

usage: PYTHONPATH=python python3 bench/gpu/options.py --lib build-gpu/libflashattn.so \\
       [--d 64,128] [--l 2048,4096] [--options bias,bias-bf16,mask,dropout,alibi-softcap] [--reps 10]

Prints one line per (option, D, L): forward ms and backward ms (the
forward + backward call minus the forward), medians of --reps after 3
warm-ups, B * H = 16k tokens x 16 heads / L, bf16, not causal; the bias
is a full [B, H, L, L] tensor (f32, or bf16 for bias-bf16) that asks for
no gradient, so the backward reads it and writes no dBias.
"""

import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libflashattn.so to load (FLASHATTN_LIBRARY)")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--l", default="2048,4096")
    ap.add_argument("--options", default="bias,bias-bf16,mask,dropout,alibi-softcap")
    ap.add_argument("--tokens", type=int, default=8192, help="B * L")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    os.environ["FLASHATTN_LIBRARY"] = os.path.abspath(a.lib)
    import torch
    from anchors import median_ms  # CUDA events, the median after 3 warm-ups

    import flashattn.torch as ft

    dev = torch.device("cuda")

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, lib {a.lib}")
    print(f"# median of {a.reps} after 3 warm-ups; bf16, not causal, {a.heads} heads, B = {a.tokens} / L")
    print(f"{'option':>14s} {'D':>4s} {'L':>6s} | {'fwd ms':>8s} {'bwd ms':>8s}")
    for opt in a.options.split(","):
        for d in (int(x) for x in a.d.split(",")):
            for seq in (int(x) for x in a.l.split(",")):
                b, h = max(1, a.tokens // seq), a.heads
                g = torch.Generator(device=dev).manual_seed(seq * 1000 + d)
                q, k, v = (
                    torch.randn(b, h, seq, d, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
                    for _ in range(3)
                )
                do = torch.randn(b, h, seq, d, device=dev, dtype=torch.bfloat16, generator=g)
                kw = {"backend": "cuda"}
                if opt.startswith("bias"):
                    bdt = torch.bfloat16 if opt == "bias-bf16" else torch.float32
                    kw["bias"] = torch.randn(b, h, seq, seq, device=dev, dtype=bdt, generator=g)
                elif opt == "mask":
                    kw["mask"] = torch.rand(b, h, seq, seq, device=dev, generator=g) < 0.8
                elif opt == "dropout":
                    kw.update(dropout_p=0.1, dropout_seed=1234)
                elif opt == "alibi-softcap":
                    kw.update(alibi_slopes=torch.rand(h, device=dev, generator=g), softcap=30.0)
                else:
                    sys.exit(f"unknown option {opt}")

                def fwd():
                    with torch.no_grad():
                        ft.attention(q, k, v, **kw)

                def fwdbwd():
                    o = ft.attention(q, k, v, **kw)
                    torch.autograd.grad(o, (q, k, v), do)

                tf, tfb = median_ms(fwd, a.reps), median_ms(fwdbwd, a.reps)
                print(f"{opt:>14s} {d:4d} {seq:6d} | {tf:8.3f} {tfb - tf:8.3f}", flush=True)
                del q, k, v, do, kw
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
