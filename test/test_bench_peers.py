#!/usr/bin/env python3
"""CPU test of scripts/bench_peers.py's host side: kernel names shortened for --kernels (flce's
templates, CuTe DSL's and Triton's names, torch's), the shape sets, the kernel table of the
report, --power's sampler (on a stand-in for nvidia-smi) and the dry run (no torch, no GPU).
The last line is "N passed, M failed".

    python3 test/test_bench_peers.py      (from the repository root)
"""
import argparse
import contextlib
import io
import sys
import time

from script_check import Checks, load_script

bp = load_script("bench_peers")
check = Checks()


def main():
    print("scripts/bench_peers.py")
    names = [
        ("void sm90_gemm_kernel<flce_sm90_logits<__nv_bfloat16, false, true>, 0, 0>(CUtensorMap_st, sm90_shape, "
         "flce_sm90_logits<__nv_bfloat16, false, true>::Args)",
         "sm90_gemm_kernel<flce_sm90_logits<__nv_bfloat16, false, true>, ...>"),
        ("void flce_sm90_merge_kernel<__nv_bfloat16, int>(flce_sm90_rows, int)",
         "flce_sm90_merge_kernel<__nv_bfloat16, ...>"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
         "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
         "at::native::vectorized_elementwise_kernel<4, ...>"),
        ("flce_sm90_dlogits_kernel<false>", "flce_sm90_dlogits_kernel<false>"),
        ("_lce_glue_row", "_lce_glue_row"),
        ("nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128_64x4_2x4_h_bz_coopA_NNT"),
        ("Memset (Device)", "Memset"),
        ("void k<a<b<c, d>, e>, f>(int)", "k<a<b<c, d>, e>, ...>"),
        ("void unbalanced<int(", "unbalanced<int("),  # a malformed name: kept, no error
    ]
    for raw, want in names:
        got = bp.short_kernel(raw)
        check(got == want, "short_kernel(%r) = %r" % (raw[:50], got))
    check(len(bp.short_kernel("x" * 500)) == 160, "a long name is cut to 160 characters")

    llama = bp.parse_shapes("llama")
    check(llama == [(16384, 2048, 128256), (16384, 3072, 128256), (32768, 896, 151936), (32768, 1536, 151936)],
          "the llama set: the heads of Llama-3.2-1B, 3B, Qwen2.5-0.5B, 1.5B (%s)" % llama)
    mixed = bp.parse_shapes("llama,65536x1024x176256,32768x896x151936")
    check(len(mixed) == 5 and mixed[-1] == (65536, 1024, 176256), "a set and shapes, duplicates once")
    try:
        bp.parse_shapes("8192x768")
        check(False, "a shape without V refused")
    except SystemExit as e:
        check("bad shape" in str(e), "a shape without V refused: %s" % e)

    # the kernel table of the report, from rows as run() fills them
    args = argparse.Namespace(output=None, png=None)
    shape = (8192, 768, 50304)
    rep = bp.Report(args, [shape], ["flce"])
    kern = dict(top=[dict(name="a<b, ...>", launches=2, ms=3.0), dict(name="c|d", launches=1, ms=1.0)],
                all=[dict(name="a<b, ...>", launches=2, ms=3.0), dict(name="c|d", launches=1, ms=1.0),
                     dict(name="e", launches=4, ms=0.5)])
    rep.floors[shape] = dict(floor_ms=2.0, ref_loss=11.0, ref_s=0.1, ref_chunk=8192)
    rep.rows.append(dict(shape=shape, key="flce", status="ok", ms=2.5, x_floor=1.25, extra_mib=10.0,
                         loss_err=1e-6, dh_err=1e-3, dw_err=1e-3, runs=5, spread=0.01, note="", kernels=kern))
    md = rep.markdown()
    check("## Kernels per call" in md, "the report has the kernel table")
    check("| 8192x768x50304 | flce (binding) | a<b, ...> | 2 | 3.00 | 67% |" in md,
          "a kernel's row: launches, ms, share of all kernels")
    check("c\\|d" in md, "a '|' in a kernel name is escaped")
    check("| (all 3 kernels) | 7 | 4.50 | |" in md, "the total row over all kernels")

    # --power's sampler on a stand-in that prints nvidia-smi's lines (and one it cannot read)
    fake = ("import sys, time\n"
            "for w, c in ((600.5, 1500), (650.0, 1600), (700.0, 1700)): print('%s, %d' % (w, c), flush=True)\n"
            "print('[N/A], [N/A]', flush=True)\n"
            "time.sleep(30)\n")
    sampler = bp.GpuSampler(0, cmd=[sys.executable, "-c", fake])
    with sampler:
        for _ in range(1000):  # until the stand-in's lines are read, 10 s at most (its sleep is cut by the exit)
            if len(sampler.samples) == 3:
                break
            time.sleep(0.01)
    summ = sampler.summary()
    check(summ == dict(power_w=650.0, clock_mhz=1600.0, samples=3, averaged=False),
          "the sampler's medians over the readable lines: %s" % summ)
    check(sampler.proc.poll() is not None, "the sampler's process ends with the block")
    check(bp.power_text(summ, 40.0) == "650 W, SM 1.60 GHz, 26.0 J a call (3 samples)",
          "a row's power note: %s" % bp.power_text(summ, 40.0))
    check(bp.power_text(None, 40.0) == "no power samples", "a row without samples says so")
    check(bp.power_text(dict(summ, averaged=True), 40.0) == "650 W (1 s average), SM 1.60 GHz, 26.0 J a call (3 samples)",
          "a driver without power.draw.instant: the note says the draw is averaged")
    check(bp.GpuSampler(0, cmd=["true"]).summary() is None, "no samples: no summary")
    which = bp.shutil.which
    bp.shutil.which = lambda name: None  # a machine without nvidia-smi
    try:
        bp.main(["--shapes", "8192x768x50304", "--peers", "flce", "--power"])
        check(False, "--power without nvidia-smi refused")
    except SystemExit as e:
        check("--power" in str(e) and "nvidia-smi" in str(e), "--power without nvidia-smi refused: %s" % e)
    finally:
        bp.shutil.which = which

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = bp.main(["--dry-run", "--shapes", "llama", "--peers", "flce,quack", "--kernels", "4", "--power"])
    check(rc == 0 and "OK: bench_peers dry run: 4 shapes, 2 peers" in out.getvalue(),
          "the dry run with --kernels: rc %s" % rc)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            bp.main(["--dry-run", "--kernels", "-1"])
        check(False, "--kernels -1 refused")
    except SystemExit as e:
        check(e.code == 2 and "--kernels -1" in err.getvalue(), "--kernels -1 refused: %s" % err.getvalue().strip()[-70:])
    return check.summary()


if __name__ == "__main__":
    raise SystemExit(main())
