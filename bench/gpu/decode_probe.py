"""Where a decode call's time goes, for bench/gpu/decode.py's --trace and
--api rows (both print lines; neither times anything decode.py reports).

--trace: a build configured with -DFA_CUDA_DECODE_TRACE=ON writes, per
block of the decode and combine kernels, the global timer at a few marks
(src/cuda/decode_trace.cuh). After `calls` back-to-back calls the tables
hold the last call's blocks (each call's grid overwrites the same rows);
this prints their times in us from the first decode block's start: when the
blocks start, when their first K/V tile is in, when their last tile is
done (the spread of these ends is the kernel's tail), and the combine's
stages after the last decode block.

--api: the CUDA runtime calls our call makes on the host (the profiler's
CPU-side runtime events), mean us per call each, and the call's wall time
on the host when nothing waits for the GPU.
"""

import ctypes as C
import statistics
import time

import torch

SLOTS = 16  # decode_trace.cuh: kTraceSlots and the marks
START, FIRST, LOOP_END, STATES, STORED, SM, MERGE_START, MERGE_WEIGHTS, MERGE_VALUES, END, TIMER = range(11)
DECODE_MARKS = (
    ("second timer read", TIMER),
    ("first tile in", FIRST),
    ("loop end", LOOP_END),
    ("states in smem", STATES),
    ("stored", STORED),
    ("merge start", MERGE_START),
    ("merge weights", MERGE_WEIGHTS),
    ("merge values in", MERGE_VALUES),
    ("end", END),
)
COMBINE_MARKS = (
    ("start", START),
    ("wait returned", FIRST),
    ("weights", MERGE_WEIGHTS),
    ("values in", MERGE_VALUES),
    ("end", END),
)
TRACE_BLOCKS = 16384


def _reader(lib, name):
    try:
        f = getattr(lib, "fa__cuda_decode_trace_" + name)
    except AttributeError:
        return None
    f.argtypes = [C.c_void_p, C.c_int]
    f.restype = C.c_int
    return f


def _rows(read):
    buf = (C.c_ulonglong * (TRACE_BLOCKS * SLOTS))()
    if read(buf, TRACE_BLOCKS) != 0:
        raise RuntimeError("reading the decode trace failed")
    rows = [list(buf[i * SLOTS : (i + 1) * SLOTS]) for i in range(TRACE_BLOCKS)]
    return [r for r in rows if r[START] != 0]


def _spread(xs):
    xs = sorted(xs)
    if not xs:
        return "-"
    q = lambda f: xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]  # noqa: E731
    return "%6.1f %6.1f %6.1f %6.1f %6.1f" % (xs[0], q(0.1), q(0.5), q(0.9), xs[-1])


def trace_lines(lib, fn, calls=5, dtype="bf16", dump=None):
    """The last of `calls` back-to-back calls of fn, block by block (dump: a
    path for the raw marks as CSV, ns from the first block's start); one line
    saying so when lib is not a trace build."""
    dec, comb = _reader(lib, dtype), _reader(lib, "combine")
    if dec is None or comb is None:
        return ["(no trace: the library was not built with FA_CUDA_DECODE_TRACE=ON)"]
    torch.cuda.synchronize()
    for r in (dec, comb):
        if r(None, 0) != 0:
            raise RuntimeError("clearing the decode trace failed")
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    d, c = _rows(dec), _rows(comb)
    if not d:
        return ["(no decode block traced)"]
    t0 = min(r[START] for r in d)
    us = lambda r, k: (r[k] - t0) / 1000.0  # noqa: E731
    if dump:
        with open(dump, "w") as f:
            cols = (("start", START),) + DECODE_MARKS
            f.write("kernel,block,sm," + ",".join(n.replace(" ", "_") for n, _ in cols) + "\n")
            for kind, rows in (("decode", d), ("combine", c)):
                for i, r in enumerate(rows):
                    ts = ("%d" % (r[k] - t0) if r[k] else "" for _, k in cols)
                    f.write("%s,%d,%d,%s\n" % (kind, i, r[SM], ",".join(ts)))
    per_sm = {}
    for r in d:
        per_sm.setdefault(r[SM], []).append(r)
    hist = {}
    for rs in per_sm.values():
        hist[len(rs)] = hist.get(len(rs), 0) + 1
    out = [
        "trace of the last of %d calls: %d decode blocks on %d SMs (%s), %d combine blocks; us from the first "
        "decode block's start, min p10 p50 p90 max:"
        % (calls, len(d), len(per_sm), ", ".join("%d SMs x %d" % (n, k) for k, n in sorted(hist.items())), len(c))
    ]
    # a mark's blocks: those that reach it in this call (tiles, the fused merge's last ones; a block that merged in
    # an earlier call but not in this one keeps that call's merge marks, older than its start)
    for name, k in DECODE_MARKS:
        xs = [us(r, k) for r in d if r[k] >= r[START]]
        if xs:
            out.append("  decode %-17s %s  (%d blocks)" % (name, _spread(xs), len(xs)))
    last_end = max(us(r, END) for r in d)
    d = [r for r in d if r[FIRST] != 0]  # below: blocks with keys (a split past the keys has no tile)
    loop = [(r[LOOP_END] - r[FIRST]) / 1000.0 for r in d]
    out.append("  decode loop time   %s" % _spread(loop))
    by_load = {}
    for rs in per_sm.values():
        for r in (r for r in rs if r[FIRST] != 0):
            by_load.setdefault(len(rs), []).append((r[LOOP_END] - r[FIRST]) / 1000.0)
    for n, xs in sorted(by_load.items()):
        out.append(
            "    loop time on SMs with %d block(s): median %.1f us (%d blocks)" % (n, statistics.median(xs), len(xs))
        )
    if c:
        for name, k in COMBINE_MARKS:
            xs = [us(r, k) for r in c if r[k] >= r[START]]
            if xs:
                out.append("  combine %-16s %s" % (name, _spread(xs)))
        out.append(
            "  the call: last decode block ends at %.1f, the combine's last block at %.1f (tail %.1f us)"
            % (last_end, max(us(r, END) for r in c), max(us(r, END) for r in c) - last_end)
        )
    else:
        out.append("  the call: last decode block ends at %.1f us" % last_end)
    return out


def api_lines(fn, calls=50):
    """Mean host us per call of each CUDA runtime call fn makes, and fn's
    wall time per call on the host over `calls` calls queued without a wait."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    api = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CPU") and e.name.startswith("cu"):
            api.setdefault(e.name, []).append(e.time_range.end - e.time_range.start)
    parts = sorted(((sum(v) / calls, len(v) / calls, k) for k, v in api.items() if k != "cudaDeviceSynchronize"),
                   reverse=True)  # fmt: skip
    line = ", ".join("%s %.1f us x%.0f" % (k, us, n) for us, n, k in parts) or "(no runtime events recorded)"
    return ["host per call: %.1f us wall (%d calls queued); runtime calls: %s" % (wall, calls, line)]
