"""Decode on the GPU: flashattn's fa_forward_kvcache (cuda backend) next to
PyTorch SDPA's backends (flash, efficient, cudnn, math where each runs), in
one process, on issue 13's shapes: bf16, D = 128, one query token,
bottom-right causal (for one query row: every key visible, so SDPA runs
is_causal=False), the cache full (cache_seqlens = Lk, nothing appended),
contiguous and paged (page 16 and 256, pages shuffled). Also a device-to-
device copy in the same run: the bandwidth ceiling.

Timing: CUDA events around a loop of --inner calls, warm-up first, the
median of --reps loops, per call. "call" is what a caller sees (our call
validates cache_seqlens / the block table on the host first: a synchronous
copy); "kernels" is the device time of our kernels alone (torch.profiler,
CUPTI), the figure to hold against the copy bandwidth. GB/s counts the K
and V bytes once (2 B Hkv Lk D bytes each).

usage: python3 bench/gpu/decode.py --lib build/libflashattn.so [--out DIR]
       [--reps 15] [--inner 20] [--splits 0,16,64] [--quick] [--shapes B:Hq:Hkv:Lk:page,...]
       [--breakdown] [--timeline] [--api] [--trace]  (decode_probe.py: where a call's time goes)
       [--graph]  (each call also captured in a CUDA graph, as decode servers run it: replays timed)
       [--python]  (also flashattn.torch.flash_attn_with_kvcache from Python, device_checks=False)
"""

import argparse
import ctypes as C
import datetime
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# SDPA explains every backend it passes over (GQA shapes, disabled backends): one line per call, pages of them
warnings.filterwarnings("ignore", category=UserWarning)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_probe  # noqa: E402
import fa_ctypes as fa  # noqa: E402


class KVCache(C.Structure):
    _fields_ = [
        ("k_cache", fa.Tensor),
        ("v_cache", fa.Tensor),
        ("cache_seqlens", C.c_void_p),
        ("block_table", C.c_void_p),
        ("max_blocks", C.c_int64),
        ("block_table_stride", C.c_int64),
        ("k_new", fa.Tensor),
        ("v_new", fa.Tensor),
        ("rotary_cos", C.c_void_p),
        ("rotary_sin", C.c_void_p),
        ("rotary_len", C.c_int64),
        ("rotary_dim", C.c_int64),
        ("rotary_interleaved", C.c_int),
        ("num_splits", C.c_int),
    ]


def tensor_view(data_ptr, shape, stride, code=fa.FA_BF16):
    x = fa.Tensor()
    x.data = data_ptr
    x.dtype = code
    for d in range(4):
        x.shape[d] = shape[d]
        x.stride[d] = stride[d]
    x.memory = fa.FA_MEMORY_CUDA
    return x


def events_ms(fn, reps, inner, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return statistics.median(times)


def graph_ms(fn, reps, inner, on_stream=None):
    """ms per call of `inner` back-to-back calls of fn captured in one CUDA graph, its replays timed
    as events_ms times calls (a decode server replays such graphs: no launch gaps between calls).
    on_stream(s) points our context at stream s (the capture's, then back to the current one)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch advises
        if on_stream:
            on_stream(side)
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            if on_stream:
                on_stream(torch.cuda.current_stream())
            for _ in range(inner):
                fn()
    finally:
        if on_stream:
            on_stream(torch.cuda.current_stream())
    return events_ms(g.replay, reps, 1) / inner


def profiled(fn, calls, warm=1):
    """The profiler over `calls` back-to-back calls of fn (after `warm`
    calls), and the device events of our kernels: (start, end, name)
    sorted."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    ev = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if str(getattr(e, "device_type", "")).endswith("CUDA") and ("fa_dec" in e.name or "kernel" in e.name)
    )
    return prof, ev


