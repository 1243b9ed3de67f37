"""flashattn's cuda backend next to PyTorch SDPA's FLASH and cuDNN backends,
in one process, on the issue's shapes: bf16, 16k tokens per batch
(B = 16384 / L), hidden 2048 = 32 heads of 64 or 16 heads of 128,
L = 512 ... 16384, causal and not, forward and backward.

Timing: CUDA events around each call, warm-up first, the median of --reps.
FLOP count: forward 4 B H L^2 D (halved when causal), backward 2.5 x that.
Also checks, once per shape, flashattn's O (and gradients) against SDPA's.

--fa4: also FlashAttention 4 (PyPI flash-attn-4, flash_attn.cute.flash_attn_func,
CuTe-DSL kernels) on [B, L, H, D] copies of the same inputs made outside the
timed region, forward and backward timed as the SDPA peers are (its forward on
inputs without grad, so it skips its LSE as SDPA's may; its backward through
torch autograd on its output), with columns FA4, xFA4 (ours / FA4) and xbest
(ours / the faster of cuDNN and FA4) and a check of its O and gradients against
FLASH's. Its first calls per shape JIT-compile (printed at the end). Where it
does not import, one line "FA4 unavailable: ..." and the run goes on without it.
On the GPU machine it comes from scripts/gpu/fa4_wheels.sh + fa4_install.sh.

usage: python3 bench/gpu/anchors.py --lib build/libflashattn.so [--out DIR]
       [--d 64,128] [--l 512,...] [--reps 20] [--quick] [--fa4]
"""

import argparse
import ctypes as C
import csv
import datetime
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes as fa  # noqa: E402


class PoolHigh:
    """High-water mark of the device's default memory pool, which is where
    flashattn's scratch comes from (cudaMallocAsync) and where torch's own
    caching allocator does not allocate: the peak device memory one call of
    ours takes beyond its inputs and outputs. None where the driver API is
    missing."""

    USED_MEM_HIGH = 8  # CU_MEMPOOL_ATTR_USED_MEM_HIGH

    def __init__(self):
        try:
            self.cu = C.CDLL("libcuda.so.1")
            dev = C.c_int()
            self.pool = C.c_void_p()
            torch.cuda.synchronize()
            if (
                self.cu.cuCtxGetDevice(C.byref(dev)) != 0
                or self.cu.cuDeviceGetDefaultMemPool(C.byref(self.pool), dev) != 0
            ):
                self.cu = None
        except OSError:
            self.cu = None

    def peak(self, fn):
        if self.cu is None:
            return None
        torch.cuda.synchronize()
        zero = C.c_uint64(0)
        self.cu.cuMemPoolSetAttribute(self.pool, self.USED_MEM_HIGH, C.byref(zero))
        # the library's own scratch pool (src/cuda/scratch_pool.cu) off for this call: its
        # scratch then comes from the default pool, whose high-water mark this reads
        keep = os.environ.get("FLASHATTN_CUDA_SCRATCH_KEEP")
        os.environ["FLASHATTN_CUDA_SCRATCH_KEEP"] = "0"
        try:
            fn()
        finally:
            if keep is None:
                del os.environ["FLASHATTN_CUDA_SCRATCH_KEEP"]
            else:
                os.environ["FLASHATTN_CUDA_SCRATCH_KEEP"] = keep
        torch.cuda.synchronize()
        high = C.c_uint64(0)
        if self.cu.cuMemPoolGetAttribute(self.pool, self.USED_MEM_HIGH, C.byref(high)) != 0:
            return None
        return high.value


