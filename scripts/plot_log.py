#!/usr/bin/env python3
"""Plot a training run's loss and val loss against steps and against tokens, into a PNG.

Usage:
  python3 scripts/plot_log.py RUN [RUN ...] [-o loss.png] [--title TEXT]

Each RUN is a trainer's output directory (-o: its main.jsonl, else its main.log) or one of
those files. main.jsonl (llmc/metrics_log.h) has tokens, so both panels are drawn; llm.c's
main.log ("s:STEP trl:LOSS ...", "s:STEP tel:VAL") has steps only, and the tokens panel is
left out unless --tokens-per-step N says how many tokens a step takes. Several runs share the
axes, each labelled by its directory. A line that does not parse (a run cut short mid-line) is
skipped and counted; where a resumed run logged a step again, its last value is kept.
Needs matplotlib (pip install matplotlib) to draw; reading and checking the logs does not.
"""
import argparse
import json
import math
import os
import re
import sys

LOG_LINE = re.compile(r"^s:(\d+)\s+(trl|tel):(\S+)")


def read_run(path, tokens_per_step=None):
    """Read a run's log: {"name", "train": [(step, tokens or None, loss)], "val": [...], "skipped"}.

    path: a directory (main.jsonl preferred, else main.log) or a file. Steps are unique (the
    last value logged for a step wins) and sorted."""
    if os.path.isdir(path):
        for name in ("main.jsonl", "main.log"):
            if os.path.isfile(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise FileNotFoundError("%s: no main.jsonl or main.log in it" % path)
    train, val, skipped = {}, {}, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        jsonl = path.endswith(".jsonl")
        for line in f:
            if not line.strip():
                continue
            if jsonl:
                try:
                    rec = json.loads(line)
                    step = int(rec["step"])
                    tokens = rec.get("tokens")
                    if "val_loss" in rec:
                        val[step] = (tokens, rec["val_loss"])
                    else:
                        train[step] = (tokens, rec["loss"])
                except (ValueError, KeyError, TypeError):
                    skipped += 1
                continue
            m = LOG_LINE.match(line)
            if not m:
                skipped += 1
                continue
            try:
                step, value = int(m.group(1)), float(m.group(3))
            except ValueError:
                skipped += 1
                continue
            # a main.log's tokens: as main.jsonl counts them (train: through the step's batch)
            tok = None
            if tokens_per_step:
                tok = (step + 1 if m.group(2) == "trl" else step) * tokens_per_step
            (train if m.group(2) == "trl" else val)[step] = (tok, value)

    def rows(d):
        out = []
        for step in sorted(d):
            tokens, value = d[step]
            value = float("nan") if value is None else float(value)
            out.append((step, tokens, value))
        return out

    name = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    return {"name": name, "path": path, "train": rows(train), "val": rows(val), "skipped": skipped}


def plot(runs, out, title=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_log.py: drawing needs matplotlib (pip install matplotlib)")
    has_tokens = any(r["train"] and all(t is not None for _, t, _ in r["train"]) for r in runs)
    ncols = 2 if has_tokens else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.5), squeeze=False)
    for r in runs:
        label = r["name"] if len(runs) > 1 else None
        for col, key in enumerate(("step", "tokens")[:ncols]):
            ax = axes[0][col]
            for kind, style in (("train", "-"), ("val", "o-")):
                pts = [(s if key == "step" else t, v) for s, t, v in r[kind]
                       if not math.isnan(v) and (key == "step" or t is not None)]
                if not pts:
                    continue
                xs, ys = zip(*pts)
                name = ("%s %s" % (label, kind) if label else ("loss" if kind == "train" else "val loss"))
                ax.plot(xs, ys, style, markersize=3, linewidth=1, label=name)
    for col, key in enumerate(("step", "tokens")[:ncols]):
        ax = axes[0][col]
        ax.set_xlabel(key)
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="output directories (-o) or main.jsonl / main.log files")
    ap.add_argument("-o", "--out", default="loss.png", help="the PNG to write (default loss.png)")
    ap.add_argument("--title", help="a title over the panels")
    ap.add_argument("--tokens-per-step", type=int, help="tokens a step takes, for a main.log (B x T x processes)")
    args = ap.parse_args(argv)
    runs = []
    for p in args.runs:
        try:
            r = read_run(p, args.tokens_per_step)
        except OSError as e:
            sys.exit("plot_log.py: %s" % e)
        if not r["train"] and not r["val"]:
            sys.exit("plot_log.py: %s: no step in it" % r["path"])
        print("%s: %d steps, %d validations%s" % (r["path"], len(r["train"]), len(r["val"]),
              ", %d lines skipped" % r["skipped"] if r["skipped"] else ""))
        runs.append(r)
    plot(runs, args.out, args.title)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
