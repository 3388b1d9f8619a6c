#!/usr/bin/env python3
"""CPU test of scripts/bench_peers.py's host side: kernel names shortened for --kernels (flce's
templates, CuTe DSL's and Triton's names, torch's), the shape sets, the kernel table of the
report, --power's sampler (on a stand-in for nvidia-smi), the dry run (no torch, no GPU), the
peers' interleaved timing (on a stand-in torch and stand-in peers) and --assemble's xz form of
the split wheel (on a stand-in wheel).
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

    # the comparison at equal memory: each other peer against flce's fastest row within its memory
    rep = bp.Report(args, [shape, (16384, 2048, 128256)], ["flce", "flce-mem", "quack", "liger"])
    base = dict(status="ok", loss_err=1e-6, dh_err=1e-3, dw_err=1e-3, runs=5, spread=0.01, note="")
    for sh, key, ms, mib in ((shape, "flce", 2.5, 1400.0), (shape, "flce-mem", 2.3, 1550.0),
                             (shape, "quack", 2.4, 1560.0), (shape, "liger", 3.0, 170.0),
                             ((16384, 2048, 128256), "flce", 40.0, 1400.0), ((16384, 2048, 128256), "quack", 39.0, 1500.0)):
        rep.rows.append(dict(base, shape=sh, key=key, ms=ms, x_floor=1.2, extra_mib=mib))
    rep.rows.append(dict(shape=(16384, 2048, 128256), key="flce-mem", status="error", error="x"))
    md = rep.markdown()
    check("## At equal memory" in md, "the report compares the peers at equal memory")
    check("| 8192x768x50304 | QuACK | 2.40 | 1560 | flce (binding, --flce-mem MiB) | 2.30 | 1550 | +4.3% |" in md,
          "the fastest flce row within the peer's memory (the larger budget's)")
    check("| 8192x768x50304 | Liger | 3.00 | 170 | (every flce row took more memory) |" in md,
          "a peer in less memory than every flce row: said so")
    check("| 16384x2048x128256 | QuACK | 39.00 | 1500 | flce (binding) | 40.00 | 1400 | -2.5% |" in md,
          "a faster peer: a negative difference; a failed flce row left out")
    check("## At equal memory" not in bp.Report(args, [shape], ["flce", "flce-mem"]).markdown(),
          "no other peer: no comparison")

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
    interleaved()
    xz_wheel()
    return check.summary()


def xz_wheel():
    """--assemble's xz form of the split wheel on a stand-in wheel: rebuilt from two parts of its
    xz tar, every file as its RECORD says; one part alone, or a file that its RECORD does not
    match, is refused."""
    import base64
    import hashlib
    import os
    import tarfile
    import tempfile
    import zipfile
    name = "standin-1.0-py3-none-any.whl"
    with tempfile.TemporaryDirectory() as tmp:
        def make_parts(tamper):
            files = {"standin/__init__.py": b"x = 1\n", "standin/lib.so": bytes(range(256)) * 64}
            rec = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode(),
                                        len(b)) for n, b in files.items()]
            files["standin-1.0.dist-info/RECORD"] = ("\n".join(rec + ["standin-1.0.dist-info/RECORD,,"]) + "\n").encode()
            if tamper:
                files["standin/__init__.py"] = b"x = 2\n"
            tar_path = os.path.join(tmp, "w.tar.xz")
            with tarfile.open(tar_path, "w:xz") as tar:
                for n, b in files.items():
                    info = tarfile.TarInfo("./" + n)
                    info.size, info.mode = len(b), 0o755 if n.endswith(".so") else 0o644
                    tar.addfile(info, io.BytesIO(b))
            data = open(tar_path, "rb").read()
            parts = os.path.join(tmp, ".whl", "parts")
            os.makedirs(parts, exist_ok=True)
            for f in os.listdir(parts):
                os.remove(os.path.join(parts, f))
            half = len(data) // 2
            for suffix, chunk in (("xa", data[:half]), ("xb", data[half:])):
                with open(os.path.join(parts, name + ".tar.xz.part-" + suffix), "wb") as f:
                    f.write(chunk)
            return hashlib.sha256(data).hexdigest()

        saved = bp.WHL_DIR, bp.SPLIT_WHEELS, bp.SPLIT_WHEELS_XZ
        bp.WHL_DIR = os.path.join(tmp, ".whl")
        try:
            def run(dest):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    rc = bp.assemble(os.path.join(tmp, dest))
                return rc, out.getvalue()
            bp.SPLIT_WHEELS = {name: "0" * 64}
            bp.SPLIT_WHEELS_XZ = {name: make_parts(False)}
            os.remove(os.path.join(bp.WHL_DIR, "parts", name + ".tar.xz.part-xb"))
            rc, out = run("d1")
            check(rc == 1 and "a part is missing" in out, "--assemble: one xz part of two is not a wheel")
            bp.SPLIT_WHEELS_XZ = {name: make_parts(False)}
            rc, out = run("d1")
            whl = os.path.join(tmp, "d1", name)
            with zipfile.ZipFile(whl) as z:
                mode = z.getinfo("standin/lib.so").external_attr >> 16
            check(rc == 0 and "rebuilt" in out and bp._record_ok(whl) and mode & 0o111,
                  "--assemble: the wheel rebuilt from its xz parts, its files as RECORD says, modes kept")
            rc, out = run("d1")
            check(rc == 0 and "already assembled" in out, "--assemble: a rebuilt wheel is kept")
            bp.SPLIT_WHEELS_XZ = {name: make_parts(True)}
            rc, out = run("d2")
            check(rc == 1 and "do not match its RECORD" in out and not os.path.exists(os.path.join(tmp, "d2", name)),
                  "--assemble: a file that its RECORD does not match is refused, no wheel written")
        finally:
            bp.WHL_DIR, bp.SPLIT_WHEELS, bp.SPLIT_WHEELS_XZ = saved


def fake_torch():
    """A stand-in for the parts of torch that run() touches outside the patched helpers."""
    from types import ModuleType, SimpleNamespace as NS
    torch = ModuleType("torch")
    cuda = NS(is_available=lambda: True, set_device=lambda d: None, get_device_name=lambda d: "stand-in GPU",
              synchronize=lambda: None, empty_cache=lambda: None, reset_peak_memory_stats=lambda: None,
              memory_allocated=lambda: 0, max_memory_allocated=lambda: 0,
              OutOfMemoryError=type("OutOfMemoryError", (RuntimeError,), {}))
    torch.cuda = cuda
    torch.device = lambda *a: a
    torch.backends = NS(cuda=NS(matmul=NS(allow_tf32=True)), cudnn=NS(allow_tf32=True))
    torch.set_float32_matmul_precision = lambda p: None
    torch.__version__ = "0.0"
    torch.version = NS(cuda="0.0")
    nn = ModuleType("torch.nn")
    nn.functional = ModuleType("torch.nn.functional")
    torch.nn = nn
    return {"torch": torch, "torch.nn": nn, "torch.nn.functional": nn.functional}


def interleaved():
    """The peers' timed runs interleaved: interleave()'s rotation and its error handling, then
    run() on a stand-in torch with stand-in peers: one missing, one failing in its warm-up, one
    cold, one failing in a timed round, two timed; the rows in --peers order."""
    order = []
    calls = [lambda i=i: order.append(i) or float(i + 1) for i in range(3)]
    times, errors = bp.interleave(calls, 3)
    check(order == [0, 1, 2, 1, 2, 0, 2, 0, 1] and times == [[1.0] * 3, [2.0] * 3, [3.0] * 3] and not errors,
          "interleave: each round's order rotated by one (%s)" % order)
    n = [0]

    def flaky():
        n[0] += 1
        if n[0] == 2:
            raise RuntimeError("second run")
        return 5.0
    times, errors = bp.interleave([flaky, lambda: 1.0], 3)
    check(times == [[5.0], [1.0] * 3] and list(errors) == [0] and "second run" in str(errors[0]),
          "interleave: a call that raises is left out of the later rounds (%s)" % times)

    peers = ["flce", "flce-mem", "quack", "liger", "cce", "verl"]
    runs = []  # the timed runs, by peer
    behaviour = {"flce": 10.0, "flce-mem": 9.0, "quack": "raise-in-round", "liger": "cold", "cce": "warm-fail"}

    def make_peer(key, torch, F, args, h, W, t):
        if key == "verl":
            return None, "not installed: stand-in"
        return (lambda h, W, t: key), "stand-in " + key

    def fwd_bwd_ms(torch, fn, h, W, t):
        key = fn(h, W, t)
        b = behaviour[key]
        if b == "warm-fail":
            raise ValueError("broken peer")
        if b == "cold":
            return 5000.0
        runs.append(key)
        if b == "raise-in-round" and runs.count(key) == 3:  # warm-ups 2, then the first timed run
            raise ValueError("fails when timed")
        return 1.0 if b == "raise-in-round" else b

    def finish(torch, fn, h, W, t, args, times, cold):
        return dict(ms=sorted(times)[len(times) // 2], runs=len(times), spread=0.0, cold=cold, loss=1.0, extra_mib=1.0)
    saved = {k: getattr(bp, k) for k in ("make_peer", "fwd_bwd_ms", "finish", "gemm_rate", "make_inputs", "reference",
                                         "chunked_norm", "rel_l2", "cleanup", "flce_on_path", "git_commit")}
    mods = fake_torch()
    saved_mods = {k: sys.modules.get(k) for k in mods}
    bp.make_peer, bp.fwd_bwd_ms, bp.finish = make_peer, fwd_bwd_ms, finish
    bp.gemm_rate = lambda torch, dev: 700e3
    class Leaf:
        grad = None

        def detach(self):
            return self

        def requires_grad_(self, flag):
            return self
    bp.make_inputs = lambda torch, dev, shape, seed: (Leaf(), Leaf(), object())
    bp.reference = lambda torch, h, W, t: (1.0, None, None, 64)
    bp.chunked_norm = lambda torch, x, rows_per=None: 1.0
    bp.rel_l2 = lambda torch, g, ref, norm: 0.0
    bp.cleanup = lambda torch: None
    bp.flce_on_path = lambda: None
    bp.git_commit = lambda: "stand-in"
    sys.modules.update(mods)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = bp.main(["--shapes", "64x32x1000", "--peers", ",".join(peers), "--mode", "peers", "--budget", "0.05",
                          "--min-reps", "4", "--max-reps", "4"])
    finally:
        for k, v in saved.items():
            setattr(bp, k, v)
        for k, v in saved_mods.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    md = out.getvalue()
    timed = [k for k in runs if k in ("flce", "flce-mem")][4:]  # after each one's 2 warm-ups
    # (rounds of flce, flce-mem and quack rotated; quack fails in the first and is left out)
    check(rc == 0 and timed == ["flce", "flce-mem", "flce-mem", "flce", "flce", "flce-mem", "flce", "flce-mem"],
          "run(): the warm peers' timed runs alternate, each round rotated (%s)" % timed)
    results = md[md.index("## Results"):md.index("## Summary")]
    lines = [ln for ln in results.splitlines() if ln.startswith("| 64x32x1000 |")]
    got = [ln.split("|")[2].strip() for ln in lines]
    want = [bp.PEER_LABEL[k] for k in peers]
    check(got == want, "run(): the rows in --peers order (%s)" % got)
    status = {ln.split("|")[2].strip(): ln for ln in lines}
    check("| 10.00 |" in status[bp.PEER_LABEL["flce"]] and "| 4 (spread" in status[bp.PEER_LABEL["flce"]] and
          "| 9.00 |" in status[bp.PEER_LABEL["flce-mem"]],
          "run(): the timed peers' medians over the rounds")
    check("fails when timed" in status[bp.PEER_LABEL["quack"]] and "broken peer" in status[bp.PEER_LABEL["cce"]] and
          "| 1 (cold)" in status[bp.PEER_LABEL["liger"]] and "| missing |" in status[bp.PEER_LABEL["verl"]],
          "run(): a peer failing in a round or its warm-up is its row's error; a cold one measured once; a "
          "missing one reported")
    check("interleaved round by round" in md, "the report says the runs were interleaved")


if __name__ == "__main__":
    raise SystemExit(main())
