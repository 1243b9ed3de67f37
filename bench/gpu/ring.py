"""Context parallel (ring) attention on GPUs: flashattn.torch.ring_attention over
NCCL, one process per GPU, against one GPU (the same call in a ring of one rank,
which is one plain attention call). Issue 17's targets: L = 128k total, D = 128,
bf16, causal (zig-zag layout) and not, forward and forward+backward; tokens/s
(global tokens over the slowest rank's median time) and max memory per GPU.

Run on 2 H200s on 2026-11-30 (bench/results/2026-11-30-h200x2-ring.md); --plain
also times plain flash_attn_func on one GPU, the baseline without the ring.

usage (one host):
  torchrun --nproc_per_node=1 bench/gpu/ring.py [--out DIR]   # the 1-GPU baseline
  torchrun --nproc_per_node=2 bench/gpu/ring.py [--out DIR]   # then 4, 8 if lent
  options: --L 131072 --heads 16 --kv-heads 16 --D 128 --batch 1 --reps 10 --warmup 3
           --modes fwd,fwdbwd --causal 0,1 --seqs 0
  --seqs K > 0 adds rows for ring_flash_attn_varlen_func: the L tokens packed as
  K sequences of lengths in proportion 1 : 2 : ... : K (multiples of 2W), batch 1;
  FLOPs counted per sequence (sum of N_s^2).
with FLASHATTN_LIBRARY pointing at a libflashattn.so built with FA_WITH_CUDA=ON
and PYTHONPATH=python. NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set
when the environment does not set it (leave the machine's other NCCL switches
as they are). Target: 2 GPUs >= 1.8x one GPU's tokens/s, memory per GPU about
half; compare with torch.distributed.tensor.experimental.context_parallel in the
same run where it runs (not scripted here).
"""

import argparse
import datetime
import json
import os
import statistics

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flashattn.torch as ft  # noqa: E402


