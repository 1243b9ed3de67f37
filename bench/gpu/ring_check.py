"""Ring attention on GPUs against one GPU: issue 17's correctness run (the
comparison tests/python/test_ring.py makes on CPU with gloo, here with NCCL,
bf16, long sequences).

Every rank builds the same global q, k, v, dout (one seed), runs
flashattn.torch.ring_attention on its zig-zag shard, forward and backward, and
sends o, dq, dk, dv to rank 0, which puts them back in global order and
compares them with one flashattn attention call on the whole sequence on its
GPU (the same bf16 inputs). Error = max|ring - one| / max(1, max|one|) per
tensor; both sides round o and the gradients to bf16 once, so the bound is a
few bf16 ulps of the largest value (TOL). Exit status 1 if any case is over.

--options alibi,dropout adds those cases: ALiBi slopes, and dropout with a
fixed seed, on global positions (fa_options.q_offset / k_offset), against
one flashattn.torch.attention call with the same slopes / seed.

usage (one host, NVLink multicast off as the GPU machine asks):
  NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node=2 bench/gpu/ring_check.py [--L 16384,262144] [--options plain,alibi,dropout]
with FLASHATTN_LIBRARY (a cuda build of libflashattn.so) and PYTHONPATH=python.
"""

import argparse
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flashattn.torch as ft  # noqa: E402

TOL = 2e-2  # bf16: 8 bits of mantissa, ~4e-3 per rounding; the merge and dK/dV sums round differently


def err(x, ref):
    x, ref = x.double(), ref.double()
    return (x - ref).abs().max().item() / max(1.0, ref.abs().max().item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--L", default="16384,262144", help="total sequence lengths")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--cpu", action="store_true", help="gloo and CPU tensors (float32): a dry run of this script")
    ap.add_argument("--options", default="plain", help="plain, alibi, dropout (a list)")
    args = ap.parse_args()
    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.cpu:
        dev, dtype = torch.device("cpu"), torch.float32
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dev, dtype = torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
    bad = 0
    cases = [
        (L, c, opt) for opt in args.options.split(",") for L in (int(x) for x in args.L.split(",")) for c in (0, 1)
    ]
    for L, causal, opt in cases:
        causal = bool(causal)
        extra = {}  # the option's arguments, the same for the ring and the one-GPU call
        if opt == "alibi":
            extra = dict(alibi_slopes=torch.tensor([2.0 ** (-(h + 1) / 2) for h in range(args.heads)], device=dev))
        elif opt == "dropout":
            extra = dict(dropout_p=0.1, dropout_seed=1234)
        g = torch.Generator(device=dev).manual_seed(L + causal)
        shapes = [(1, L, args.heads, args.D), (1, L, args.kv_heads, args.D), (1, L, args.kv_heads, args.D)]
        q, k, v = (torch.randn(s, device=dev, dtype=dtype, generator=g) for s in shapes)
        dout = torch.randn(shapes[0], device=dev, dtype=dtype, generator=g)
        shard = lambda t: ft.shard_sequence(t, rank, world).contiguous()  # noqa: E731
        ql, kl, vl = (shard(t).requires_grad_() for t in (q, k, v))
        o = ft.ring_attention(ql, kl, vl, causal=causal, **extra)
        o.backward(shard(dout))
        mine = [o.detach(), ql.grad, kl.grad, vl.grad]
        gathered = []
        for t in mine:
            parts = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
            dist.gather(t.contiguous(), parts, dst=0)
            gathered.append(parts)
        if rank == 0:
            ring = [ft.unshard_sequence(parts) for parts in gathered]
            qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
            if opt == "plain":
                one = ft.flash_attn_func(qq, kk, vv, causal=causal)
            else:  # attention() takes the dropout seed (flash_attn_func draws one)
                one = ft.attention(qq, kk, vv, causal=causal, layout="bshd", **extra)
            one.backward(dout)
            errs = {n: err(a, b) for n, a, b in zip(("o", "dq", "dk", "dv"), ring, (one, qq.grad, kk.grad, vv.grad))}
            ok = all(e <= TOL for e in errs.values())
            bad += not ok
            print(
                f"{world} GPUs, L = {L}, Hq/Hkv = {args.heads}/{args.kv_heads}, D = {args.D}, "
                f"{str(dtype)[6:]}, causal={causal}, {opt}: "
                + ", ".join(f"{n} {e:.2e}" for n, e in errs.items())
                + f" (tolerance {TOL}) {'ok' if ok else 'OVER'}",
                flush=True,
            )
            del qq, kk, vv, one, ring
        del q, k, v, dout, ql, kl, vl, o, mine, gathered
        if not args.cpu:
            torch.cuda.empty_cache()
        dist.barrier()
    flag = torch.tensor([bad], device=dev)
    dist.broadcast(flag, 0)
    dist.destroy_process_group()
    sys.exit(1 if flag.item() else 0)


if __name__ == "__main__":
    main()
