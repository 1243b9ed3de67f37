"""Train a small GPT twice: once with flashattn's attention, once with PyTorch's
SDPA, on identical weights and data, and put the two side by side.

The model is a standard pre-LN decoder (GPT-2 style): token + learned position
embeddings, n_layer blocks of causal self-attention and a 4x GELU MLP, a final
LayerNorm and an LM head tied to the token embedding. Training is
torch.autocast(bfloat16) with fp32 weights and AdamW (fused on cuda), warm-up
then cosine learning rate, gradient clipping at 1.0, no dropout.

The only difference between the two runs is one line of the attention block:

    flashattn: flashattn.torch.flash_attn_func(q, k, v, causal=True)          # [B, L, H, D]
    sdpa:      F.scaled_dot_product_attention(q, k, v, is_causal=True)          # [B, H, L, D]

The data needs no download: a fixed-seed synthetic "language" (a sparse
first-order Markov chain over the vocabulary, with spans copied from earlier
in the same sequence, so that both local statistics and attention over the
context pay off). Every step's batch is generated before training and shared
by both runs; torch.manual_seed(seed) before building each model gives both
the same initial weights.

Reported per run: tokens/s, median step time (CUDA events around each step
after the warm-up steps; time.perf_counter on cpu), model TFLOP/s,
torch.cuda.max_memory_allocated() (reset between runs) and the peak of
CUDA's default memory pool, where flashattn's C library takes its scratch
(torch's allocator does not see it), the loss every --log-every steps, a
held-out loss, and the kernels (cuda) or ops (cpu) that torch.profiler saw
in a few extra steps. The end is a markdown table side by side and a loss
comparison with a stated tolerance; --out writes the same text to a file.

usage (repository root; FLASHATTN_LIBRARY=path/to/libflashattn.so, PYTHONPATH=python):
    python examples/python/train_gpt.py                       # cuda, 300 steps, both
    python examples/python/train_gpt.py --device cpu          # tiny config, smoke run
    python examples/python/train_gpt.py --attn flashattn --steps 100 --compile --out gpt.md
"""

import argparse
import contextlib
import ctypes
import datetime
import gc
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import flashattn
import flashattn.torch as fa

# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------
GPU_DEFAULTS = dict(
    steps=300,
    layers=6,
    d_model=768,
    heads=12,
    seq=1024,
    batch=16,
    vocab=512,
    lr=6e-4,
    dtype="bf16",
    log_every=25,
    warmup_steps=10,
    lr_warmup=30,
    profile_steps=3,
    val_batches=4,
)
CPU_DEFAULTS = dict(
    steps=40,
    layers=2,
    d_model=64,
    heads=4,
    seq=64,
    batch=8,
    vocab=64,
    lr=3e-3,
    dtype="fp32",
    log_every=5,
    warmup_steps=3,
    lr_warmup=5,
    profile_steps=2,
    val_batches=2,
)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--attn", choices=("flashattn", "sdpa", "both"), default="both")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, help="training steps (default 300 on cuda, 40 on cpu)")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--seq", type=int, help="sequence length")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--lr", type=float, help="peak learning rate")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), help="bf16: torch.autocast(bfloat16); fp32: no autocast")
    ap.add_argument("--log-every", type=int)
    ap.add_argument("--warmup-steps", type=int, help="first steps left out of the timing (compile, autotune, caches)")
    ap.add_argument("--lr-warmup", type=int, help="linear learning-rate warm-up steps")
    ap.add_argument("--profile-steps", type=int, help="extra steps run under torch.profiler after training (0 = none)")
    ap.add_argument("--val-batches", type=int, help="held-out batches for the final loss")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for each run (weights)")
    ap.add_argument("--data-seed", type=int, default=1234, help="seed of the synthetic language and its samples")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model, fullgraph=True)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (cpu; flashattn's cpu backend follows it)")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="relative difference of the last-50-step mean losses called 'equal within noise'")
    ap.add_argument("--out", help="also write the report (markdown) here")
    args = ap.parse_args(argv)
    defaults = GPU_DEFAULTS if args.device == "cuda" else CPU_DEFAULTS
    for key, val in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if args.steps <= args.warmup_steps:
        ap.error(f"--steps {args.steps} must exceed --warmup-steps {args.warmup_steps}")
    return args


# ---------------------------------------------------------------------------
# synthetic data: a fixed-seed Markov chain with copied spans
# ---------------------------------------------------------------------------
class SyntheticLanguage:
    """Each token has K = 8 possible successors with Zipf weights 1/1 ... 1/8
    (entropy ~1.8 nats, against ln(vocab) for a model that knows nothing);
    with probability p_copy per token a span of 8 to 32 tokens from earlier
    in the sequence is repeated verbatim (predictable only by attending back
    to it). Deterministic in its seed."""

    def __init__(self, vocab, seed, p_copy=0.03, copy_len=(8, 32)):
        rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.K = K = min(8, vocab)
        self.succ = np.stack([rng.choice(vocab, K, replace=False) for _ in range(vocab)])  # [V, K]
        w = 1.0 / np.arange(1, K + 1)
        self.w = w / w.sum()
        self.cum = np.cumsum(self.w)
        self.cum[-1] = 1.0
        self.p_copy = p_copy
        self.copy_len = copy_len

    @property
    def markov_entropy(self):
        return float(-(self.w * np.log(self.w)).sum())

    def sample(self, n, length, seed):
        """n sequences of length tokens, int64 [n, length]; vectorized over n."""
        rng = np.random.default_rng(seed)
        lo, hi = self.copy_len
        out = np.empty((n, length), np.int64)
        rows = np.arange(n)
        out[:, 0] = rng.integers(0, self.vocab, n)
        rem = np.zeros(n, np.int64)  # tokens left in the current copied span
        src = np.zeros(n, np.int64)  # position copied from
        for t in range(1, length):
            idx = np.minimum(np.searchsorted(self.cum, rng.random(n), side="right"), self.K - 1)
            nxt = self.succ[out[:, t - 1], idx]
            span = rng.integers(lo, hi + 1, n)
            start = (rem == 0) & (t >= 2 * hi) & (rng.random(n) < self.p_copy)
            s0 = (rng.random(n) * (t - span)).astype(np.int64)  # span fits before t
            rem = np.where(start, span, rem)
            src = np.where(start, s0, src)
            copying = rem > 0
            out[:, t] = np.where(copying, out[rows, np.minimum(src, t - 1)], nxt)
            src += copying
            rem -= copying
        return out


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, L, C = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, C // self.heads).unbind(2)  # each [B, L, H, D], a view
        if self.attn == "flashattn":
            y = fa.flash_attn_func(q, k, v, causal=True)  # [B, L, H, D] in, [B, L, H, D] out
        else:
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2)  # [B, H, L, D] in and out
        return self.proj(y.reshape(B, L, C))


