#!/usr/bin/env python3
"""CPU test of scripts/ktrace_report.py on a timeline written here (dev/ktrace.c's format): steps
found by their optimizer kernels, the busy time as the union of overlapping kernels on two
streams, the idle stretches, the kernel families, the LM head's kernels found (flce's call,
llm.q's), a malformed line refused; and
build/libktrace.so loaded into a program without KTRACE_OUT set, or not the KTRACE_EXE one, where
it must do nothing. No GPU. The last line is "N passed, M failed".

    python3 test/test_ktrace_report.py [build/libktrace.so]      (from the repository root; without
                                                                 the library, its checks are skipped)
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile

from script_check import Checks, load_script

kr = load_script("ktrace_report")
check = Checks()

US = 1000  # ns


def timeline():
    """Five steps of 100 us: a forward kernel (0-30), an attention kernel overlapping it on a
    second stream (20-40), ten short kernels on a third (20-30), idle 40-50 (step 3's flce runs 60-70: idle 40-60 and 70-80), a
    flce kernel (50-80), a copy (80-85), idle, two optimizer kernels (90-95, 95-100)."""
    lines = []
    for s in range(5):
        t = s * 100 * US
        late = 10 * US if s == 3 else 0
        # ten short kernels on a third stream, inside the busy time: a step's many launches
        rows = [("K", 20 + i, 21 + i, 11, "rope_kernel") for i in range(10)]
        rows += [("K", 0, 30, 7, "rmsnorm_forward_kernel"), ("K", 20, 40, 9, "att90_fwd_kernel"),
                ("K", 50, 80, 7, "flce_logits_kernel"), ("C", 80, 85, 7, "copy DtoH 8 B"),
                ("K", 90, 95, 7, "adamw_kernel"), ("K", 95, 100, 7, "adamw_kernel")]
        for kind, a, b, stream, name in rows:
            a, b = t + a * US, t + b * US
            if name.startswith("flce"):
                a += late
                b = max(a, b - late)
            grid = "132,1,1" if kind == "K" else "-"
            lines.append(f"{kind}\t{a}\t{b}\t{stream}\t{grid}\t{grid if kind == 'K' else '-'}\t{name}\n")
    return "".join(lines)


def main():
    print("scripts/ktrace_report.py")
    with tempfile.TemporaryDirectory(prefix="test_ktrace_") as tmp:
        path = os.path.join(tmp, "trace.tsv")
        with open(path, "w") as f:
            f.write(timeline())
        recs = kr.read(path)
        names = {r[6]: r[6] for r in recs}
        steps, n_ends = kr.analyse(recs, names, skip=1)
        check(n_ends == 5 and len(steps) == 3, "5 steps found, 3 after --skip 1 and the first (%d, %d)"
              % (n_ends, len(steps)))
        check(all(s[0] == 100 * US for s in steps), "each step 100 us, end to end")
        # step 2 (the first kept): the previous optimizer's end (t=100) to its own (t=200); busy:
        # 0-40 (two streams overlapping), 50-85, 90-100 = 85 us
        check(steps[0][1] == 85 * US, "busy as the union of overlapping kernels: %d us" % (steps[0][1] // US))
        check(steps[1][1] == 65 * US, "the late step's busy time: %d us" % (steps[1][1] // US))
        gaps = kr.idle_stretches(steps[1])
        check([g[0] // US for g in gaps] == [20, 10, 5] and gaps[0][3][6] == "flce_logits_kernel",
              "idle stretches, longest first, with the kernel after each: %s" % [g[0] // US for g in gaps])
        fam = kr.families(steps, names)
        check(fam.get("AdamW") == (6, 30 * US), "AdamW: 2 launches a step, 10 us: %s" % (fam.get("AdamW"),))
        check(fam.get("attention forward", (0, 0))[0] == 3 and fam.get("copies", (0, 0))[0] == 3,
              "the families by profile_step.py's patterns, copies apart")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            kr.main([path, "--skip", "1", "--detail", "flce"])
        text = out.getvalue()
        check("step 100.00 ms" not in text and "step 0.10 ms" in text and "flce_logits_kernel" in text,
              "the report prints the median step and the detail table")
        # the LM head as one family: flce's call from flce_prepare to flce_finalize, a cuBLASLt
        # GEMM inside it counted with it, one outside it with the linear layers
        head = [(0, 1, "K", "7", "-", "-", "nvjet_sm90_tst_TNN"), (1, 2, "K", "7", "-", "-", "flce_prepare_kernel"),
                (2, 5, "K", "7", "-", "-", "nvjet_sm90_tst_NTN"), (5, 6, "K", "7", "-", "-", "flce_finalize_kernel"),
                (6, 8, "K", "7", "-", "-", "nvjet_sm90_tst_NNT")]
        hn = {r[6]: r[6] for r in head}
        w = kr.head_window(head, hn)
        fam = kr.families([(8, 8, head, 0, 8)], hn)
        check(w == range(1, 4) and fam[kr.HEAD] == (3, 5) and fam["matmul GEMMs (cuBLASLt and ours)"] == (2, 3),
              "flce's call as the LM head family (3 kernels, 5 ns), the GEMMs outside it as linear layers")
        lq = [(0, 1, "K", "7", "-", "-", "nvjet_TNN"), (1, 2, "K", "7", "-", "-", "fused_classifier_tma_kernel"),
              (2, 3, "K", "7", "-", "-", "nvjet_NTN"), (3, 4, "K", "7", "-", "-", "nvjet_NNN"),
              (4, 5, "K", "7", "-", "-", "grouped_loss_sum_kernel"), (5, 6, "K", "7", "-", "-", "rmsnorm_backward")]
        check(kr.head_window(lq, {r[6]: r[6] for r in lq}) == range(0, 5),
              "llm.q's head: the logits GEMM, classifier, d_W and d_h GEMMs and the loss sum")
        check(kr.head_window(lq[:3], {r[6]: r[6] for r in lq}) is None, "no head found in a cut timeline")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            kr.main([path, path, "--skip", "1"])
        rows = out.getvalue().splitlines()
        check(len(rows) > 4 and rows[2] == "| step (median) | 0.10 | 0.10 |" and "| AdamW | 0.01 | 0.01 |" in rows,
              "two timelines side by side: %s" % rows[2:4])
        bad = os.path.join(tmp, "bad.tsv")
        with open(bad, "w") as f:
            f.write("K\t1\t2\t7\n")
        try:
            kr.read(bad)
            check(False, "a short line refused")
        except SystemExit as e:
            check("bad.tsv:1: not a ktrace record" in str(e.code), "a short line refused: %s" % e.code)
        try:
            kr.analyse(recs[:40], names, skip=2)
            check(False, "too few steps refused")
        except SystemExit as e:
            check("2 steps found" in str(e.code), "too few steps refused: %s" % e.code)
    lib = sys.argv[1] if len(sys.argv) > 1 else None
    if lib is None:
        print("  (no build/libktrace.so: the toolkit has no CUPTI; the library's checks skipped)")
    elif os.path.exists(lib):
        env = dict(os.environ, LD_PRELOAD=os.path.abspath(lib))
        env.pop("KTRACE_OUT", None)
        r = subprocess.run(["sh", "-c", "echo loaded"], env=env, capture_output=True, text=True)
        check(r.returncode == 0 and r.stdout == "loaded\n" and "ktrace" not in r.stderr,
              "libktrace.so without KTRACE_OUT does nothing (rc %d, %r)" % (r.returncode, r.stderr[:80]))
        with tempfile.TemporaryDirectory(prefix="test_ktrace_") as tmp:
            bad_out = os.path.join(tmp, "no_such_dir", "t.tsv")
            r = subprocess.run(["sh", "-c", "echo loaded"], env=dict(env, KTRACE_OUT=bad_out), capture_output=True,
                               text=True)
            check(r.returncode == 1 and r.stdout == "" and "cannot open KTRACE_OUT=" + bad_out in r.stderr,
                  "an unwritable KTRACE_OUT: exit 1 before the program runs, naming the path (%r)" % r.stderr[:90])
            out = os.path.join(tmp, "t.tsv")
            env.update(KTRACE_OUT=out, KTRACE_EXE="train_gpt")
            r = subprocess.run(["sh", "-c", "echo loaded"], env=env, capture_output=True, text=True)
            check(r.returncode == 0 and r.stdout == "loaded\n" and not os.path.exists(out),
                  "KTRACE_EXE=train_gpt: another program (sh) not traced, no file written (rc %d, %r)"
                  % (r.returncode, r.stderr[:80]))
    else:
        check(False, "%s not built" % lib)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
