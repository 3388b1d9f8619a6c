#!/usr/bin/env python3
"""bench_options.py - fwd+bwd time of flce.linear_cross_entropy under each of its options, for
an A/B of two builds of libflce.so, or of Liger's fused linear cross-entropy under the same
options (--peer liger: liger-kernel installed, as scripts/bench_peers.py's header says).

    FLCE_LIBRARY=build/libflce.so python3 scripts/dev/bench_options.py [-s NxHxV] [-r REPEATS]
    python3 scripts/dev/bench_options.py --peer liger [-s NxHxV] [-r REPEATS]

One library per process (the binding loads $FLCE_LIBRARY once), so an A/B runs this script once
per build, in turns, in one device call. One set of random bf16 inputs (std H^-1/4: logits
~N(0, 1); ~5% of the targets ignored); per option warm-up calls, then REPEATS calls each timed
with CUDA events around the call and loss.backward(); the median in ms. The options are the
ones whose dz needs the general transform (softcap, an entropy gradient, weighted smoothing:
on the Hopper path the dlogits pass, or with --lt-backward 0 the fused GEMMs' general variant)
and the ones that do not (plain, smoothing, z-loss). Liger takes z-loss as lse_square_scale and has no entropy output (that row is left
out); its default (bf16) accumulation. It reports, never asserts."""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "flce", "python"))


def options(V, device):
    g = torch.Generator(device="cpu").manual_seed(7)
    cw = (0.5 + torch.rand(V, generator=g)).to(device)
    return [
        ("plain", {}),
        ("smoothing 0.1", {"label_smoothing": 0.1}),
        ("z-loss 1e-4", {"z_loss": 1e-4}),
        ("softcap 30", {"softcap": 30.0}),
        ("weighted smoothing", {"label_smoothing": 0.1, "ce_weight": cw}),
        ("entropy", {"return_entropy": True}),
    ]


def liger_call(kw):
    """Liger's module under flce's option names, called as flce.linear_cross_entropy is."""
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    m = LigerFusedLinearCrossEntropyLoss(ce_weight=kw.get("ce_weight"), lse_square_scale=kw.get("z_loss", 0.0),
                                         label_smoothing=kw.get("label_smoothing", 0.0), softcap=kw.get("softcap"))
    return lambda h, w, y: m(w, h, y)


def flce_call(kw):
    import flce
    return lambda h, w, y: flce.linear_cross_entropy(h, w, y, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-s", "--shape", default="16384x2048x128256", help="NxHxV")
    ap.add_argument("-r", "--repeats", type=int, default=10)
    ap.add_argument("-w", "--warmups", type=int, default=3)
    ap.add_argument("--peer", choices=("flce", "liger"), default="flce")
    ap.add_argument("--lt-backward", type=int, choices=(0, 1), default=None,
                    help="flce's Hopper path: its gradients from cuBLASLt's GEMMs (1) or the fused ones (0), "
                         "not the planner's choice (flce_internal.h's flce_dev_set_lt_backward)")
    args = ap.parse_args()
    N, H, V = (int(x) for x in args.shape.lower().split("x"))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    std = H ** -0.25
    h = (torch.randn(N, H, device=dev) * std).to(torch.bfloat16).requires_grad_(True)
    w = (torch.randn(V, H, device=dev) * std).to(torch.bfloat16).requires_grad_(True)
    y = torch.randint(0, V, (N,), device=dev)
    y[torch.rand(N, device=dev) < 0.05] = -100
    if args.peer == "flce":
        import flce
        what = flce.library_path()
        if args.lt_backward is not None:
            flce.load_library().flce_dev_set_lt_backward(args.lt_backward)
            what += ", --lt-backward %d" % args.lt_backward
    else:
        import importlib.metadata
        what = "liger-kernel " + importlib.metadata.version("liger-kernel")
    print("# %s  %dx%dx%d  %s" % (what, N, H, V, torch.cuda.get_device_name()))
    for name, kw in options(V, dev):
        if args.peer == "liger" and kw.get("return_entropy"):
            continue
        fn = (flce_call if args.peer == "flce" else liger_call)(kw)
        times = []
        for i in range(args.warmups + args.repeats):
            h.grad = None
            w.grad = None
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            out = fn(h, w, y)
            loss = out[0] + out[2].mean() if kw.get("return_entropy") else out
            loss.backward()
            b.record()
            b.synchronize()
            if i >= args.warmups:
                times.append(a.elapsed_time(b))
        if not torch.isfinite(loss).item():
            print("%-20s non-finite loss" % name)
            continue
        print("%-20s %8.2f ms" % (name, statistics.median(times)), flush=True)


if __name__ == "__main__":
    main()
