#!/usr/bin/env python3
"""Plot a `flashattn bench --sweep` JSON: FLOP/s and extra memory against L.

usage: python3 bench/plot.py bench-sweep.json docs/bench-cpu.png [--pass fwd]

One figure, two rows: top, achieved GFLOP/s against L (log2 axis); bottom,
peak extra memory of the call against L (log axes). One column per head dim
D; one line per backend, solid when not causal and dashed when causal.
Skipped points (eager past --mem-limit) are marked on the memory panel's
top edge. Needs matplotlib (pip install matplotlib, in a venv or --user).
"""
import argparse
import json
import sys
from collections import defaultdict

try:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py needs matplotlib: pip install matplotlib (in a venv or with --user)")

COLORS = {"cpu": "tab:blue", "eager": "tab:red", "ref": "tab:gray", "cuda": "tab:green"}


def load(path, want_pass):
    with open(path) as f:
        doc = json.load(f)
    series = defaultdict(list)  # (D, backend, causal) -> [(L, result)]
    for r in doc["results"]:
        if r["pass"] != want_pass:
            continue
        series[(r["D"], r["backend"], r["causal"])].append((r["Lq"], r))
    return doc.get("machine", {}), series


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="the sweep's JSON (flashattn bench --sweep --out PREFIX writes PREFIX.json)")
    ap.add_argument("png", help="the picture to write")
    ap.add_argument("--pass", dest="pass_", default="fwd", help="fwd, bwd or fwd+bwd (default fwd)")
    args = ap.parse_args()

    machine, series = load(args.json, args.pass_)
    if not series:
        sys.exit(f"plot.py: no '{args.pass_}' results in {args.json}")
    dims = sorted({d for d, _, _ in series})
    floor_mib = 1.0 / 16  # RSS is page-granular and small scratch reuses resident pages
    fig, axes = plt.subplots(2, len(dims), figsize=(6 * len(dims), 8), squeeze=False, sharex=True)
    for col, D in enumerate(dims):
        top, bottom = axes[0][col], axes[1][col]
        peaks = set()
        for (d, backend, causal), pts in sorted(series.items()):
            if d != D:
                continue
            pts.sort(key=lambda p: p[0])
            ok = [(L, r) for L, r in pts if r["status"] == "ok"]
            style = dict(color=COLORS.get(backend, None), linestyle="--" if causal else "-", marker="o", ms=4)
            label = f"{backend}{' causal' if causal else ''}"
            if ok:
                top.plot([L for L, _ in ok], [r["gflops"] for _, r in ok], label=label, **style)
                mem = [(L, r["extra_bytes"]) for L, r in ok if r.get("extra_bytes") is not None]
                bottom.plot([L for L, _ in mem], [max(m / 2**20, floor_mib) for _, m in mem], **style)
                peaks.update((r["isa"], r["threads"], r["peak_gflops"]) for _, r in ok if r.get("peak_gflops"))
            skipped = [L for L, r in pts if r["status"] == "skipped"]
            if skipped:
                limit_mib = machine.get("eager_mem_limit", 2**30) / 2**20
                bottom.plot(skipped, [limit_mib] * len(skipped), linestyle="none", marker="x", ms=9,
                            color=style["color"])
        for isa, threads, pk in sorted(peaks)[:1]:
            top.axhline(pk, color="black", linestyle=":", linewidth=1)
            top.annotate(f"measured FP32 peak ({isa}, {threads} thread{'s' if threads > 1 else ''})", (0.01, pk),
                         xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
        top.set_title(f"D = {D}, {args.pass_}")
        top.set_ylabel("GFLOP/s (standard count)")
        top.set_xscale("log", base=2)
        top.set_ylim(bottom=0)
        top.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8, loc="lower right")
        bottom.set_ylabel("peak extra memory of the call (MiB)")
        bottom.set_xlabel("sequence length L  (x: eager skipped, S and P over --mem-limit)")
        bottom.set_xscale("log", base=2)
        bottom.set_yscale("log")
        bottom.set_ylim(bottom=floor_mib / 2)
        bottom.axhline(floor_mib, color="gray", linewidth=0.5)
        bottom.annotate("64 KiB and below (page-granular measure)", (0.01, floor_mib), xycoords=("axes fraction", "data"),
                        va="bottom", fontsize=7, color="gray")
        bottom.grid(True, which="both", alpha=0.3)
    threads = sorted({r["threads"] for pts in series.values() for _, r in pts if r.get("threads")})
    heads = sorted({r["Hq"] for pts in series.values() for _, r in pts})
    title = (f"flashattn bench --sweep on {machine.get('cpu', 'this machine')}: "
             f"{'/'.join(map(str, heads))} head(s), f32, {'/'.join(map(str, threads))} thread(s)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