def kernel_ms(fn, calls=10):
    """Device time of the kernels fn launches (all of them), per call, their
    names, and the GPU's idle time between them per call (the span from the
    first kernel's start to the last one's end, minus the kernels' time)."""
    prof, spans = profiled(fn, calls)
    busy = sum(b - a for a, b, _ in spans)
    idle = ((spans[-1][1] - spans[0][0]) - busy) / 1000.0 / calls if spans else float("nan")
    total = 0.0
    names = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None)
        if t is None:
            t = getattr(ev, "cuda_time_total", 0.0)
        if t and ("fa_dec" in ev.key or "kernel" in ev.key):
            total += t
            names.append("%s %.4f" % (ev.key.split("(")[0].split("<")[0][-28:], t / 1000.0 / calls))
    return total / 1000.0 / calls, names + ["GPU idle between them %.4f" % idle]


def timeline(fn, calls=4):
    """Our kernels of `calls` back-to-back calls (after a warm-up, no sync
    between them, as the timed loop runs them): each kernel's start and end
    in us from the first one's start, and the gap before it."""
    _, ev = profiled(fn, calls, warm=3)
    if not ev:
        return []
    t0, prev = ev[0][0], ev[0][0]
    out = []
    for a0, a1, name in ev:
        short = name.split("(")[0].split("<")[0][-24:]
        out.append("%-24s start %8.1f end %8.1f (%6.1f us, gap %5.1f)" % (short, a0 - t0, a1 - t0, a1 - a0, a0 - prev))
        prev = a1
    return out


