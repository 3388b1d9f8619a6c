#!/usr/bin/env python3
"""A training step's timeline from dev/ktrace.c's file: how long the GPU is busy, where it waits,
and the time per kernel family, at the clocks the step ran at.

    KTRACE_OUT=trace.tsv LD_PRELOAD=build/libktrace.so ./train_gpt -e qwen2.5-0.5b -b 32 -x 12 -v 0 -s 0
    python3 scripts/ktrace_report.py trace.tsv [--skip N] [--step-end REGEX] [--detail REGEX] [--gaps K]
    python3 scripts/ktrace_report.py ours.tsv llmq.tsv ...     # the families side by side

A step ends with its optimizer's kernels (REGEX, default "adamw": train_gpt's and llm.q's); a
step runs from the end of the previous step's last optimizer kernel to the end of its own. The
first --skip steps (default 2: setup, autotuning, warm-up) are left out; the figures are medians
over the rest (the family times: means). busy is the union of every kernel, copy and memset
interval; idle = step - busy is time the GPU had nothing to run (the host was late: launches,
syncs, reading a batch). The LM head is one family, all of its kernels (flce's call; llm.q's
logits GEMM, classifier and gradient GEMMs), so that the linear layers' GEMMs are the
transformer's alone. --gaps K lists the K longest idle stretches of the median step with
the kernels on either side; --detail REGEX lists the kernels of the matching families.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_step import FAMILIES, print_kernel_groups  # noqa: E402 (one list of families for both reports)


def read(path):
    recs = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            p = line.rstrip("\n").split("\t")
            if len(p) != 7 or p[0] not in "KCS":
                sys.exit(f"ktrace_report.py: {path}:{ln}: not a ktrace record")
            recs.append((int(p[1]), int(p[2]), p[0], p[3], p[4], p[5], p[6]))
    recs.sort()
    return recs


def demangler(names):
    """Readable kernel names through c++filt where the machine has it; else the names as given."""
    names = sorted(set(names))
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return {n: (out[i] if i < len(out) and out[i] else n) for i, n in enumerate(names)}


def short(name):
    """A kernel's name without its parameter list (its template arguments kept: they tell our
    GEMM's instances apart)."""
    depth = 0
    for i, c in enumerate(name):
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            name = name[:i]
            break
    return name.removeprefix("void ")[:90]


def family(name):
    return next((f for f, p in FAMILIES if re.search(p, name)), "other: " + short(name))


