"""Reads Nsight Compute's source page of one kernel (CSV with the SASS:
`ncu --import R.ncu-rep --page source --csv --print-source sass`, plain or
gzipped; scripts/gpu/ncu_source.sh makes it) and says where the warps'
samples fall: the total by stall reason; for a warp-specialized kernel
(one with setmaxnreg) the same by role, split at the SASS lines where the
consumers raise their registers and the producer lowers them, and the
consumers' samples by opcode; then the instructions with the most samples.

A sample is a warp seen at an instruction, issuing (selected) or stalled
for a reason; a producer warp waiting at an mbarrier is sampled like a
consumer at work, so the roles' shares say where the warps are, the
consumers' opcodes what they are busy with.

usage: python3 bench/gpu/ncu_source_summary.py SOURCE.csv[.gz] [TOP]
"""

import collections
import csv
import gzip
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    # the header is the first row naming the SASS column; ncu may print a
    # kernel line or two before it
    h = next(i for i, r in enumerate(rows) if any(c.strip() in ("Source", "SASS") for c in r))
    head = [c.strip() for c in rows[h]]
    return head, [r for r in rows[h + 1 :] if len(r) == len(head)]


def num(r, i):
    try:
        return float(r[i].replace(",", ""))
    except (ValueError, IndexError):
        return 0.0


def opcode(sass):
    words = [w for w in sass.split() if not w.startswith("@")]
    if not words:
        return "?"
    if "DEPBAR" in sass:
        return "WARPGROUP.DEPBAR"  # waiting for the warpgroup's wgmma
    if "TRYWAIT" in sass:
        return "SYNCS.TRYWAIT"  # an mbarrier wait
    return words[0].split(".")[0]


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    head, body = load(path)
    col = {c: i for i, c in enumerate(head)}
    src = col.get("Source", col.get("SASS"))
    addr = col.get("Address", 0)
    samp = next((col[c] for c in col if c.startswith("Warp Stall Sampling (All")), None)
    if samp is None:
        print("no 'Warp Stall Sampling (All Samples)' column; columns:", ", ".join(head))
        return
    reasons = [c for c in col if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(num(r, samp) for r in body)
    print("%d SASS lines, %.0f warp samples" % (len(body), total))

    def by_reason(lines):
        s = sum(num(body[i], samp) for i in lines)
        rs = collections.Counter()
        for i in lines:
            for c in reasons:
                rs[c] += num(body[i], col[c])
        return s, ", ".join("%s %.0f%%" % (c[len("stall_") :], 100 * v / max(s, 1)) for c, v in rs.most_common(8))

    _, all_reasons = by_reason(range(len(body)))
    print("by stall reason (share of all samples): " + all_reasons)

    sass = [r[src].strip() for r in body]
    alloc = next((i for i, s in enumerate(sass) if "SETMAXREG" in s and "DEALLOC" not in s), None)
    dealloc = next((i for i, s in enumerate(sass) if "SETMAXREG" in s and "DEALLOC" in s), None)
    if alloc is not None and dealloc is not None and alloc < dealloc:
        roles = (
            ("before the roles", range(0, alloc)),
            ("consumers", range(alloc, dealloc)),
            ("producer", range(dealloc, len(body))),
        )
        for name, lines in roles:
            s, rs = by_reason(lines)
            print("  %-16s %5.1f%% of samples; %s" % (name, 100 * s / max(total, 1), rs))
        ops = collections.Counter()
        for i in range(alloc, dealloc):
            ops[opcode(sass[i])] += num(body[i], samp)
        cs = sum(ops.values())
        print(
            "  consumers' samples by opcode: "
            + ", ".join("%s %.1f%%" % (k, 100 * v / max(cs, 1)) for k, v in ops.most_common(16))
        )

    print("top instructions by samples (share, line, address, SASS, the two main reasons):")
    for i in sorted(range(len(body)), key=lambda i: -num(body[i], samp))[:top]:
        rs = sorted(((num(body[i], col[c]), c) for c in reasons), reverse=True)[:2]
        why = ", ".join("%s %.0f" % (c[len("stall_") :], v) for v, c in rs if v > 0)
        print(
            "  %5.2f%%  %5d  %s  %s  [%s]"
            % (100 * num(body[i], samp) / max(total, 1), i, body[i][addr], sass[i][:90], why)
        )


if __name__ == "__main__":
    main()