class PeerState:
    """What a peer could leave set in this process for the calls after it (--retime): the context's
    persisting-L2 limit (cuCtxGetLimit) and an access-policy window on the current stream
    (cuStreamGetAttribute), which our kernels launched there would inherit. A line of text; "n/a" where
    the driver API is missing."""

    LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    ATTR_ACCESS_POLICY_WINDOW = 1  # CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW

    def __init__(self):
        try:
            self.cu = C.CDLL("libcuda.so.1")
        except OSError:
            self.cu = None

    def line(self):
        if self.cu is None:
            return "n/a"
        torch.cuda.synchronize()
        limit = C.c_size_t(0)
        st_limit = self.cu.cuCtxGetLimit(C.byref(limit), self.LIMIT_PERSISTING_L2)
        win = (C.c_uint64 * 8)()  # CUstreamAttrValue: a 64-byte union; the window's base, bytes first
        stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
        st_win = self.cu.cuStreamGetAttribute(stream, self.ATTR_ACCESS_POLICY_WINDOW, C.byref(win))
        limit_s = f"{limit.value} B" if st_limit == 0 else f"error {st_limit}"
        win_s = f"base {win[0]:#x} bytes {win[1]}" if st_win == 0 else f"error {st_win}"
        return f"persisting L2 limit {limit_s}; stream access-policy window {win_s}"


def median_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


class FlashAttn:
    def __init__(self, lib_path):
        self.lib = fa.load(lib_path)
        why = fa.C.create_string_buffer(256)
        if self.lib.fa_backend_available(fa.FA_BACKEND_CUDA, why, 256) != 0:
            raise SystemExit("cuda backend not available: " + why.value.decode())
        self.ctx = fa.C.c_void_p()
        assert self.lib.fa_context_create(fa.C.byref(self.ctx)) == 0
        self.lib.fa_context_set_stream(self.ctx, fa.C.c_void_p(torch.cuda.current_stream().cuda_stream))

    def _check(self, st):
        if st != 0:
            raise RuntimeError(self.lib.fa_context_last_error(self.ctx).decode())

    def options(self, causal, deterministic=False):
        o = fa.Options()
        self.lib.fa_options_init(fa.C.byref(o))
        o.causal = int(causal)
        o.deterministic = int(deterministic)
        return o

    def forward(self, q, k, v, o, lse, opt):
        T = lambda t, c=fa.FA_BF16: fa.tensor_of(t, c)  # noqa: E731
        tq, tk, tv, to, tl = T(q), T(k), T(v), T(o), T(lse, fa.FA_F32)
        B = fa.C.byref
        return lambda: self._check(
            self.lib.fa_forward(self.ctx, fa.FA_BACKEND_CUDA, B(tq), B(tk), B(tv), B(opt), B(to), B(tl))
        )

    def backward(self, q, k, v, o, do, lse, dq, dk, dv, opt, dbias=None):
        T = lambda t, c=fa.FA_BF16: fa.tensor_of(t, c)  # noqa: E731
        ts = [T(q), T(k), T(v), T(o), T(do), T(lse, fa.FA_F32), T(dq), T(dk), T(dv)]
        tdb = T(dbias) if dbias is not None else None
        B = fa.C.byref
        return lambda: self._check(
            self.lib.fa_backward(
                self.ctx,
                fa.FA_BACKEND_CUDA,
                B(ts[0]),
                B(ts[1]),
                B(ts[2]),
                B(ts[3]),
                B(ts[4]),
                B(ts[5]),
                B(opt),
                B(ts[6]),
                B(ts[7]),
                B(ts[8]),
                B(tdb) if tdb is not None else None,
            )
        )


def shapes(d_list, l_list, causal_list):
    """The anchor problems: (D, H, B, L, causal) with hidden 2048 (H = 2048 / D) and B * L = 16384, from the
    comma-separated lists of --d, --l and --causal."""
    for D in [int(x) for x in d_list.split(",")]:
        for L in [int(x) for x in l_list.split(",")]:
            for causal in [bool(int(x)) for x in causal_list.split(",")]:
                yield D, 2048 // D, max(1, 16384 // L), L, causal


