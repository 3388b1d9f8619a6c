#!/usr/bin/env python3
"""Compares two directories of FLCE fixtures (format: test/fixture.h).

The inputs (h, W, bias, targets, grad_token_loss) must be bit-identical: the exporter's
random draws are deterministic. PyTorch's outputs may differ in the last bits between
torch builds or CPUs, so they are held to a relative tolerance.
usage: compare_fixtures.py DIR_A DIR_B
"""
import os
import sys

import numpy as np


def split(path):
    raw = open(path, "rb").read()
    hd = np.frombuffer(raw[:1024], dtype=np.int32)
    n, h, v, vp, has_bias, has_gtl = (int(hd[k]) for k in (2, 3, 4, 5, 6, 9))
    n_in = n * h + vp * h + (vp if has_bias else 0) + n + (n if has_gtl else 0)
    body = np.frombuffer(raw[1024:], dtype=np.float32)
    return raw[:1024], body[:n_in].tobytes(), body[n_in:]


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    names = sorted(f for f in os.listdir(a_dir) if f.endswith(".bin") and not f.startswith("tokens"))
    bad = 0
    worst = 0.0
    for name in names:
        pb = os.path.join(b_dir, name)
        if not os.path.exists(pb):
            print(f"MISMATCH {name}: missing in {b_dir}")
            bad += 1
            continue
        ha, ia, oa = split(os.path.join(a_dir, name))
        hb, ib, ob = split(pb)
        if ha != hb or ia != ib or oa.shape != ob.shape:
            print(f"MISMATCH {name}: header or inputs differ")
            bad += 1
            continue
        scale = np.maximum(np.abs(oa), 1e-6)
        rel = float(np.max(np.abs(oa.astype(np.float64) - ob) / scale)) if oa.size else 0.0
        worst = max(worst, rel)
        if not rel <= 1e-4:
            print(f"MISMATCH {name}: outputs differ, max rel {rel:.2e}")
            bad += 1
    if bad == 0:
        print(f"OK: {len(names)} fixtures reproduce (inputs bit-identical, outputs max rel diff {worst:.2e})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
