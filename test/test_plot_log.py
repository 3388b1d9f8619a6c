#!/usr/bin/env python3
"""CPU test of scripts/plot_log.py: reading main.jsonl (llmc/metrics_log.h's lines, as
test_train_host.c checks them written) and llm.c's main.log, a line cut short, a step logged
again by a resumed run, a directory holding both files, refusals; and, where matplotlib is
installed, the PNG it draws. No GPU. The last line is "N passed, M failed".

    python3 test/test_plot_log.py      (from the repository root)
"""
import math
import os
import sys
import tempfile

from script_check import Checks, load_script

plot_log = load_script("plot_log")
check = Checks()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    print("scripts/plot_log.py")
    with tempfile.TemporaryDirectory(prefix="test_plot_log_") as tmp:
        run = os.path.join(tmp, "run_a")
        os.mkdir(run)
        # two steps, a resumed run's repeat of step 1 (its value wins), a validation, a null
        # loss, and a last line cut short by a crash
        write(os.path.join(run, "main.jsonl"),
              '{"step": 0, "tokens": 0, "val_loss": 10.9}\n'
              '{"step": 0, "tokens": 8192, "loss": 10.95, "lr": 0.0003, "norm": 3.1, "ms": 20.5, '
              '"tok_per_s": 399609, "mfu": null, "mem_mib": 1200}\n'
              '{"step": 1, "tokens": 16384, "loss": 9.5, "lr": 0.0003, "norm": 2.0, "ms": 20.1, '
              '"tok_per_s": 407000, "mfu": 30.1, "mem_mib": 1200}\n'
              '{"step": 1, "tokens": 16384, "loss": 9.25, "lr": 0.0003, "norm": 2.0, "ms": 20.1, '
              '"tok_per_s": 407000, "mfu": 30.1, "mem_mib": 1200}\n'
              '{"step": 2, "tokens": 24576, "loss": null, "lr": 0.0003}\n'
              '{"step": 3, "tokens": 3276')
        write(os.path.join(run, "main.log"), "s:0 trl:99.0 lr:0.000300 norm:3.10\n")
        r = plot_log.read_run(run)
        check(r["path"].endswith("main.jsonl"), "a directory with both logs: main.jsonl is read")
        check([s for s, _, _ in r["train"]] == [0, 1, 2] and r["train"][1] == (1, 16384, 9.25),
              "train steps 0, 1, 2; step 1's last value (a resumed run's) kept: %s" % (r["train"],))
        check(math.isnan(r["train"][2][2]), "a null loss reads as NaN (not drawn)")
        check(r["val"] == [(0, 0, 10.9)], "the validation: %s" % (r["val"],))
        check(r["skipped"] == 1, "the line cut short skipped and counted (%d)" % r["skipped"])

        # llm.c's main.log: steps only, tokens from --tokens-per-step
        log = os.path.join(tmp, "main.log")
        write(log, "s:0 tel:10.9000\ns:0 trl:10.9500 lr:0.000300 norm:3.10\ns:1 trl:9.2500 lr:0.000300 "
                   "norm:2.00\nnot a log line\ns:2 trl:nan-ish\n")
        r = plot_log.read_run(log)
        check(r["train"] == [(0, None, 10.95), (1, None, 9.25)] and r["val"] == [(0, None, 10.9)],
              "main.log: train and val by step, no tokens: %s %s" % (r["train"], r["val"]))
        check(r["skipped"] == 2, "main.log: the foreign line and the bad number skipped (%d)" % r["skipped"])
        r = plot_log.read_run(log, tokens_per_step=8192)
        check(r["train"][1] == (1, 16384, 9.25) and r["val"][0] == (0, 0, 10.9),
              "main.log with --tokens-per-step: tokens as main.jsonl counts them")

        # refusals: a directory without a log, a log without steps
        empty_dir = os.path.join(tmp, "empty")
        os.mkdir(empty_dir)
        try:
            plot_log.read_run(empty_dir)
            check(False, "a directory without a log refused")
        except FileNotFoundError as e:
            check("no main.jsonl or main.log" in str(e), "a directory without a log refused: %s" % e)
        empty_log = os.path.join(tmp, "nothing.jsonl")
        write(empty_log, "\n")
        try:
            plot_log.main([empty_log, "-o", os.path.join(tmp, "x.png")])
            check(False, "a log without a step refused")
        except SystemExit as e:
            check("no step in it" in str(e.code), "a log without a step refused: %s" % e.code)

        # the picture, where matplotlib is installed
        try:
            import matplotlib  # noqa: F401
            have_mpl = True
        except ImportError:
            have_mpl = False
        if have_mpl:
            png = os.path.join(tmp, "loss.png")
            plot_log.main([run, log, "-o", png, "--title", "test"])
            with open(png, "rb") as f:
                head = f.read(8)
            check(head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 1000,
                  "two runs drawn into a PNG (%d bytes)" % os.path.getsize(png))
        else:
            print("  (matplotlib is not installed: the drawing is not checked)")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
