#!/usr/bin/env python3
"""CPU test of dev/flce_plans (the planner's choices without a GPU): its table at a Llama / Qwen
head (the lean plan of Qwen2.5-1.5B: chunks of 1280 tokens in 3 vocabulary tiles), --check's
count, the cuBLASLt path's plan (--sms 0), a forced plan (--chunk, --vtile, --side), and every
refused argument (a bad shape, budget or
config, an unknown option): a message naming it on stderr, exit 2, nothing on stdout. The last
line is "N passed, M failed".

    python3 test/test_flce_plans.py [build/flce_plans]      (from the repository root)
"""
import os
import subprocess
import sys

from script_check import ROOT, Checks

check = Checks()


def run(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True)


def row(out, shape, mib):
    for ln in out.splitlines():
        cells = [c.strip() for c in ln.split("|")]
        if len(cells) > 3 and cells[1] == shape and cells[2] == str(mib):
            return cells
    return None


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "flce_plans")
    print("dev/flce_plans")
    if not os.path.exists(tool):
        check(False, "%s not built" % tool)
        return check.summary()
    r = run(tool, "-s", "32768x1536x151936,65535x1024x176245", "-b", "160,1024", "--check")
    c = row(r.stdout, "32768x1536x151936", 160)
    check(r.returncode == 0 and c is not None and c[3:7] == ["1280", "26", "50688", "3"] and c[9] == "direct",
          "32768x1536x151936 in 160 MiB: chunks of 1280 tokens (26) in 3 tiles of 50688, direct (%s)" % c)
    c = row(r.stdout, "65535x1024x176245", 1024)
    check(c is not None and c[3:5] == ["2816", "24"] and float(c[7]) < 1024,
          "65535x1024x176245 in 1 GiB: chunks of 2816 (24) in less than the budget (%s)" % c)
    check("0 plan(s) differ from their workspace's" in r.stdout and r.stdout.count("| the same |") == 4,
          "--check: each plan made again from its workspace is the same")
    r = run(tool, "-s", "8192x768x50304", "-b", "1024", "--sms", "0")
    c = row(r.stdout, "8192x768x50304", 1024)
    check(r.returncode == 0 and c is not None and c[3:5] == ["4096", "2"] and c[9] == "the cuBLASLt path",
          "--sms 0: the cuBLASLt path's plan (chunks of 4096 at 8192x768x50304 in 1 GiB) (%s)" % c)
    # a forced plan: the chunk cap, the vocabulary tile and no side by side, as flce_bench's options
    r = run(tool, "-s", "16384x2048x128256", "-b", "160", "--chunk", "1024", "--vtile", "64128", "--side", "0")
    c = row(r.stdout, "16384x2048x128256", 160)
    check(r.returncode == 0 and c is not None and c[3:7] == ["1024", "16", "64128", "2"] and c[9] == "direct",
          "--chunk 1024 --vtile 64128 --side 0: chunks of 1024 in 2 tiles, one after the other (%s)" % c)
    refused = [(["-s", "foo"], "bad shape 'foo'"), (["-s", "100x64x1001x3"], "bad shape"),
               (["-b", "0"], "bad budget '0'"), (["-b", "12x"], "bad budget '12x'"),
               (["-s", "1000x100x5003"], "hidden = 100"), (["--sms"], "unknown option or a missing value: --sms"),
               (["--sms", "-1"], "bad --sms '-1'"), (["--sms", "abc"], "bad --sms 'abc'"), (["-x"], "unknown option or a missing value: -x"),
               (["--chunk", "-5"], "bad --chunk '-5'"), (["--vtile", "1k"], "bad --vtile '1k'"),
               (["--side", "2000"], "bad --side '2000'")]
    for args, says in refused:
        r = run(tool, *args)
        check(r.returncode == 2 and r.stdout == "" and says in r.stderr,
              "%s refused before any output: exit 2, %r (rc %d, %r)" % (" ".join(args), says, r.returncode,
                                                                         r.stderr.splitlines()[0] if r.stderr else ""))
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