class Block(nn.Module):
    def __init__(self, d_model, heads, attn):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, attn)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, d_model, heads, attn):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, attn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by depth
            if name.endswith("proj.weight") or name.endswith("fc_out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, targets):
        L = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(L, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def count_params(model, seq, d_model):
    n = sum(p.numel() for p in model.parameters())
    n_body = n - model.wte.weight.numel() - seq * d_model  # without embeddings (the head is tied)
    return n, n_body


def flops_per_token(args, n_body):
    """Training FLOPs per token (PaLM's appendix): 6 N for the matmuls (the
    tied head counted: 6 V d) plus 12 n_layer d L for attention, halved as
    causal attention does half the work."""
    return 6 * (n_body + args.vocab * args.d_model) + 6 * args.layers * args.d_model * args.seq


# ---------------------------------------------------------------------------
# measurement helpers
# ---------------------------------------------------------------------------
class PoolHigh:
    """High-water mark of the current device's default CUDA memory pool: where
    flashattn's C library allocates its scratch (cudaMallocAsync), and which
    torch's caching allocator does not use (unless PYTORCH_CUDA_ALLOC_CONF
    selects backend:cudaMallocAsync). None where the driver API is missing."""

    USED_MEM_HIGH = 8  # CU_MEMPOOL_ATTR_USED_MEM_HIGH

    def __init__(self):
        self.cu = None
        try:
            cu = ctypes.CDLL("libcuda.so.1")
            dev, self.pool = ctypes.c_int(), ctypes.c_void_p()
            torch.cuda.synchronize()
            if cu.cuCtxGetDevice(ctypes.byref(dev)) == 0 and cu.cuDeviceGetDefaultMemPool(
                ctypes.byref(self.pool), dev
            ) == 0:
                self.cu = cu
        except (OSError, AttributeError):
            pass

    def reset(self):
        if self.cu is not None:
            torch.cuda.synchronize()
            zero = ctypes.c_uint64(0)
            if self.cu.cuMemPoolSetAttribute(self.pool, self.USED_MEM_HIGH, ctypes.byref(zero)) != 0:
                self.cu = None

    def high(self):
        if self.cu is None:
            return None
        torch.cuda.synchronize()
        v = ctypes.c_uint64(0)
        if self.cu.cuMemPoolGetAttribute(self.pool, self.USED_MEM_HIGH, ctypes.byref(v)) != 0:
            return None
        return v.value


def is_device_event(e):
    return str(getattr(e, "device_type", "")).endswith(("CUDA", "PrivateUse1"))


ATTN_KEYS = ("fa_cuda", "flash", "fmha", "sdpa", "attention")


def which_attention(name):
    """'flashattn' for our kernels (namespace fa_cuda), 'torch' for PyTorch's
    SDPA kernels (FlashAttention-2, mem-efficient, cuDNN), else None."""
    if "fa_cuda" in name:
        return "flashattn"
    low = name.lower()
    if any(k in low for k in ATTN_KEYS[1:]):
        return "torch"
    return None


def summarize_profile(prof, device, top=15):
    """Text lines: the top CUDA kernels by total time (cuda) or the top CPU ops
    by self time (cpu), the attention ops seen, and a verdict dict."""
    events = list(prof.events())
    lines = []
    ops = {}
    for e in events:
        if not is_device_event(e) and (e.name.startswith("flashattn::") or "scaled_dot_product" in e.name):
            ops[e.name] = ops.get(e.name, 0) + 1
    verdict = {"ops": ops, "kernels": {"flashattn": 0, "torch": 0}}
    if device == "cuda":
        agg = {}
        for e in events:
            if is_device_event(e):
                t, n = agg.get(e.name, (0.0, 0))
                agg[e.name] = (t + e.time_range.elapsed_us(), n + 1)
        total = sum(t for t, _ in agg.values()) or 1.0
        lines.append(f"{'GPU ms':>8} {'%':>5} {'calls':>6}  kernel   (attention kernels: <- flashattn / <- torch)")
        for name, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
            tag = which_attention(name)
            short = name if len(name) <= 110 else name[:107] + "..."
            lines.append(f"{t / 1e3:8.2f} {100 * t / total:5.1f} {n:6d}  {short}" + (f"   <- {tag}" if tag else ""))
        for name, (t, n) in agg.items():
            tag = which_attention(name)
            if tag:
                verdict["kernels"][tag] += n
        names = sorted({n for n in agg if which_attention(n)})
        lines.append("attention kernels seen: " + ("; ".join(names) if names else "none"))
    else:
        agg = {}
        for e in events:
            if not is_device_event(e):
                t, n = agg.get(e.name, (0.0, 0))
                agg[e.name] = (t + e.self_cpu_time_total, n + 1)
        lines.append(f"{'self CPU ms':>11} {'calls':>6}  op")
        for name, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"{t / 1e3:11.2f} {n:6d}  {name}")
    lines.append("attention ops seen: " + (", ".join(f"{k} x{v}" for k, v in sorted(ops.items())) or "none"))
    return lines, verdict


# ---------------------------------------------------------------------------
# one training run
# ---------------------------------------------------------------------------
def lr_at(step, args):
    if step < args.lr_warmup:
        return args.lr * (step + 1) / args.lr_warmup
    frac = (step - args.lr_warmup) / max(1, args.steps - args.lr_warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, frac))))