def problem_tensors(B, H, L, D):
    """q, k, v, dO (seeded normal, bf16, [B, H, L, D]) and the outputs o, lse, dq, dk, dv (uninitialized)."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, L, device="cuda", dtype=torch.float32)
    return q, k, v, do, o, lse, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def with_env(env, fn):
    """fn() with the library's switches set as env says ({name: value}; it reads them at each call), restored
    after."""
    saved = {n: os.environ.get(n) for n in env or {}}
    os.environ.update(env or {})
    try:
        return fn()
    finally:
        for n, x in saved.items():
            if x is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = x


def time_ours(ours, tensors, opt, reps, env=None):
    """Our forward and backward on problem_tensors' tensors with options opt and the switches env (with_env):
    (forward ms, backward ms, copies of o, dq, dk, dv)."""
    q, k, v, do, o, lse, dq, dk, dv = tensors

    def run():
        fwd = ours.forward(q, k, v, o, lse, opt)
        bwd = ours.backward(q, k, v, o, do, lse, dq, dk, dv, opt)
        fwd()
        t_fwd, t_bwd = median_ms(fwd, reps), median_ms(bwd, reps)
        fwd()
        bwd()
        torch.cuda.synchronize()
        return t_fwd, t_bwd, (o.clone(), dq.clone(), dk.clone(), dv.clone())

    return with_env(env, run)


def time_peer(f, inputs, do, reps):
    """A torch peer f(q, k, v) -> o, timed as ours is: the forward without grad, the backward through autograd
    on one output recorded with grad (its first call compiles where it compiles): (forward ms, backward ms,
    o, (dq, dk, dv))."""
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    out = f(*leaves)
    grads = torch.autograd.grad(out, leaves, do, retain_graph=True)
    with torch.no_grad():
        t_fwd = median_ms(lambda: f(*inputs), reps)
    t_bwd = median_ms(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True), reps)
    return t_fwd, t_bwd, out.detach(), grads


def tflops(B, H, L, D, causal, ms, bwd=False):
    """TFLOP/s of a call that took ms: 4 B H L^2 D FLOPs forward, halved under causal; the backward 2.5x."""
    f = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0) * (2.5 if bwd else 1.0)
    return f / (ms * 1e-3) / 1e12


def relerr(x, r):
    return ((x.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30)).item()


def use_variant(var):
    """FLASHATTN_CUDA_VARIANT=var, or the mma.sync forward for 'mma', or 'bgN': the backward's grid
    interleaving N heads (FLASHATTN_CUDA_BWD_GROUP=N), or 'dqm': FLASHATTN_CUDA_DQ_WGMMA=0, or 'dqf':
    FLASHATTN_CUDA_BWD256_FUSED=1."""
    os.environ.pop("FLASHATTN_CUDA_WGMMA", None)
    os.environ.pop("FLASHATTN_CUDA_WGMMA_BWD", None)
    os.environ.pop("FLASHATTN_CUDA_BWD_GROUP", None)
    os.environ.pop("FLASHATTN_CUDA_DQ_WGMMA", None)
    os.environ.pop("FLASHATTN_CUDA_BWD256_FUSED", None)
    os.environ["FLASHATTN_CUDA_VARIANT"] = "0"
    if var == "dqf":
        os.environ["FLASHATTN_CUDA_BWD256_FUSED"] = "1"
    elif var == "dqm":
        os.environ["FLASHATTN_CUDA_DQ_WGMMA"] = "0"
    elif var.startswith("bg"):
        os.environ["FLASHATTN_CUDA_BWD_GROUP"] = var[2:]
    elif var == "mma":
        os.environ["FLASHATTN_CUDA_WGMMA"] = "0"
    elif var == "mbwd":
        os.environ["FLASHATTN_CUDA_WGMMA_BWD"] = "0"
    else:
        os.environ["FLASHATTN_CUDA_VARIANT"] = var


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--l", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--variants",
        default="0",
        help="FLASHATTN_CUDA_VARIANT values to time (tile-configuration A/B), or 'mma' for the "
        "mma.sync forward on Hopper (FLASHATTN_CUDA_WGMMA=0), or 'mbwd' for the mma.sync backward "
        "with the wgmma forward (FLASHATTN_CUDA_WGMMA_BWD=0), or 'bgN' for the backward's grid interleaving N "
        "heads (FLASHATTN_CUDA_BWD_GROUP=N), or 'dqm' for the deterministic D = 256 dQ on mma.sync "
        "(FLASHATTN_CUDA_DQ_WGMMA=0), or 'dqf' for the D = 256 backward's dQ fused (f32 atomics) when "
        "not deterministic (FLASHATTN_CUDA_BWD256_FUSED=1); the first is 'fa'",
    )
    ap.add_argument("--passes", default="fwd,bwd", help="fwd, bwd or both")
    ap.add_argument(
        "--once",
        action="store_true",
        help="run flashattn's forward, backward and deterministic backward once per shape (for ncu)",
    )
    ap.add_argument(
        "--retime",
        action="store_true",
        help="time flashattn again after the peers of each shape (impl 'fa-after'), and print the device "
        "state a peer could leave set (PeerState) before the first shape and after each: does a peer in the "
        "process slow our calls after it?",
    )
    ap.add_argument(
        "--fa4",
        action="store_true",
        help="also time FlashAttention 4 (flash_attn.cute.flash_attn_func, PyPI flash-attn-4)",
    )
    args = ap.parse_args()
    variants = args.variants.split(",")
    passes = args.passes.split(",")
    fa4 = None
    if args.fa4:
        try:
            from flash_attn.cute import flash_attn_func as fa4

            import flash_attn.cute as fa4_mod

            print(f"# FA4: flash_attn.cute.flash_attn_func from {os.path.dirname(fa4_mod.__file__)}")
        except Exception as e:  # not installed, or its CuTe-DSL / tvm-ffi stack does not load
            fa4 = None
            print(f"FA4 unavailable: {type(e).__name__}: {e}".splitlines()[0])
    fa4_compile = []

    fl = FlashAttn(args.lib)
    pool = PoolHigh()
    mem_lines = []
    dev = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    rows = []
    print(f"# {dev}, torch {torch.__version__}, {date}; median of {args.reps} after 3 warm-ups; TFLOP/s")
    # with --fa4: a TFLOP/s column FA4, and xFA4 and xbest (ours / the faster of cuDNN and FA4)
    fa4_tf_hdr = f" {'FA4':>7}" if fa4 else ""
    fa4_x_hdr = f" {'xFA4':>6} {'xbest':>6}" if fa4 else ""
    hdr = (
        f"{'D':>4} {'H':>3} {'B':>3} {'L':>6} {'causal':>6} {'pass':>4} | {'flashattn':>9} {'fa-det':>7} "
        f"{'FLASH':>7} {'cuDNN':>7}{fa4_tf_hdr} | {'xFLASH':>6} {'xcuDNN':>6} {'det/FL':>6} {'det/cD':>6}"
        f"{fa4_x_hdr} | check"
    )
    print(hdr)
    state = PeerState() if args.retime else None
    if state:
        print(f"# state before any call: {state.line()}")
    for D, H, B, L, causal in shapes(args.d, args.l, args.causal):
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        fwd_flops = 4.0 * B * H * L * L * D / (2 if causal else 1)
        res = {}
        # flashattn
        opt = fl.options(causal)
        opt_det = fl.options(causal, deterministic=True)
        f_fwd = fl.forward(q, k, v, o, lse, opt)
        f_bwd = fl.backward(q, k, v, o, do, lse, dq, dk, dv, opt)
        f_bwd_det = fl.backward(q, k, v, o, do, lse, dq, dk, dv, opt_det)
        if args.once:
            use_variant(variants[0])
            f_fwd(), f_bwd(), f_bwd_det()
            torch.cuda.synchronize()
            continue
        # extra device memory of one call (scratch), against the inputs' size
        use_variant(variants[0])
        in_bytes = 3 * q.numel() * q.element_size()
        for ps, fn in (("fwd", f_fwd), ("bwd", f_bwd), ("bwd-det", f_bwd_det)):
            if ps.split("-")[0] not in passes:
                continue
            hi = pool.peak(fn)
            extra = "n/a" if hi is None else f"{hi / 2**20:.1f} MiB = {100.0 * hi / in_bytes:.2f}% of q+k+v"
            mem_lines.append(f"{D:>4} {L:>6} {int(causal):>6} {ps:>7} | {extra}")
        for vi, var in enumerate(variants):
            use_variant(var)
            name = "fa" if vi == 0 else f"fa-v{var}"
            if "fwd" in passes:
                res[(name, "fwd")] = median_ms(f_fwd, args.reps)
            if "bwd" in passes:
                res[(name, "bwd")] = median_ms(f_bwd, args.reps)
                res[(name + "-det" if vi else "fa-det", "bwd")] = median_ms(f_bwd_det, args.reps)
        use_variant(variants[0])
        f_fwd()
        f_bwd()
        torch.cuda.synchronize()
        check = ""
        ref = None
        # SDPA backends
        for name, be in (("FLASH", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
            try:
                qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                with sdpa_kernel(be):
                    if "fwd" in passes:
                        res[(name, "fwd")] = median_ms(
                            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.reps
                        )
                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                    if "bwd" in passes:
                        res[(name, "bwd")] = median_ms(
                            lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True), args.reps
                        )
                    if name == "FLASH":
                        g = torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
                        ref = (out.detach(), g)
                        check = "O %.1e dQ %.1e dK %.1e dV %.1e" % (
                            relerr(o, out),
                            relerr(dq, g[0]),
                            relerr(dk, g[1]),
                            relerr(dv, g[2]),
                        )
                        if "bwd" in passes:
                            f_bwd_det()
                            torch.cuda.synchronize()
                            check += " | det dQ %.1e dK %.1e dV %.1e" % (
                                relerr(dq, g[0]),
                                relerr(dk, g[1]),
                                relerr(dv, g[2]),
                            )
                del out
            except Exception as e:  # a backend missing on this build / GPU
                print(f"  {name} unavailable: {e}".splitlines()[0])
        # FlashAttention 4: [B, L, H, D] copies made here, outside the timed region
        if fa4 is not None:
            try:
                q4, k4, v4, do4 = (x.transpose(1, 2).contiguous() for x in (q, k, v, do))
                q4g, k4g, v4g = (x.detach().requires_grad_() for x in (q4, k4, v4))
                # first calls JIT-compile: forward without grad, with grad, backward (untimed)
                t0 = time.perf_counter()
                if "fwd" in passes:
                    fa4(q4, k4, v4, causal=causal)
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
                out4 = fa4(q4g, k4g, v4g, causal=causal)[0]
                g4 = torch.autograd.grad(out4, (q4g, k4g, v4g), do4, retain_graph=True)
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                fa4_compile.append(
                    f"{D:>4} {L:>6} {int(causal):>6} | fwd {t1 - t0:6.1f} s, fwd+bwd with grad {t2 - t1:6.1f} s"
                )
                if "fwd" in passes:
                    res[("FA4", "fwd")] = median_ms(lambda: fa4(q4, k4, v4, causal=causal), args.reps)
                if "bwd" in passes:
                    res[("FA4", "bwd")] = median_ms(
                        lambda: torch.autograd.grad(out4, (q4g, k4g, v4g), do4, retain_graph=True), args.reps
                    )
                if ref is not None:
                    check += " | FA4 O %.1e dQ %.1e dK %.1e dV %.1e" % (
                        relerr(out4.transpose(1, 2), ref[0]),
                        relerr(g4[0].transpose(1, 2), ref[1][0]),
                        relerr(g4[1].transpose(1, 2), ref[1][1]),
                        relerr(g4[2].transpose(1, 2), ref[1][2]),
                    )
                del q4, k4, v4, do4, q4g, k4g, v4g, out4, g4
            except Exception as e:  # this shape, dtype or GPU not supported by FA4
                print(f"  FA4 unavailable: {type(e).__name__}: {e}".splitlines()[0])
        ref = None
        if state:
            # ours again, after the peers: same calls, same tensors
            if "fwd" in passes:
                res[("fa-after", "fwd")] = median_ms(f_fwd, args.reps)
            if "bwd" in passes:
                res[("fa-after", "bwd")] = median_ms(f_bwd, args.reps)
            print(f"# state after D {D} L {L} causal {int(causal)}'s peers: {state.line()}")
        for ps in passes:
            flops = fwd_flops * (2.5 if ps == "bwd" else 1.0)
            tf = {n: flops / (res[(n, ps)] * 1e-3) / 1e12 for (n, p) in res if p == ps}
            ratio = lambda a, b: tf[a] / tf[b] if a in tf and b in tf else float("nan")  # noqa: E731
            fmt = lambda n: f"{tf[n]:7.1f}" if n in tf else f"{'-':>7}"  # noqa: E731
            # ours / the faster of cuDNN and FA4 (whichever of them ran)
            best = max((tf[n] for n in ("cuDNN", "FA4") if n in tf), default=None)
            xbest = lambda a: tf[a] / best if a in tf and best else float("nan")  # noqa: E731
            extra = " ".join(f"{n} {tf[n]:.1f}" for n in sorted(tf) if n.startswith("fa-v"))
            if "fa-after" in tf:
                extra += f" fa-after {tf['fa-after']:.1f} ({ratio('fa-after', 'fa'):.3f}x)"
            fa4_tf = f" {fmt('FA4')}" if fa4 else ""
            fa4_x = f" {ratio('fa', 'FA4'):6.2f} {xbest('fa'):6.2f}" if fa4 else ""
            print(
                f"{D:>4} {H:>3} {B:>3} {L:>6} {int(causal):>6} {ps:>4} | {tf['fa']:9.1f} "
                f"{fmt('fa-det')} {fmt('FLASH')} {fmt('cuDNN')}{fa4_tf} | {ratio('fa', 'FLASH'):6.2f} "
                f"{ratio('fa', 'cuDNN'):6.2f} {ratio('fa-det', 'FLASH'):6.2f} {ratio('fa-det', 'cuDNN'):6.2f}"
                f"{fa4_x} | {check if ps == ('fwd' if 'fwd' in passes else 'bwd') else ''} {extra}"
            )
            for n in tf:
                row = dict(
                    date=date,
                    device=dev,
                    dtype="bf16",
                    D=D,
                    H=H,
                    B=B,
                    L=L,
                    causal=int(causal),
                    pass_=ps,
                    impl=n,
                    ms_median=round(res[(n, ps)], 4),
                    tflops=round(tf[n], 1),
                    x_flash=round(ratio(n, "FLASH"), 3),
                    x_cudnn=round(ratio(n, "cuDNN"), 3),
                )
                if fa4:
                    row.update(x_fa4=round(ratio(n, "FA4"), 3), x_best=round(xbest(n), 3))
                rows.append(row)
        sys.stdout.flush()
        del q, k, v, do, o, lse, dq, dk, dv
        torch.cuda.empty_cache()
    if mem_lines:
        print("# extra device memory of one flashattn call (default memory pool high-water mark)")
        print(f"{'D':>4} {'L':>6} {'causal':>6} {'pass':>7} | extra")
        print("\n".join(mem_lines))
    if fa4_compile:
        print("# FA4's first calls per shape (CuTe-DSL JIT compile + one run; untimed)")
        print(f"{'D':>4} {'L':>6} {'causal':>6} | seconds")
        print("\n".join(fa4_compile))
    if not rows:
        return
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"anchors{args.tag}.csv")
    with open(path, "w", newline="") as fcsv:
        w = csv.DictWriter(fcsv, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"# wrote {path}")


if __name__ == "__main__":
    main()
