"""
The binding's cast of an fp32-accumulated d_W to bf16 with the upstream gradient: torch's
mixed-dtype multiply (torch.mul(d, g, out=bf16), what the binding ran before flce 2.3) against
flce_cast_scaled_device, alternated in one process at the Llama 3.2-1B / 3B and Qwen2.5-0.5B
heads' (V, H); CUDA events, median of 10 after 3 warm-ups, three rounds; and whether the two
outputs are bitwise equal.
    FLCE_LIBRARY=build/libflce.so python3 scripts/dev/bench_cast.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "flce", "python"))
from flce import _lib  # noqa: E402


def median_ms(f, reps=10, warmups=3):
    for _ in range(warmups):
        f()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        e0.record()
        f()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return sorted(ts)[reps // 2]


def main():
    lib = _lib.load_library()
    stream = torch.cuda.current_stream().cuda_stream
    for V, H in ((128256, 2048), (128256, 3072), (151936, 896)):
        d = torch.randn(V, H, device="cuda")
        g = torch.tensor(-0.75, device="cuda")
        a = torch.empty(V, H, dtype=torch.bfloat16, device="cuda")
        b = torch.empty_like(a)
        runs = {"torch.mul": lambda: torch.mul(d, g, out=a),
                "flce_cast_scaled_device": lambda: lib.flce_cast_scaled_device(
                    d.data_ptr(), b.data_ptr(), int(_lib.Dtype.BF16), d.numel(), g.data_ptr(), stream)}
        times = {k: [] for k in runs}
        for _ in range(3):
            for k, f in runs.items():
                times[k].append(median_ms(f))
        print("%d x %d fp32 -> bf16: %s; bitwise equal: %s" % (
            V, H, "; ".join("%s %s ms" % (k, ", ".join("%.3f" % t for t in v)) for k, v in times.items()),
            torch.equal(a, b)))


if __name__ == "__main__":
    main()