def train(attn, args, data, val, log):
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        mem_start = torch.cuda.memory_allocated()
    pool = PoolHigh() if cuda else None
    if pool:
        pool.reset()

    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.seq, args.layers, args.d_model, args.heads, attn).to(dev)
    n_params, n_body = count_params(model, args.seq, args.d_model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        fused=cuda,
    )
    fwd_model = torch.compile(model, fullgraph=True) if args.compile else model
    amp = (
        torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
        if args.dtype == "bf16"
        else contextlib.nullcontext()
    )

    def step(i, x, y):
        for g in opt.param_groups:
            g["lr"] = lr_at(i, args)
        with amp:
            loss = fwd_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    B = args.batch
    losses, times_ms = [], []
    log(f"\n## run: attention = {attn}  ({n_params / 1e6:.2f} M parameters, {n_body / 1e6:.2f} M without embeddings)")
    t_start = time.perf_counter()
    for i in range(args.steps):
        seqs = data[i * B : (i + 1) * B]
        x, y = seqs[:, :-1], seqs[:, 1:]
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            losses.append(step(i, x, y))
            e1.record()
            times_ms.append((e0, e1))
        else:
            t0 = time.perf_counter()
            losses.append(step(i, x, y))
            times_ms.append((time.perf_counter() - t0) * 1e3)
        if i == 0 or (i + 1) % args.log_every == 0 or i + 1 == args.steps:
            log(f"  step {i + 1:5d}  loss {losses[-1].item():.4f}  lr {lr_at(i, args):.2e}  "
                f"({time.perf_counter() - t_start:.1f} s)")
    if cuda:
        torch.cuda.synchronize()
        times_ms = [a.elapsed_time(b) for a, b in times_ms]
    wall_s = time.perf_counter() - t_start
    loss_curve = torch.stack(losses).float().cpu().tolist()
    if any(not math.isfinite(v) for v in loss_curve):
        log(f"  WARNING: non-finite loss in the {attn} run")

    timed = times_ms[args.warmup_steps :]
    tokens = B * args.seq
    res = dict(
        attn=attn,
        losses=loss_curve,
        step_ms_median=statistics.median(timed),
        step_ms_p10=float(np.percentile(timed, 10)),
        step_ms_p90=float(np.percentile(timed, 90)),
        warmup_s=sum(times_ms[: args.warmup_steps]) / 1e3,
        tokens_per_s=tokens * len(timed) / (sum(timed) / 1e3),
        wall_s=wall_s,
        n_params=n_params,
    )
    res["tflops"] = flops_per_token(args, n_body) * res["tokens_per_s"] / 1e12
    if cuda:
        res["max_mem"] = torch.cuda.max_memory_allocated()
        res["mem_start"] = mem_start
        res["pool_high"] = pool.high() if pool else None

    # held-out loss
    with torch.no_grad(), amp:
        vl = [
            fwd_model(val[j * B : (j + 1) * B, :-1], val[j * B : (j + 1) * B, 1:]).float()
            for j in range(args.val_batches)
        ]
    res["val_loss"] = torch.stack(vl).mean().item() if vl else float("nan")
    log(f"  held-out loss {res['val_loss']:.4f};  median step {res['step_ms_median']:.2f} ms;  "
        f"{res['tokens_per_s']:,.0f} tokens/s")

    # which backend the C library picked for a forward on this thread
    if attn == "flashattn":
        with torch.no_grad(), amp:
            fwd_model(data[:B, :-1], data[:B, 1:])
        res["fa_backend"] = flashattn.last_backend()
        log(f"  flashattn.last_backend() after a forward: {res['fa_backend']}")

    # a few extra steps (not in the loss curve) under the profiler
    res["profile"], res["verdict"] = [], None
    if args.profile_steps > 0:
        try:
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                for j in range(args.profile_steps):
                    seqs = data[j * B : (j + 1) * B]
                    step(args.steps - 1, seqs[:, :-1], seqs[:, 1:])
                if cuda:
                    torch.cuda.synchronize()
            res["profile"], res["verdict"] = summarize_profile(prof, dev.type)
        except Exception as exc:  # the report matters more than the profile
            res["profile"] = [f"profiler failed: {type(exc).__name__}: {exc}"]
        log(f"  torch.profiler, {args.profile_steps} training steps:")
        for line in res["profile"]:
            log("    " + line)

    del model, fwd_model, opt, step
    if args.compile:
        torch._dynamo.reset()  # drop compiled code that may hold on to this run's model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return res


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def smooth(xs, n):
    return float(np.mean(xs[-n:]))