def busy_ns(iv):
    """Length of the union of intervals (sorted by start)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def analyse(recs, names, skip=2, step_end="adamw"):
    """The steps of a timeline (records sorted by start): a list of (step ns, busy ns, records,
    start, end) for the steps after the first `skip`; exits if there are too few."""
    end_re = re.compile(step_end)
    # the last optimizer kernel of each run of them (up to 8 others may sit between two: a norm)
    opt = [i for i, r in enumerate(recs) if r[2] == "K" and end_re.search(names[r[6]])]
    ends = [i for k, i in enumerate(opt) if k + 1 == len(opt) or opt[k + 1] - i > 9]
    if len(ends) < skip + 2:
        sys.exit(f"ktrace_report.py: {len(ends)} steps found (ending with {step_end!r}); "
                 f"need more than --skip {skip} + 1")
    steps = []
    for k in range(skip + 1, len(ends)):
        lo, hi = ends[k - 1], ends[k]
        t0, t1 = recs[lo][1], recs[hi][1]
        body = recs[lo + 1:hi + 1]
        iv = [(max(r[0], t0), min(r[1], t1)) for r in body if r[1] > t0]
        steps.append((t1 - t0, busy_ns(iv), body, t0, t1))
    return steps, len(ends)


HEAD = "LM head, every kernel of it (its GEMMs included)"


def head_window(body, names):
    """The LM head's records of a step, as a range of indices into body (None if not found):
    flce's call from its first kernel to its last (its cuBLASLt GEMMs with it), or llm.q's
    logits GEMM, classifier, d_W and d_h GEMMs and loss sum (the launches around its
    fused_classifier kernel)."""
    ks = [i for i, r in enumerate(body) if r[2] == "K"]
    nm = [names[body[i][6]] for i in ks]
    first = next((k for k, n in enumerate(nm) if "flce_prepare" in n), None)
    if first is not None:
        last = next((k for k in range(len(nm) - 1, first - 1, -1) if "flce_finalize" in nm[k]), None)
        return None if last is None else range(ks[first], ks[last] + 1)
    c = next((k for k, n in enumerate(nm) if "fused_classifier" in n), None)
    if c is None or c < 1 or c + 3 >= len(nm) or "grouped_loss_sum" not in nm[c + 3]:
        return None
    return range(ks[c - 1], ks[c + 3] + 1)


def families(steps, names):
    """{family: (launches, ns)} summed over the steps; the LM head's kernels (head_window) as
    one family of their own."""
    fam = {}
    for _, _, body, _, _ in steps:
        head = head_window(body, names) or range(0)
        for j, r in enumerate(body):
            if j in head and r[2] == "K":
                f = HEAD
            else:
                f = family(names[r[6]]) if r[2] == "K" else ("copies" if r[2] == "C" else "memsets")
            c, t = fam.get(f, (0, 0))
            fam[f] = (c + 1, t + r[1] - r[0])
    return fam


def idle_stretches(step):
    """(idle ns, at ns from the step's start, the record before, the record after), longest first."""
    _, _, body, t0, _ = step
    gaps, last_end, prev = [], t0, None
    for r in body:
        if r[0] > last_end:
            gaps.append((r[0] - last_end, r[0] - t0, prev, r))
        if r[1] > last_end:
            last_end, prev = r[1], r
    return sorted(gaps, key=lambda g: -g[0])


def medians(steps):
    """The median step's length and the median busy time, in ms."""
    return statistics.median(s[0] for s in steps) / 1e6, statistics.median(s[1] for s in steps) / 1e6


def compare(paths, skip, step_end):
    """Several timelines side by side: the median step, the GPU's idle time and each family's
    ms a step, one column a timeline; families largest first."""
    cols = []
    for path in paths:
        recs = read(path)
        names = demangler([r[6] for r in recs if r[2] == "K"])
        steps, _ = analyse(recs, names, skip, step_end)
        n = len(steps)
        col = {f: t / n / 1e6 for f, (_, t) in families(steps, names).items()}
        wall, busy = medians(steps)
        col["step (median)"], col["GPU idle (median)"] = wall, wall - busy
        cols.append(col)
    rows = ["step (median)", "GPU idle (median)"]
    rows += sorted({f for c in cols for f in c} - set(rows), key=lambda f: -max(c.get(f, 0.0) for c in cols))
    print("| ms a step | " + " | ".join(paths) + " |\n" + "|---" * (len(paths) + 1) + "|")
    for f in rows:
        print(f"| {f} | " + " | ".join(f"{c.get(f, 0.0):.2f}" for c in cols) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", nargs="+", help="a timeline; several: their families side by side")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--step-end", default="adamw")
    ap.add_argument("--detail")
    ap.add_argument("--gaps", type=int, default=5)
    a = ap.parse_args(argv)
    if len(a.trace) > 1:
        compare(a.trace, a.skip, a.step_end)
        return
    a.trace = a.trace[0]
    recs = read(a.trace)
    names = demangler([r[6] for r in recs if r[2] == "K"])
    steps, n_ends = analyse(recs, names, a.skip, a.step_end)
    walls = [s[0] for s in steps]
    med = sorted(range(len(steps)), key=lambda i: walls[i])[len(steps) // 2]
    wall, busy = medians(steps)
    n_k = statistics.median(sum(r[2] == "K" for r in s[2]) for s in steps)
    print(f"{a.trace}: steps {a.skip + 2}..{n_ends} of {n_ends} ({len(steps)}), medians: step {wall:.2f} ms, "
          f"GPU busy {busy:.2f} ms ({100 * busy / wall:.1f}%), idle {wall - busy:.2f} ms, {n_k:.0f} kernels a step\n")
    fam = families(steps, names)
    n = len(steps)
    total = sum(t for _, t in fam.values()) / n / 1e6
    print(f"| family | a step | ms a step | share of kernel time ({total:.2f} ms) |\n|---|---|---|---|")
    for f, (c, t) in sorted(fam.items(), key=lambda x: -x[1][1]):
        print(f"| {f} | {c / n:.0f} | {t / n / 1e6:.2f} | {100 * t / n / 1e6 / total:.1f}% |")
    if a.gaps > 0:
        gaps = idle_stretches(steps[med])
        print(f"\nthe median step's {a.gaps} longest idle stretches (of {len(gaps)}; "
              f"{sum(g[0] for g in gaps) / 1e6:.2f} ms in all)\n")
        print("| idle us | at ms | after | before |\n|---|---|---|---|")
        for g, at, p, r in gaps[:a.gaps]:
            pn = short(names.get(p[6], p[6])) if p else "(step start)"
            print(f"| {g / 1e3:.1f} | {at / 1e6:.2f} | {pn} | {short(names.get(r[6], r[6]))} |")
    if a.detail:
        groups = {}
        for _, _, body, _, _ in steps:
            for r in body:
                if r[2] == "K" and re.search(a.detail, family(names[r[6]])):
                    key = (short(names[r[6]]), r[4], r[5])
                    c, t = groups.get(key, (0, 0.0))
                    groups[key] = (c + 1, t + (r[1] - r[0]) / 1e6)
        print_kernel_groups(groups, f"kernels of the families matching {a.detail!r}, a step, in launch order", n)


if __name__ == "__main__":
    main()
