"""Packed variable-length sequences (cu_seqlens_q / cu_seqlens_k) on the cuda
backend, bf16, hidden 2048 (32 heads of 64 or 16 of 128), --tokens tokens a
batch, causal and not: our forward and backward, the backward on the
warp-specialized kernel (the default since 2026-12-06 for calls with lengths)
and on the cp.async one it replaces (FLASHATTN_CUDA_WS_BWD=0), next to

  dense  the same tokens as one dense batch [B, H, L, D] (only for a mix of
         equal lengths): what the lengths cost us;
  torch  PyTorch's varlen_attn (torch.nn.attention.varlen, FlashAttention 2)
         where it imports;
  FA4    FlashAttention 4's flash_attn_varlen_func with --fa4 where it imports
         (first calls JIT-compile, untimed).

Mixes: eqL (tokens / L sequences of L) or mixed (lengths drawn from 64 ... 4096
with a fixed seed, the last one trimmed to the total). All sequences are
self-attention (cu_seqlens_q = cu_seqlens_k), stored as [T, H, D] (our view
[1, H, T, D] of the same memory).

Timing: CUDA events around each call after warm-up, the median of --reps; our
calls with the library's device checks on (each call reads the lengths back,
as a default user's does). FLOPs: 4 H D sum(L_i^2) forward (halved when
causal), backward 2.5x. Checks ours (both backward kernels) against torch's
varlen_attn, or FA4's, where one ran. fa-h: our forward with the warp-specialized
forward's work tiles in the order lengths took until 2026-12-07 (heads innermost;
FLASHATTN_CUDA_WS_ORDER=heads), beside today's (fa).

usage: python3 bench/gpu/varlen.py --lib build/libflashattn.so [--d 64,128]
       [--mix eq2048,mixed] [--causal 0,1] [--reps 10] [--fa4]
"""

import argparse
import datetime
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchors import FlashAttn, relerr, time_ours, time_peer  # noqa: E402


def lengths_of(mix, tokens):
    if mix.startswith("eq"):
        L = int(mix[2:])
        return [L] * max(1, tokens // L)
    rng = random.Random(0)
    out, left = [], tokens
    while left > 0:
        n = min(left, rng.randint(64, 4096))
        out.append(n)
        left -= n
    return out


def torch_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception as e:  # older torch
        print(f"# torch varlen_attn unavailable: {e}".splitlines()[0])
        return None

    def call(q, k, v, cu, mx, causal):
        try:
            return varlen_attn(q, k, v, cu, cu, mx, mx, is_causal=causal)
        except TypeError:  # the releases that spell causal as a window
            return varlen_attn(q, k, v, cu, cu, mx, mx, window_size=(-1, 0) if causal else (-1, -1))

    return call


def fa4_varlen():
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception as e:
        print(f"# FA4 unavailable: {e}".splitlines()[0])
        return None

    def call(q, k, v, cu, mx, causal):
        return flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx, causal=causal
        )[0]

    return call


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--mix", default="eq2048,mixed")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--fa4", action="store_true")
    args = ap.parse_args()

    ours = FlashAttn(args.lib)
    peers = {"torch": torch_varlen()}
    if args.fa4:
        peers["FA4"] = fa4_varlen()
    peers = {n: f for n, f in peers.items() if f is not None}
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name()}")
    print(f"# torch {torch.__version__}; TFLOP/s, median of {args.reps}; x = ws-bwd / other")
    cols = (
        ["fa", "fa-h", "fa-cp"]
        + (["dense"] if any(m.startswith("eq") for m in args.mix.split(",")) else [])
        + list(peers)
    )
    print(f"{'D':>4} {'mix':>8} {'seqs':>4} {'causal':>6} {'pass':>4} | " + " ".join(f"{c:>7}" for c in cols) + " | x")
    for D in (int(x) for x in args.d.split(",")):
        H = 2048 // D
        for mix in args.mix.split(","):
            lens = lengths_of(mix, args.tokens)
            T, mx = sum(lens), max(lens)
            cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
            torch.manual_seed(0)
            q, k, v, do = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            o, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
            lse = torch.empty(1, H, T, device="cuda", dtype=torch.float32)
            view = lambda x: x.unsqueeze(0).transpose(1, 2)  # noqa: E731  [1, H, T, D] over [T, H, D]
            tensors = (view(q), view(k), view(v), view(do), view(o), lse, view(dq), view(dk), view(dv))
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                opt = ours.options(causal)
                opt.cu_seqlens_q = opt.cu_seqlens_k = cu.data_ptr()
                opt.num_seqs = len(lens)
                ms, grads = {}, {}
                ms["fa", "fwd"], ms["fa", "bwd"], grads["fa"] = time_ours(ours, tensors, opt, args.reps)
                # the forward with heads innermost (FLASHATTN_CUDA_WS_ORDER=heads), lengths' order until 2026-12-07
                ms["fa-h", "fwd"], _, _ = time_ours(ours, tensors, opt, args.reps, {"FLASHATTN_CUDA_WS_ORDER": "heads"})
                _, ms["fa-cp", "bwd"], grads["fa-cp"] = time_ours(
                    ours, tensors, opt, args.reps, {"FLASHATTN_CUDA_WS_BWD": "0"}
                )
                if mix.startswith("eq"):
                    L = lens[0]
                    # the same memory as [B, H, L, D] views (B = sequences); outputs of their own
                    dense = [x.reshape(len(lens), L, H, D).transpose(1, 2) for x in (q, k, v, do, o)]
                    dense.append(torch.empty(len(lens), H, L, device="cuda", dtype=torch.float32))
                    dense += [torch.empty(len(lens), H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
                    ms["dense", "fwd"], ms["dense", "bwd"], _ = time_ours(
                        ours, tuple(dense), ours.options(causal), args.reps
                    )
                check = []
                for name, fn in peers.items():
                    try:
                        fn(q, k, v, cu, mx, causal)  # (FA4: its first call per shape compiles)
                        peer = lambda qq, kk, vv: fn(qq, kk, vv, cu, mx, causal)  # noqa: E731
                        ms[name, "fwd"], ms[name, "bwd"], po, pg = time_peer(peer, (q, k, v), do, args.reps)
                        for who in ("fa", "fa-cp"):
                            g = grads[who]
                            errs = [relerr(a.squeeze(0).transpose(0, 1), b) for a, b in zip(g[1:], pg)]
                            check.append(f"{who} vs {name}: dQ {errs[0]:.1e} dK {errs[1]:.1e} dV {errs[2]:.1e}")
                        check.append(f"O vs {name} {relerr(grads['fa'][0].squeeze(0).transpose(0, 1), po):.1e}")
                    except Exception as e:  # a peer that does not take this shape
                        print(f"  {name} unavailable: {type(e).__name__}: {e}".splitlines()[0])
                flops = 4.0 * H * D * sum(n * n for n in lens) * (0.5 if causal else 1.0)
                for ps in ("fwd", "bwd"):
                    f = flops * (2.5 if ps == "bwd" else 1.0)
                    tf = {c: f / (ms[c, ps] * 1e-3) / 1e12 for c in cols if (c, ps) in ms}
                    cells = " ".join(f"{tf[c]:7.1f}" if c in tf else f"{'-':>7}" for c in cols)
                    xs = " ".join(f"{c} {tf['fa'] / tf[c]:.2f}" for c in cols[1:] if c in tf)
                    print(f"{D:>4} {mix:>8} {len(lens):>4} {int(causal):>6} {ps:>4} | {cells} | {xs}")
                for line in check:
                    print(f"     check: {line}")


if __name__ == "__main__":
    main()