def timed(fn, reps, warmup):
    """Median milliseconds of fn() over reps, CUDA events, after warm-up; every
    rank in step (a barrier before each repetition)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def packed_lengths(L, K, multiple):
    """cu_seqlens (a list) of L tokens as K sequences of lengths in proportion
    1 : 2 : ... : K, each a multiple of `multiple` (the last takes the rest)."""
    units, total = L // multiple, K * (K + 1) // 2
    lens = [max(1, units * (i + 1) // total) for i in range(K - 1)]
    lens.append(units - sum(lens))
    assert lens[-1] > 0, "L too short for that many sequences"
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n * multiple)
    return cu


def torch_cp_rows(args, rank, world, dev):
    """PyTorch's own context parallel on the same problem: SDPA (its default
    backend choice: cuDNN / flash on the H200) inside
    torch.distributed.tensor.experimental.context_parallel, which shards the
    global [B, H, L, D] buffers along L (its load-balanced layout for causal)
    and runs ring attention. Rows as main()'s, call = "torch context_parallel";
    one line saying why if it does not run here."""
    try:
        import torch.nn.functional as F
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
    except ImportError as exc:
        if rank == 0:
            print(json.dumps({"call": "torch context_parallel", "skipped": str(exc)}), flush=True)
        return []
    mesh = init_device_mesh("cuda", (world,))
    g = torch.Generator(device=dev).manual_seed(99)
    shape_q = (args.batch, args.heads, args.L, args.D)
    shape_kv = (args.batch, args.kv_heads, args.L, args.D)
    rows = []
    for causal in [bool(int(c)) for c in args.causal.split(",")]:
        for mode in args.modes.split(","):
            bufs = [
                torch.randn(s, device=dev, dtype=torch.bfloat16, generator=g)
                for s in (shape_q, shape_kv, shape_kv, shape_q)
            ]
            try:
                # PyTorch balances the load (its own zig-zag) only for causal; off for the rest
                from torch.distributed.tensor.experimental._attention import _cp_options

                _cp_options.enable_load_balance = causal
                with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers=set(bufs)):
                    q, k, v, dout = bufs
                    qq, kk, vv = (t.detach().requires_grad_(mode == "fwdbwd") for t in (q, k, v))

                    def step():
                        o = F.scaled_dot_product_attention(
                            qq, kk, vv, is_causal=causal, enable_gqa=args.heads != args.kv_heads
                        )
                        if mode == "fwdbwd":
                            o.backward(dout)

                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(dev)
                    ms = timed(step, args.reps, args.warmup)
                    peak = torch.cuda.max_memory_allocated(dev)
            except Exception as exc:  # noqa: BLE001 - report and go on: the comparison is optional
                if rank == 0:
                    print(
                        json.dumps(
                            {
                                "call": "torch context_parallel",
                                "causal": causal,
                                "mode": mode,
                                "failed": f"{type(exc).__name__}: {exc}"[:400],
                            }
                        ),
                        flush=True,
                    )
                continue
            t = torch.tensor([ms, peak], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            ms_max, peak_max = t.tolist()
            flops = 4 * args.batch * args.heads * args.L * args.L * args.D * (0.5 if causal else 1.0)
            flops *= 3.5 if mode == "fwdbwd" else 1.0
            row = {"gpus": world, "L": args.L, "D": args.D, "heads": args.heads, "kv_heads": args.kv_heads,
                   "batch": args.batch, "causal": causal, "varlen_seqs": 0, "call": "torch context_parallel",
                   "mode": mode, "ms": ms_max, "tokens_per_s": args.batch * args.L / (ms_max / 1e3),
                   "tflops_total": flops / (ms_max / 1e3) / 1e12, "peak_bytes_per_gpu": int(peak_max)}  # fmt: skip
            rows.append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=131072, help="total sequence length (all ranks)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="fwd,fwdbwd")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--out", default=None, help="directory for a JSON line per case (rank 0)")
    ap.add_argument("--seqs", type=int, default=0, help="also packed: this many sequences (varlen rows)")
    ap.add_argument(
        "--torch-cp",
        action="store_true",
        help="also time PyTorch's context_parallel (SDPA on sharded buffers) in the same run",
    )
    ap.add_argument(
        "--plain",
        action="store_true",
        help="one GPU only: also time plain flash_attn_func (the single-GPU baseline without the ring)",
    )
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    assert args.L % (2 * world) == 0, "L must split into 2W chunks"
    assert not args.seqs or args.batch == 1, "--seqs (packed sequences) takes --batch 1"
    assert not args.plain or world == 1, "--plain is the one-GPU baseline"
    Ll = args.L // world
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    shape_q, shape_kv = (args.batch, Ll, args.heads, args.D), (args.batch, Ll, args.kv_heads, args.D)
    q = torch.randn(shape_q, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(shape_kv, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(shape_kv, device=dev, dtype=torch.bfloat16, generator=g)
    dout = torch.randn(shape_q, device=dev, dtype=torch.bfloat16, generator=g)
    cu = packed_lengths(args.L, args.seqs, 2 * world) if args.seqs else None
    rows = []
    kinds = ["ring"] + (["varlen"] if cu else []) + (["plain"] if args.plain else [])
    cases = [(kind, bool(int(c)), m) for kind in kinds for c in args.causal.split(",") for m in args.modes.split(",")]
    for kind, causal, mode in cases:
        varlen = kind == "varlen"
        qq, kk, vv = (t.detach().requires_grad_(mode == "fwdbwd") for t in (q, k, v))

        def step():
            if varlen:
                o = ft.ring_flash_attn_varlen_func(qq[0], kk[0], vv[0], cu, causal=causal)
            elif kind == "plain":
                o = ft.flash_attn_func(qq, kk, vv, causal=causal)
            else:
                o = ft.ring_attention(qq, kk, vv, causal=causal)
            if mode == "fwdbwd":
                o.backward(dout[0] if varlen else dout)

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        ms = timed(step, args.reps, args.warmup)
        peak = torch.cuda.max_memory_allocated(dev)
        t = torch.tensor([ms, peak - base], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ms_max, extra = t.tolist()
        pairs = sum((b - a) ** 2 for a, b in zip(cu, cu[1:])) if varlen else args.batch * args.L * args.L
        flops = 4 * args.heads * pairs * args.D * (0.5 if causal else 1.0)
        flops *= 3.5 if mode == "fwdbwd" else 1.0  # backward = 2.5x forward (DESIGN.md)
        row = {
            "gpus": world,
            "L": args.L,
            "D": args.D,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "batch": args.batch,
            "causal": causal,
            "varlen_seqs": args.seqs if varlen else 0,
            "call": "flash_attn_func" if kind == "plain" else "ring",
            "mode": mode,
            "ms": ms_max,
            "tokens_per_s": args.batch * args.L / (ms_max / 1e3),
            "tflops_total": flops / (ms_max / 1e3) / 1e12,
            "peak_extra_bytes_per_gpu": int(extra),
            "peak_bytes_per_gpu": int(peak),
        }
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if args.torch_cp:
        rows += torch_cp_rows(args, rank, world, dev)
    if rank == 0 and args.out:
        os.makedirs(args.out, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        with open(os.path.join(args.out, f"ring-{world}gpu-{stamp}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