def report(args, runs, lang, log):
    names = [r["attn"] for r in runs]
    col = lambda f: " | ".join(f(r) for r in runs)  # noqa: E731

    def gib(b):
        if b is None:
            return "n/a"
        return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"

    n_last = min(50, args.steps)
    log("\n## side by side\n")
    log("| | " + " | ".join(names) + " |")
    log("|---|" + "---|" * len(runs))
    log(f"| tokens/s (steps {args.warmup_steps + 1}..{args.steps}) | "
        + col(lambda r: f"{r['tokens_per_s']:,.0f}") + " |")
    log("| median step time | " + col(lambda r: f"{r['step_ms_median']:.2f} ms") + " |")
    log("| step time p10 / p90 | " + col(lambda r: f"{r['step_ms_p10']:.2f} / {r['step_ms_p90']:.2f} ms") + " |")
    log(f"| first {args.warmup_steps} steps (warm-up{', compile' if args.compile else ''}) | "
        + col(lambda r: f"{r['warmup_s']:.2f} s") + " |")
    log("| wall time of the training loop (with logging) | " + col(lambda r: f"{r['wall_s']:.1f} s") + " |")
    log("| model TFLOP/s (6N + attention) | " + col(lambda r: f"{r['tflops']:.3g}") + " |")
    if args.device == "cuda":
        log("| torch.cuda.max_memory_allocated | " + col(lambda r: gib(r["max_mem"])) + " |")
        log("| of which allocated before the run (data) | " + col(lambda r: gib(r["mem_start"])) + " |")
        log("| default CUDA pool peak (flashattn scratch) | " + col(lambda r: gib(r["pool_high"])) + " |")
    log("| loss at step 1 | " + col(lambda r: f"{r['losses'][0]:.4f}") + " |")
    log(f"| mean loss, last {n_last} steps | " + col(lambda r: f"{smooth(r['losses'], n_last):.4f}") + " |")
    log(f"| loss std, last {n_last} steps | " + col(lambda r: f"{float(np.std(r['losses'][-n_last:])):.4f}") + " |")
    log(f"| held-out loss ({args.val_batches} batches) | " + col(lambda r: f"{r['val_loss']:.4f}") + " |")

    def kern(r):
        v = r.get("verdict")
        if not v:
            return "n/a"
        if args.device == "cuda":
            return f"fa_cuda: {v['kernels']['flashattn']}, torch SDPA: {v['kernels']['torch']}"
        return ", ".join(f"{k} x{n}" for k, n in sorted(v["ops"].items())) or "none"

    log("| attention " + ("kernels (profiled steps)" if args.device == "cuda" else "ops (profiled steps)")
        + " | " + col(kern) + " |")

    # loss curves
    log("\n## loss curve (every %d steps)\n" % args.log_every)
    log("| step | " + " | ".join(names) + (" | difference |" if len(runs) == 2 else " |"))
    log("|---|" + "---|" * (len(runs) + (len(runs) == 2)))
    for i in range(args.steps):
        if i == 0 or (i + 1) % args.log_every == 0 or i + 1 == args.steps:
            vals = [r["losses"][i] for r in runs]
            diff = f" | {vals[0] - vals[1]:+.2e}" if len(runs) == 2 else ""
            log(f"| {i + 1} | " + " | ".join(f"{v:.4f}" for v in vals) + diff + " |")

    floor = lang.markov_entropy
    log(f"\nA model that knows nothing scores ln({args.vocab}) = {math.log(args.vocab):.3f}; "
        f"the Markov part of the data has entropy {floor:.3f} nats per token (copied spans are lower).")

    if len(runs) == 2:
        a, b = (np.array(r["losses"]) for r in runs)
        ma, mb = smooth(a, n_last), smooth(b, n_last)
        rel = abs(ma - mb) / abs(mb)
        step_max = float(np.max(np.abs(a[-n_last:] - b[-n_last:])))
        # a moving average over 10 steps takes out most of the step-to-step batch noise
        k = min(10, len(a))
        sa, sb = (np.convolve(x, np.ones(k) / k, mode="valid") for x in (a, b))
        sm_max = float(np.max(np.abs(sa[-n_last:] - sb[-n_last:]))) if len(sa) else float("nan")
        d0 = abs(a[0] - b[0])
        log(f"\n## loss comparison ({names[0]} vs {names[1]})\n")
        log(f"- step 1 (same weights, same batch; differs only by the attention's rounding): "
            f"|difference| = {d0:.2e} ({d0 / abs(b[0]):.2e} relative)")
        log(f"- last {n_last} steps: mean {ma:.4f} vs {mb:.4f}, relative difference {100 * rel:.2f}%; "
            f"max |per-step difference| {step_max:.2e}; max |difference| of 10-step moving averages {sm_max:.2e}")
        va, vb = runs[0]["val_loss"], runs[1]["val_loss"]
        log(f"- held-out loss: {va:.4f} vs {vb:.4f} ({100 * abs(va - vb) / abs(vb):.2f}%)")
        ok = rel <= args.tolerance and abs(va - vb) / abs(vb) <= args.tolerance and math.isfinite(ma + mb)
        verdict = (f"equal within noise: the last-{n_last}-step mean losses and the held-out losses differ by at most "
                   f"{100 * args.tolerance:g}%" if ok else
                   f"NOT equal within the stated tolerance of {100 * args.tolerance:g}% (last-{n_last} means differ "
                   f"by {100 * rel:.2f}%)")
        log(f"- verdict: {verdict}.")
        log(f"- learning: from {a[0]:.3f} / {b[0]:.3f} at step 1 to {ma:.3f} / {mb:.3f} (last-{n_last} means)")
        if args.device == "cuda":
            fa_run = next(r for r in runs if r["attn"] == "flashattn")
            sd_run = next(r for r in runs if r["attn"] == "sdpa")
            if fa_run.get("verdict") and sd_run.get("verdict"):
                fk, sk = fa_run["verdict"]["kernels"], sd_run["verdict"]["kernels"]
                proof = fk["flashattn"] > 0 and fk["torch"] == 0 and sk["torch"] > 0 and sk["flashattn"] == 0
                log(f"- kernels: the flashattn run launched {fk['flashattn']} fa_cuda kernels and {fk['torch']} of "
                    f"SDPA's; the sdpa run {sk['flashattn']} and {sk['torch']}"
                    + (" (each run used only its own attention)" if proof else " (CHECK: not the expected split)"))
            r0, r1 = runs
            log(f"- speed: {r0['attn']} / {r1['attn']} tokens/s = {r0['tokens_per_s'] / r1['tokens_per_s']:.3f}; "
                f"median step {r0['step_ms_median']:.2f} vs {r1['step_ms_median']:.2f} ms")


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device (use --device cpu)")
    lines = []

    def log(s=""):
        print(s, flush=True)
        lines.append(s)

    if args.threads:
        torch.set_num_threads(args.threads)
    attns = ["flashattn", "sdpa"] if args.attn == "both" else [args.attn]
    dev = torch.device(args.device)
    if "flashattn" in attns:
        be = flashattn.backends()["cuda" if args.device == "cuda" else "cpu"]
        if not be.available:
            sys.exit(f"flashattn's {be.name} backend is not usable here: {be.reason} ({flashattn.library_path()})")

    log(f"# train_gpt: flashattn vs SDPA, {datetime.datetime.now().isoformat(timespec='seconds')}")
    hw = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} torch threads"
    log(f"\n- device: {hw}; torch {torch.__version__}; flashattn {flashattn.__version__} "
        f"from {flashattn.library_path()}")
    if args.device == "cuda":
        log(f"- flashattn.cuda_device(): {flashattn.cuda_device()}")
    log(f"- model: {args.layers} layers, d_model {args.d_model}, {args.heads} heads of {args.d_model // args.heads}, "
        f"seq {args.seq}, batch {args.batch} ({args.batch * args.seq} tokens/step), vocab {args.vocab}, "
        "tied embeddings")
    log(f"- training: {args.steps} steps, AdamW(lr {args.lr:g}, betas 0.9/0.95, wd 0.1), warm-up {args.lr_warmup} "
        f"then cosine to 10%, clip 1.0, {'bf16 autocast' if args.dtype == 'bf16' else 'fp32'}"
        f"{', torch.compile(fullgraph=True)' if args.compile else ''}; seed {args.seed}, data seed {args.data_seed}")
    log(f"- timing: {'CUDA events around each step' if args.device == 'cuda' else 'time.perf_counter per step'}, "
        f"first {args.warmup_steps} steps left out; tokens/s = tokens of the timed steps / their summed time")

    t0 = time.perf_counter()
    lang = SyntheticLanguage(args.vocab, args.data_seed)
    data = torch.from_numpy(lang.sample(args.steps * args.batch, args.seq + 1, args.data_seed + 1)).to(dev)
    val = torch.from_numpy(lang.sample(max(1, args.val_batches) * args.batch, args.seq + 1, args.data_seed + 2)).to(dev)
    log(f"- data: {data.shape[0]} training and {val.shape[0]} held-out sequences of {args.seq + 1} tokens, "
        f"generated in {time.perf_counter() - t0:.1f} s")

    runs = [train(a, args, data, val, log) for a in attns]
    report(args, runs, lang, log)
    if args.out:
        d = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(d, exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
