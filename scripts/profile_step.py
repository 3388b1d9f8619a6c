#!/usr/bin/env python3
"""Time per kernel family of one training step, from Nsight Compute's per-kernel durations.

On the GPU machine (ncu reads the durations with the clocks left alone):
    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \\
        ./train_gpt -b 64 -x 3 -v 0 -s 0 > prof.csv
    python3 scripts/profile_step.py prof.csv [step] [--detail REGEX]

The step is found by the AdamW launches that end it (the last step by default: the first
carries one-time setup). ncu runs the kernels one at a time, so the sum is the step's kernel
time without overlap or host gaps; the trainer's own step time (events around the step) is
the figure to compare it with. Prints a Markdown table, largest family first; with --detail,
a second table of the kernels whose family matches REGEX (e.g. "matmul"), grouped by name,
grid and block (a GEMM's grid tells its shape apart), in the step's launch order.
"""
import csv
import re
import sys

# (family, pattern on the kernel's name); the first match wins
FAMILIES = [
    # ours; llm.q's cuDNN SDPA (Hopper's flash fprop / bprop and their helpers)
    ("attention forward", r"att90_fwd_kernel|attn_fwd_kernel|sdpa.*fprop|flash_fprop"),
    ("attention backward", r"att90_bwd|attn_bwd|sdpa.*bprop|flash_bprop|dot_do_o|convert_dq|matmul_dq|fmha_reduce_head"),
    ("flce head (logits, d_h, d_W GEMMs and their kernels)", r"flce|sm90_gemm_kernel<flce"),
    # llm.q's LM head past its logits GEMMs (those count with the matmuls)
    ("llm.q's classifier (softmax, loss, dlogits)", r"fused_classifier|reduce_lse_stats|grouped_loss_sum"),
    ("matmul GEMMs (cuBLASLt and ours)", r"nvjet|cutlass|gemm|splitKreduce|xmma"),
    ("matmul bias gradients", r"matmul_dbias|matmul_backward_bias"),
    ("RMSNorm forward", r"rmsnorm_forward"),
    ("RMSNorm backward", r"rmsnorm_backward"),
    ("RoPE", r"rope_kernel"),
    ("SwiGLU", r"swiglu"),
    ("layernorm forward", r"layernorm_forward|fused_residual"),
    ("layernorm backward", r"layernorm_backward"),
    ("GELU / residual elementwise", r"llmc_ew|gelu|residual"),
    ("encoder", r"encoder"),
    ("AdamW", r"adamw"),
    ("global norm", r"global_norm|clip_scale"),
]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: profile_step.py prof.csv [step]")
    rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
    header, rows = rows[0], rows[1:]
    name_i, value_i, unit_i = header.index("Kernel Name"), header.index("Metric Value"), header.index("Metric Unit")
    scale = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "nsecond": 1e-6}
    names = [r[name_i] for r in rows]
    ms = [float(r[value_i].replace(",", "")) * scale.get(r[unit_i], 1e-6) for r in rows]
    # a step ends with its AdamW launch(es); group consecutive AdamW launches into one end
    ends = [i for i, n in enumerate(names) if "adamw" in n and (i + 1 == len(names) or "adamw" not in names[i + 1])]
    if not ends:
        sys.exit("profile_step.py: no AdamW launch found: not a training run?")
    args = sys.argv[2:]
    detail = None
    if "--detail" in args:
        k = args.index("--detail")
        if k + 1 >= len(args):
            sys.exit("profile_step.py: --detail needs a pattern")
        detail = args[k + 1]
        del args[k:k + 2]
    step = int(args[0]) if args else len(ends)
    if not 1 <= step <= len(ends):
        sys.exit(f"profile_step.py: step {step} not in 1..{len(ends)}")
    first = ends[step - 2] + 1 if step > 1 else 0
    last = ends[step - 1]
    grid_i = header.index("Grid Size") if "Grid Size" in header else None
    block_i = header.index("Block Size") if "Block Size" in header else None
    fam, groups = {}, {}
    for i in range(first, last + 1):
        f = next((f for f, p in FAMILIES if re.search(p, names[i])), "other: " + re.split(r"[<(]", names[i])[0][:40])
        c, t = fam.get(f, (0, 0.0))
        fam[f] = (c + 1, t + ms[i])
        if detail is not None and re.search(detail, f):
            key = (re.split(r"[<(]", names[i])[0][:60], rows[i][grid_i] if grid_i is not None else "",
                   rows[i][block_i] if block_i is not None else "")
            c, t = groups.get(key, (0, 0.0))
            groups[key] = (c + 1, t + ms[i])  # dicts keep the first launch's order
    total = sum(t for _, t in fam.values())
    print(f"step {step}: {last - first + 1} kernels, {total:.2f} ms of kernel time\n")
    print("| family | kernels | ms | share |\n|---|---|---|---|")
    for f, (c, t) in sorted(fam.items(), key=lambda x: -x[1][1]):
        print(f"| {f} | {c} | {t:.2f} | {100 * t / total:.1f}% |")
    if detail is not None:
        print_kernel_groups(groups, f"kernels of the families matching {detail!r}, in launch order")


def print_kernel_groups(groups, title, steps=1):
    """The --detail table: groups {(kernel, grid, block): (launches, ms)} summed over `steps`
    steps, printed a step (scripts/ktrace_report.py's too)."""
    print(f"\n{title}\n")
    print("| kernel | grid | block | launches | ms | ms each |\n|---|---|---|---|---|---|")
    for (n, g, b), (c, t) in groups.items():
        print(f"| {n} | {g} | {b} | {c / steps:.0f} | {t / steps:.3f} | {t / c:.4f} |")


if __name__ == "__main__":
    main()
