#!/usr/bin/env python3
"""Where a kernel's cycles and shared-memory traffic go, per SASS instruction, from Nsight
Compute's source counters.

On the GPU machine (scripts/dev/ncu_src.sh does this):
    ncu --clock-control none --kernel-name-base demangled -k regex:KERNELS --launch-count N \\
        --section SourceCounters -o rep ./program ...
    ncu --import rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 scripts/ncu_source.py src.csv [top]

For each profiled kernel: its warp-stall samples by reason, the shared-memory wavefronts by
opcode (wgmma's operand reads are counted there; TMA's writes into shared memory are not: see
dev/RESULTS.md, "shared-memory bandwidth"), and the `top` instructions (default 12) with the
most stall samples and their main reasons. Each launch is reported; ncu lists the source page
twice per kernel (all samples, then the not-issued ones), and the first is read.
"""
import csv
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(path):
    """The kernels of a source-page CSV: [(name, header, rows)], one per "Kernel Name" line."""
    out, cur = [], None
    for r in csv.reader(open(path, newline="")):
        if r and r[0] == "Kernel Name":
            cur = [r[1] if len(r) > 1 else "?", None, []]
            out.append(cur)
        elif cur is not None and r and r[0] == "Address":
            cur[1] = r
        elif cur is not None and cur[1] is not None and len(r) == len(cur[1]):
            cur[2].append(r)
    return [k for k in out if k[1] is not None]


def opcode(src):
    words = src.strip().split()
    if not words:
        return "?"
    if words[0].startswith("@") and len(words) > 1:
        words = words[1:]
    return words[0].rstrip(";")


def report(name, head, rows, top):
    col = {n: i for i, n in enumerate(head)}
    need = ["Source", "Warp Stall Sampling (All Samples)", "L1 Wavefronts Shared", "Instructions Executed"]
    missing = [n for n in need if n not in col]
    if missing:
        print(f"== {name[:100]}: no {', '.join(missing)} column (was --section SourceCounters given?)")
        return
    stalls = [n for n in head if n.startswith("stall_") and "Not Issued" not in n]
    samples = sum(num(r[col[need[1]]]) for r in rows)
    wf = sum(num(r[col[need[2]]]) for r in rows)
    print(f"== {name[:110]}")
    print(f"   stall samples {samples:.0f}, shared-memory wavefronts {wf:.4g}")
    if samples > 0:
        by = {n: sum(num(r[col[n]]) for r in rows) for n in stalls}
        print("   stalls: " + ", ".join(f"{n[6:]} {100 * v / samples:.1f}%"
                                       for n, v in sorted(by.items(), key=lambda x: -x[1]) if v / samples >= 0.01))
    ops = {}
    for r in rows:
        w = num(r[col[need[2]]])
        if w > 0:
            o = ops.setdefault(opcode(r[col["Source"]]).split(".")[0], [0.0, 0.0])
            o[0] += w
            o[1] += num(r[col[need[3]]])
    if ops:
        print("   | opcode | wavefronts | instructions | a warp's instruction |")
        for o, (w, n) in sorted(ops.items(), key=lambda x: -x[1][0]):
            print(f"   | {o} | {w:.4g} | {n:.4g} | {w / max(n, 1):.2f} |")
    if samples > 0:
        print(f"   | stall % | instruction | main reasons |")
        for r in sorted(rows, key=lambda r: -num(r[col[need[1]]]))[:top]:
            s = num(r[col[need[1]]])
            why = " ".join(f"{n[6:]}={100 * num(r[col[n]]) / s:.0f}%" for n in stalls if num(r[col[n]]) >= 0.2 * s)
            print(f"   | {100 * s / samples:.1f} | {r[col['Source']].strip()[:70]} | {why} |")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    ks = kernels(sys.argv[1])
    if not ks:
        sys.exit("FAIL: no kernels with a source page in " + sys.argv[1])
    seen = set()
    for name, head, rows in ks:
        # the source page comes twice per launch (all samples, then not-issued): take the first
        key = (name, len(rows), sum(num(r[head.index("Instructions Executed")]) for r in rows)
               if "Instructions Executed" in head else 0)
        if key in seen:
            continue
        seen.add(key)
        report(name, head, rows, top)
    print(f"OK: {len(seen)} kernels")


if __name__ == "__main__":
    main()