def copy_gbps(reps):
    n = 2 << 30  # 2 GiB read + 2 GiB written
    src = torch.empty(n // 2, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = events_ms(lambda: dst.copy_(src), reps, 5)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / (ms * 1e-3) / 1e9


class Ours:
    def __init__(self, lib_path):
        self.lib = fa.load(lib_path)
        L = self.lib
        P = C.POINTER
        L.fa_forward_kvcache.argtypes = [
            C.c_void_p,
            C.c_int,
            P(fa.Tensor),
            P(KVCache),
            P(fa.Options),
            P(fa.Tensor),
            P(fa.Tensor),
        ]
        L.fa_forward_kvcache.restype = C.c_int
        why = C.create_string_buffer(256)
        if L.fa_backend_available(fa.FA_BACKEND_CUDA, why, 256) != 0:
            raise SystemExit("cuda backend not available: " + why.value.decode())
        self.ctx = C.c_void_p()
        assert L.fa_context_create(C.byref(self.ctx)) == 0
        L.fa_context_set_stream(self.ctx, C.c_void_p(torch.cuda.current_stream().cuda_stream))

    def set_stream(self, stream):
        self.lib.fa_context_set_stream(self.ctx, C.c_void_p(stream.cuda_stream))

    def call(self, q, kv, opt, o, lse):
        st = self.lib.fa_forward_kvcache(
            self.ctx, fa.FA_BACKEND_CUDA, C.byref(q), C.byref(kv), C.byref(opt), C.byref(o), C.byref(lse)
        )
        if st != 0:
            raise RuntimeError("fa_forward_kvcache: %d %s" % (st, self.lib.fa_context_last_error(self.ctx).decode()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--splits", default="0", help="num_splits values to time (0 = auto)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default=None, help="B:Hq:Hkv:Lk:page,... in place of the built-in list")
    ap.add_argument(
        "--plain", action="store_true", help="also time the plain fa_forward on the contiguous shapes (no cache API)"
    )
    ap.add_argument(
        "--checks",
        default="on,off",
        help="fa_context_set_device_checks per row: on (lengths / block table read back and checked "
        "each call: a host sync), off (taken unread, the call stays asynchronous), or both",
    )
    ap.add_argument(
        "--kernels",
        default="auto",
        help="auto (the library's choice: tensor cores for grouped f16/bf16 queries), cores "
        "(FLASHATTN_CUDA_DECODE_MMA=0: the CUDA-core kernel for every shape), nopdl (FLASHATTN_CUDA_PDL=0: "
        "plain launches, no programmatic dependent launch), or a list: auto,cores,nopdl",
    )
    ap.add_argument("--breakdown", action="store_true", help="print each of our kernels' time per call")
    ap.add_argument(
        "--timeline", action="store_true", help="print our kernels' start / end over 4 back-to-back calls per row"
    )
    ap.add_argument(
        "--trace", action="store_true", help="per-block timeline of each row's call (a FA_CUDA_DECODE_TRACE=ON build)"
    )
    ap.add_argument("--api", action="store_true", help="the CUDA runtime calls of each row's call, host us each")
    ap.add_argument(
        "--python",
        action="store_true",
        help="also time flashattn.torch.flash_attn_with_kvcache (device_checks=False) on the contiguous shapes: "
        "what a PyTorch user's eager decode step costs, next to SDPA called from Python",
    )
    ap.add_argument(
        "--graph",
        action="store_true",
        help="also time each call captured in a CUDA graph (--inner calls a graph, its replays timed), ours "
        "(unchecked rows) and each SDPA backend's",
    )
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    say(
        "# decode benchmark, %s, %s (%d SMs), torch %s"
        % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), dev.name, dev.multi_processor_count, torch.__version__)
    )
    cbw = copy_gbps(a.reps)
    say("device-to-device copy (2 GiB read + 2 GiB written): %.0f GB/s" % cbw)
    ours = Ours(a.lib)
    D = 128
    shapes = [  # (B, Hq, Hkv, Lk, page)
        (1, 32, 8, 32768, 0),
        (1, 32, 8, 131072, 0),
        (8, 32, 8, 8192, 0),
        (32, 32, 8, 4096, 0),
        (8, 32, 32, 8192, 0),
        (1, 32, 8, 32768, -1),  # page -1: contiguous in FlashAttention's [B, L, Hkv, D] (as a page's rows)
        (1, 32, 8, 32768, 16),
        (1, 32, 8, 32768, 256),
        (8, 32, 8, 8192, -1),
        (8, 32, 8, 8192, 16),
        (8, 32, 8, 8192, 256),
    ]
    if a.quick:
        shapes = shapes[:1] + shapes[5:6]
    if a.shapes:
        shapes = [tuple(int(x) for x in sh.split(":")) for sh in a.shapes.split(",")]
    splits = [int(x) for x in a.splits.split(",")]
    hdr = "%-44s %9s %9s %9s %7s %7s %7s | %-44s %6s" % (
        "shape",
        "ours ms",
        "kern ms",
        "kern GB/s",
        "%copy",
        "vs best",
        "kern vs",
        "SDPA ms (flash/eff/cudnn/math)",
        "err",
    )
    say(hdr)
    for B, Hq, Hkv, Lk, page in shapes:
        g = Hq // Hkv
        kvbytes = 2 * B * Hkv * Lk * D * 2
        q = torch.randn(B, Hq, 1, D, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(B, Hkv, Lk, D, dtype=torch.bfloat16, device="cuda")
        v = torch.randn(B, Hkv, Lk, D, dtype=torch.bfloat16, device="cuda")
        o = torch.empty(B, Hq, 1, D, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(B, Hq, 1, dtype=torch.float32, device="cuda")
        seqlens = torch.full((B,), Lk, dtype=torch.int32, device="cuda")
        kv = KVCache()
        bt = None
        if page < 0:
            kl = k.transpose(1, 2).contiguous()  # [B, L, Hkv, D]
            vl = v.transpose(1, 2).contiguous()
            std = [Lk * Hkv * D, D, Hkv * D, 1]
            kv.k_cache = tensor_view(kl.data_ptr(), [B, Hkv, Lk, D], std)
            kv.v_cache = tensor_view(vl.data_ptr(), [B, Hkv, Lk, D], std)
        elif page:
            nb = Lk // page
            perm = torch.randperm(B * nb, device="cuda").to(torch.int32)
            bt = perm.view(B, nb).contiguous()
            # vLLM layout [pages, page, Hkv, D]; page bt[b, j // page] holds keys of b
            kp = torch.empty(B * nb, page, Hkv, D, dtype=torch.bfloat16, device="cuda")
            vp = torch.empty_like(kp)
            kp[bt.view(-1).long()] = k.permute(0, 2, 1, 3).reshape(B * nb, page, Hkv, D)
            vp[bt.view(-1).long()] = v.permute(0, 2, 1, 3).reshape(B * nb, page, Hkv, D)
            shp = [B * nb, Hkv, page, D]
            std = [page * Hkv * D, D, Hkv * D, 1]
            kv.k_cache = tensor_view(kp.data_ptr(), shp, std)
            kv.v_cache = tensor_view(vp.data_ptr(), shp, std)
            kv.block_table = bt.data_ptr()
            kv.max_blocks = nb
        else:
            kv.k_cache = fa.tensor_of(k, fa.FA_BF16)
            kv.v_cache = fa.tensor_of(v, fa.FA_BF16)
        kv.cache_seqlens = seqlens.data_ptr()
        tq, to, tl = fa.tensor_of(q, fa.FA_BF16), fa.tensor_of(o, fa.FA_BF16), fa.tensor_of(lse, fa.FA_F32)
        opt = fa.Options()
        ours.lib.fa_options_init(C.byref(opt))
        opt.causal = 1

        # SDPA (contiguous K/V; GQA through enable_gqa, else K/V repeated beforehand)
        sd = {}
        sdg = {}  # SDPA's graph-replay times (--graph)
        ref = None
        for name, be in (
            ("flash", SDPBackend.FLASH_ATTENTION),
            ("eff", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("math", SDPBackend.MATH),
        ):
            if name == "math" and B * Hq * Lk > 8 * 32 * 8192:
                continue
            try:
                with sdpa_kernel(be):
                    if g > 1:
                        try:
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                            out = fn()
                            tag = ""
                        except Exception:
                            kr, vr = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
                            fn = lambda kr=kr, vr=vr: F.scaled_dot_product_attention(q, kr, vr)
                            out = fn()
                            tag = "*"
                    else:
                        fn = lambda: F.scaled_dot_product_attention(q, k, v)
                        out = fn()
                        tag = ""
                    sd[name] = (events_ms(fn, a.reps, a.inner), tag)
                    if ref is None or name == "math":
                        ref = out.float()
                    if a.graph and name != "math":
                        try:
                            sdg[name] = graph_ms(fn, a.reps, a.inner)
                        except Exception:  # not capturable: shown as '-'
                            sdg[name] = None
            except Exception as e:  # a backend missing for this shape / build
                sd[name] = (None, type(e).__name__[:12])
        best = min([t for t, _ in sd.values() if t is not None], default=None)
        best_graph = min([t for t in sdg.values() if t is not None], default=None)

        sdp = "/".join(
            ("%.4f%s" % (t, tag)) if t is not None else tag
            for t, tag in (sd.get(n, (None, "-")) for n in ("flash", "eff", "cudnn", "math"))
        )

        def row(name, fn):
            """Times one of our calls (events) and its kernels (profiler), checks o, prints the row."""
            fn()
            torch.cuda.synchronize()
            err = (o.float() - ref).abs().max().item() if ref is not None else float("nan")
            t_call = events_ms(fn, a.reps, a.inner)
            t_kern, kernels = kernel_ms(fn)
            gbs = kvbytes / (t_kern * 1e-3) / 1e9 if t_kern > 0 else float("nan")
            vs_call = (best / t_call) if best else float("nan")
            vs_kern = (best / t_kern) if best and t_kern > 0 else float("nan")
            say("%-44s %9.4f %9.4f %9.0f %6.0f%% %6.2fx %6.2fx | %-44s %6.3f"
                % (name, t_call, t_kern, gbs, 100 * gbs / cbw, vs_call, vs_kern, sdp, err))  # fmt: skip
            if a.graph and " unchecked" in name:  # a checked call reads lengths back: not capturable
                t_graph = graph_ms(fn, a.reps, a.inner, on_stream=ours.set_stream)
                say("    graph replays: ours %.4f ms a call, SDPA %s, best %s: %.2fx"
                    % (t_graph, "/".join("%.4f" % sdg[n] if sdg.get(n) else "-" for n in ("flash", "eff", "cudnn")),
                       "%.4f" % best_graph if best_graph else "-",
                       best_graph / t_graph if best_graph else float("nan")))  # fmt: skip
            if a.timeline:
                for line in timeline(fn):
                    say("      " + line)
            if a.trace:
                dump = os.path.join(a.out, "trace-%d.csv" % len(lines)) if a.out else None
                for line in decode_probe.trace_lines(ours.lib, fn, dump=dump):
                    say("    " + line)
            if a.api:
                for line in decode_probe.api_lines(fn):
                    say("    " + line)
            if a.breakdown:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(20):  # enqueue only: the host's own time per call (the queue never fills at 20)
                    fn()
                host_us = (time.perf_counter() - t0) / 20 * 1e6
                torch.cuda.synchronize()
                say("    kernels (ms per call): %s; host %.1f us per call" % (", ".join(kernels), host_us))

        runs = [(kn, ns, chk) for kn in a.kernels.split(",") for ns in splits for chk in a.checks.split(",")]
        for kn, ns, chk in runs:
            kv.num_splits = ns
            ours.lib.fa_context_set_device_checks(ours.ctx, 1 if chk == "on" else 0)
            os.environ["FLASHATTN_CUDA_DECODE_MMA"] = "0" if kn == "cores" else "1"  # read at each call
            os.environ["FLASHATTN_CUDA_PDL"] = "0" if kn == "nopdl" else "1"
            tags = (" page %d" % page if page > 0 else " bshd" if page < 0 else "") + (" splits %d" % ns if ns else "")
            tags += (" unchecked" if chk == "off" else "") + (" " + kn if kn != "auto" else "")
            row("B=%d H=%d/%d Lk=%d%s" % (B, Hq, Hkv, Lk, tags), lambda: ours.call(tq, kv, opt, to, tl))
        os.environ.pop("FLASHATTN_CUDA_DECODE_MMA", None)
        os.environ.pop("FLASHATTN_CUDA_PDL", None)
        if a.python and page <= 0:  # the step as a PyTorch user writes it: [B, L, H, D] tensors
            os.environ.setdefault("FLASHATTN_LIBRARY", os.path.abspath(a.lib))
            import flashattn.torch as ft

            qb = q.transpose(1, 2)
            kb, vb = (kl, vl) if page < 0 else (k.transpose(1, 2), v.transpose(1, 2))

            def py():
                return ft.flash_attn_with_kvcache(qb, kb, vb, cache_seqlens=seqlens, causal=True, device_checks=False)

            err = (py().transpose(1, 2).float() - ref).abs().max().item() if ref is not None else float("nan")
            t_py = events_ms(py, a.reps, a.inner)
            say("    python flash_attn_with_kvcache: %.4f ms a call, %.2fx the best SDPA call (err %.3f)"
                % (t_py, best / t_py if best else float("nan"), err))  # fmt: skip
        if a.plain and page == 0:  # the same step through fa_forward: the library routes it to the decode kernels
            popt = fa.Options()
            ours.lib.fa_options_init(C.byref(popt))
            popt.causal, popt.align = 1, 1  # bottom-right
            tk, tv = fa.tensor_of(k, fa.FA_BF16), fa.tensor_of(v, fa.FA_BF16)

            def plain():
                st = ours.lib.fa_forward(ours.ctx, fa.FA_BACKEND_CUDA, C.byref(tq), C.byref(tk), C.byref(tv),
                                         C.byref(popt), C.byref(to), C.byref(tl))  # fmt: skip
                if st != 0:
                    raise RuntimeError("fa_forward: %s" % ours.lib.fa_context_last_error(ours.ctx).decode())

            row("B=%d H=%d/%d Lk=%d plain fa_forward" % (B, Hq, Hkv, Lk), plain)
        del q, k, v, o, lse, kv
        kl = vl = kp = vp = None
        torch.cuda.empty_cache()
    say(
        "(vs best: best SDPA call time / our call time; kern vs: best SDPA call time / our kernels' time; * = K/V repeated to Hq heads before timing, SDPA backend "
        "without GQA; %copy: kernel GB/s of K/V over the copy bandwidth above)"
    )
    if a.out:
        with open(os.path.join(a.out, "decode.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
