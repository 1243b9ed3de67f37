"""flashattn's cpu backend next to PyTorch's CPU SDPA (its flash-attention CPU
kernel), in one process, on the same tensors and the same number of threads:
issue 15's table (forward and backward, f32 and bf16, D = 64 / 128,
L = 2048 / 4096, causal and not, B * H = 8).

Ours: flashattn.torch.attention on CPU tensors with backend="cpu" (threads =
torch.get_num_threads(), as the Python layer passes them); torch:
F.scaled_dot_product_attention. Both forward alone, then forward + backward
minus forward for the backward. The four calls of a row are timed in turns
(one of each per round, the order rotating from round to round) so that a
shared host's load changing over the run reaches both sides alike; medians
of --reps rounds after one warm-up; the ratio is the median of the rounds'
ratios, torch's time over ours (> 1: ours is faster). The "CPU share"
column is the process's CPU time over wall time x threads during the row:
well under 1 means other work held the cores and the row is noisy.

usage: PYTHONPATH=python FLASHATTN_LIBRARY=build/libflashattn.so \\
       python3 bench/cpu_vs_torch.py [--threads 2,16] [--quick] [--out FILE]
"""

import argparse
import datetime
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import flashattn
import flashattn.torch as ft


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def rounds_ms(fns, reps, blocks=False):
    """Each of fns once per round, for reps rounds after one warm-up call each, the order rotated every round
    (blocks: each fn's warm-up and reps calls back to back instead, one fn after the other); returns a list of
    per-round times (ms) for each fn, and the CPU share of the rounds (process CPU time over wall time x
    threads)."""
    if not blocks:
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for j, fn in enumerate(fns if blocks else []):
        fn()
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times[j].append((time.perf_counter() - t0) * 1e3)
    for r in range(0 if blocks else reps):
        for i in range(len(fns)):
            j = (i + r) % len(fns)
            t0 = time.perf_counter()
            fns[j]()
            times[j].append((time.perf_counter() - t0) * 1e3)
    share = (time.process_time() - cpu0) / ((time.perf_counter() - wall0) * torch.get_num_threads())
    return times, share


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llc_bytes():
    """The last-level cache's size as Linux reports it (the largest index of cpu0's caches), 32 MiB if unknown."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for d in os.listdir(base) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, d, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or 32 << 20


def rotation(make, nbytes, llc):
    """Copies made by make() so that one round over them is twice the last-level cache (256 MiB at least), as
    `flashattn bench --decode` rotates: each call then reads its K/V from memory, not from the caches."""
    want = max(2 * llc, 256 << 20)
    return [make() for _ in range(max(1, min(1024, -(-want // nbytes))))]


def decode(a):
    """One query row against a long K/V (issue 13's cpu comparison), each call on its own copy of K/V (a rotation
    of twice the last-level cache): ours (flash_attn_func, which takes the cpu decode pass) and torch's SDPA two ways,
    K/V repeated to Hq heads beforehand (outside the timing) and enable_gqa=True on the Hkv heads; median ms, the
    K/V GB/s ours reads, and torch's faster way over ours."""
    llc = llc_bytes()
    print(f"# flashattn cpu decode vs PyTorch CPU SDPA, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"# {cpu_model()}; torch {torch.__version__}; B=1 Hq=32 Lq=1 D=128, median of {a.reps} after a warm-up; "
        f"each call on its own copy of K/V (rounds of 2 x the {llc >> 20} MiB last-level cache)"
    )
    print(
        "| threads | dtype | Hkv | Lk | ours ms | ours K/V GB/s | torch repeated ms | torch gqa ms | best torch / ours |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for threads in (int(x) for x in a.threads.split(",")):
        torch.set_num_threads(threads)
        for dname in a.dtypes.split(","):
            dt = getattr(torch, dname)
            for hkv in (32, 8):
                for lk in (8192, 32768):
                    g = torch.Generator().manual_seed(lk)
                    q = torch.randn(1, 1, 32, 128, generator=g).to(dt)  # [B, L, H, D]
                    k, v = (torch.randn(1, lk, hkv, 128, generator=g).to(dt) for _ in range(2))
                    kv_bytes = 2 * k.numel() * k.element_size()
                    ours_kv = rotation(lambda: (k.clone(), v.clone()), kv_bytes, llc)
                    gqa_kv = rotation(lambda: (k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()),
                                      kv_bytes, llc)  # fmt: skip
                    rep_kv = rotation(
                        lambda: tuple(x.transpose(1, 2).repeat_interleave(32 // hkv, 1).contiguous() for x in (k, v)),
                        kv_bytes * (32 // hkv),
                        llc,
                    )
                    qt = q.transpose(1, 2)
                    turn = {"ours": 0, "rep": 0, "gqa": 0}

                    def call(name, kvs, fn):
                        kk, vv = kvs[turn[name] % len(kvs)]
                        turn[name] += 1
                        return fn(kk, vv)

                    ours = median_ms(
                        lambda: call("ours", ours_kv, lambda kk, vv: ft.flash_attn_func(q, kk, vv, causal=True,
                                                                                         backend="cpu")),
                        a.reps,
                    )  # fmt: skip
                    rep = median_ms(lambda: call("rep", rep_kv, lambda kk, vv: F.scaled_dot_product_attention(qt, kk, vv)),
                                    a.reps)  # fmt: skip
                    gqa = median_ms(
                        lambda: call("gqa", gqa_kv,
                                     lambda kk, vv: F.scaled_dot_product_attention(qt, kk, vv, enable_gqa=True)),
                        a.reps,
                    )  # fmt: skip
                    gbs = kv_bytes / (ours * 1e-3) / 1e9
                    print(f"| {threads} | {dname} | {hkv} | {lk} | {ours:.3f} | {gbs:.1f} | {rep:.3f} | {gqa:.3f} | "
                          f"{min(rep, gqa) / ours:.2f} |", flush=True)  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2,16")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--l", default="2048,4096")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8, help="B = 1, this many heads (B * H)")
    ap.add_argument("--quick", action="store_true", help="L = 1024, D = 64 only: a smoke run")
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument(
        "--order",
        choices=("turns", "blocks"),
        default="turns",
        help="turns (default): a row's four calls in turns, round by round; blocks: each call's rounds back to back "
        "(how this script timed before 2026-12-01: ours after ours, torch after torch, so neither runs while the "
        "other's OpenMP threads still spin)",
    )
    ap.add_argument(
        "--decode",
        action="store_true",
        help="decode instead (issue 13): one query row, Hq = 32, Hkv = 32 and 8, D = 128, Lk = 8192 / 32768, "
        "forward only; GB/s of K/V",
    )
    a = ap.parse_args()
    if a.quick:
        a.l, a.d = "1024", "64"
    lines = []
    if a.decode:
        return decode(a)

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    say(f"# flashattn cpu vs PyTorch CPU SDPA, {datetime.datetime.now().isoformat(timespec='seconds')}")
    say(
        f"# {cpu_model()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; flashattn ISAs {flashattn.cpu_isas()}"
    )
    say(
        f"# B=1 H={a.heads}, {a.reps} rounds after a warm-up (the four calls of a row {'in turns' if a.order == 'turns' else 'each in a block'}), medians; ratio = the "
        "median of the rounds' torch ms / ours ms (> 1: ours faster)"
    )
    say()
    say(
        "| threads | dtype | D | L | causal | ours fwd ms | torch fwd ms | fwd ratio | ours bwd ms | torch bwd ms | bwd ratio "
        "| CPU share |"
    )
    say("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for threads in (int(x) for x in a.threads.split(",")):
        torch.set_num_threads(threads)
        for dname in a.dtypes.split(","):
            dt = getattr(torch, dname)
            for D in (int(x) for x in a.d.split(",")):
                for L in (int(x) for x in a.l.split(",")):
                    for causal in (False, True):
                        g = torch.Generator().manual_seed(L + D)
                        q, k, v, do = (torch.randn(1, a.heads, L, D, generator=g).to(dt) for _ in range(4))
                        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

                        def ours_f():
                            return ft.attention(q, k, v, causal=causal, backend="cpu")

                        def torch_f():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def ours_fb():
                            ft.attention(qg, kg, vg, causal=causal, backend="cpu").backward(do)

                        def torch_fb():
                            F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do)

                        (of_, tf_, ofb_, tfb_), share = rounds_ms(
                            [ours_f, torch_f, ours_fb, torch_fb], a.reps, a.order == "blocks"
                        )
                        ob_ = [max(x - y, 1e-9) for x, y in zip(ofb_, of_)]
                        tb_ = [max(x - y, 1e-9) for x, y in zip(tfb_, tf_)]
                        med = statistics.median
                        fr = med(t / o for t, o in zip(tf_, of_))
                        br = med(t / o for t, o in zip(tb_, ob_))
                        say(f"| {threads} | {dname} | {D} | {L} | {causal} | {med(of_):.1f} | {med(tf_):.1f} | {fr:.2f} | "
                            f"{med(ob_):.1f} | {med(tb_):.1f} | {br:.2f} | {share:.2f} |")  # fmt: skip
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
