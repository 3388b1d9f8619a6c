"""
export_rand_fixture.py - writes test/fixtures/rand_torch.bin: what PyTorch's CPU generator
produces after torch.manual_seed(seed), for test/test_llmc.c to compare llmc/rand.h against
bit for bit.

PyTorch's normal_ for n >= 16 depends on the CPU kernel it dispatches to: the AVX2 one
(any x86-64 CPU with AVX2 or AVX-512; kernel 0) or the generic one
(ATEN_CPU_CAPABILITY=default; kernel 1). Each kernel's cases are computed in a child
process started with ATEN_CPU_CAPABILITY set accordingly, and the child checks that
PyTorch really uses that kernel. So this must run on an x86-64 machine with AVX2.

File layout (little endian):
  int32 header[256]: [0] = 20261202 (magic), [1] = 1 (version),
                     [2] = normal cases, [3] = uniform cases, [4] = randint cases,
                     [5] = permutation cases, the rest 0
  normal cases:  int64 seed, int64 n, int64 calls, float64 mean, float64 std,
                 int32 kernel, int32 0, then float32[calls * n]: torch.manual_seed(seed),
                 then `calls` times torch.empty(n).normal_(mean, std), concatenated
                 (several calls check the generator's cached normal sample for n < 16)
  uniform cases: int64 seed, int64 n, float64 from, float64 to, int32 kernel, int32 0,
                 then float32[n]: torch.rand(n) if (from, to) == (0, 1), else
                 torch.empty(n).uniform_(from, to)
  randint cases: int64 seed, int64 n, then uint32[n]: the generator's first n raw 32-bit
                 draws, taken from torch.empty(k, dtype=torch.int64).random_(-2**63, None)
                 (PyTorch's full-range kernel returns random64() unchanged: each value is
                 two draws, the first in the high half)
  permutation cases: int64 seed, int64 n, then int32[n]: llm.c's random_permutation of
                 0..n-1 (for i = n-1 .. 1: swap p[i], p[draw % (i + 1)]), computed here in
                 Python from those raw draws

Run (from the repository root; deterministic, re-running rewrites identical bytes):
    python3 scripts/export_rand_fixture.py [out.bin]     # default test/fixtures/rand_torch.bin
"""
import os
import struct
import subprocess
import sys
import tempfile

MAGIC = 20261202
VERSION = 1
KERNEL_AVX2, KERNEL_DEFAULT = 0, 1
CAPABILITY_ENV = {KERNEL_AVX2: "avx2", KERNEL_DEFAULT: "default"}
EXPECTED_CAPABILITY = {KERNEL_AVX2: "AVX2", KERNEL_DEFAULT: "DEFAULT"}

# (seed, n, calls, mean, std)
NORMAL_CASES = {
    KERNEL_AVX2: [
        (42, 1, 1, 0.0, 0.02), (42, 15, 1, 0.0, 0.02), (42, 16, 1, 0.0, 0.02),
        (42, 17, 1, 0.0, 0.02), (42, 1000, 1, 0.0, 0.02), (42, 768 * 3, 1, 0.0, 0.02),
        (42, 1, 1, 0.5, 3.0), (42, 2, 1, 0.5, 3.0), (42, 15, 1, 0.5, 3.0),
        (42, 16, 1, 0.5, 3.0), (42, 17, 1, 0.5, 3.0), (42, 33, 1, 0.5, 3.0),
        (42, 1000, 1, 0.5, 3.0),
        (1337, 5, 4, 0.1, 2.0),     # odd n < 16: the cached sine value carries across calls
        (7, 31, 3, -1.0, 0.5),
        (2**32 + 5, 20, 1, 0.0, 1.0),  # only the low 32 bits of the seed matter
        (0, 10000, 1, 0.0, 1.0),
    ],
    KERNEL_DEFAULT: [
        (42, 1, 1, 0.0, 0.02), (42, 16, 1, 0.0, 0.02), (42, 17, 1, 0.0, 0.02),
        (42, 1000, 1, 0.0, 0.02), (42, 768 * 3, 1, 0.0, 0.02),
        (42, 17, 1, 0.5, 3.0), (42, 1000, 1, 0.5, 3.0),
    ],
}
# (seed, n, from, to)
UNIFORM_CASES = {
    KERNEL_AVX2: [(42, 1000, 0.0, 1.0), (7, 1000, -0.3, 0.7), (7, 100, -1.0 / 3, 1.0 / 7)],
    KERNEL_DEFAULT: [(42, 100, 0.0, 1.0), (7, 1000, -0.3, 0.7)],
}
RANDINT_CASES = [(42, 2000), (5489, 10)]  # 2000 draws cross several state regenerations
PERMUTATION_CASES = [(42, 1000), (43, 7), (42, 1)]


def emit_cases(kernel, path):
    """Child process: compute this kernel's normal and uniform cases into path."""
    import torch
    capability = torch.backends.cpu.get_cpu_capability()
    if capability != EXPECTED_CAPABILITY[kernel]:
        sys.exit(f"error: PyTorch runs the {capability} kernel, expected "
                 f"{EXPECTED_CAPABILITY[kernel]} (ATEN_CPU_CAPABILITY={CAPABILITY_ENV[kernel]})")
    out = bytearray()
    for seed, n, calls, mean, std in NORMAL_CASES[kernel]:
        torch.manual_seed(seed)
        values = torch.cat([torch.empty(n, dtype=torch.float32).normal_(mean, std)
                            for _ in range(calls)])
        out += struct.pack("<qqqddii", seed, n, calls, mean, std, kernel, 0)
        out += values.numpy().astype("<f4").tobytes()
    for seed, n, lo, hi in UNIFORM_CASES[kernel]:
        torch.manual_seed(seed)
        if (lo, hi) == (0.0, 1.0):
            values = torch.rand(n, dtype=torch.float32)
        else:
            values = torch.empty(n, dtype=torch.float32).uniform_(lo, hi)
        out += struct.pack("<qqddii", seed, n, lo, hi, kernel, 0)
        out += values.numpy().astype("<f4").tobytes()
    with open(path, "wb") as f:
        f.write(out)


def raw_draws(seed, n):
    """The first n 32-bit draws of torch.manual_seed(seed)'s generator."""
    import torch
    torch.manual_seed(seed)
    pairs = torch.empty((n + 1) // 2, dtype=torch.int64).random_(-2**63, None)
    draws = []
    for v in pairs.tolist():
        v %= 2**64
        draws += [v >> 32, v & 0xFFFFFFFF]
    return draws[:n]


def llmc_random_permutation(seed, n):
    draws = iter(raw_draws(seed, max(n - 1, 0)))
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = next(draws) % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--emit":
        emit_cases(int(sys.argv[2]), sys.argv[3])
        return
    out_path = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures/rand_torch.bin"
    if len(sys.argv) > 2:
        sys.exit("usage: python3 scripts/export_rand_fixture.py [out.bin]")

    parts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in (KERNEL_AVX2, KERNEL_DEFAULT):
            part = os.path.join(tmp, f"kernel{kernel}.bin")
            env = dict(os.environ, ATEN_CPU_CAPABILITY=CAPABILITY_ENV[kernel])
            subprocess.run([sys.executable, os.path.abspath(__file__), "--emit", str(kernel), part],
                           env=env, check=True)
            with open(part, "rb") as f:
                parts[kernel] = f.read()

    # the file lists all normal cases, then all uniform cases: split each child's output
    def split(kernel):
        data, pos, normals, uniforms = parts[kernel], 0, b"", b""
        for seed, n, calls, mean, std in NORMAL_CASES[kernel]:
            size = 48 + 4 * n * calls
            normals += data[pos:pos + size]
            pos += size
        for seed, n, lo, hi in UNIFORM_CASES[kernel]:
            size = 40 + 4 * n
            uniforms += data[pos:pos + size]
            pos += size
        assert pos == len(data)
        return normals, uniforms

    n0, u0 = split(KERNEL_AVX2)
    n1, u1 = split(KERNEL_DEFAULT)
    header = [0] * 256
    header[0], header[1] = MAGIC, VERSION
    header[2] = len(NORMAL_CASES[KERNEL_AVX2]) + len(NORMAL_CASES[KERNEL_DEFAULT])
    header[3] = len(UNIFORM_CASES[KERNEL_AVX2]) + len(UNIFORM_CASES[KERNEL_DEFAULT])
    header[4] = len(RANDINT_CASES)
    header[5] = len(PERMUTATION_CASES)
    body = bytearray(struct.pack("<256i", *header)) + n0 + n1 + u0 + u1
    for seed, n in RANDINT_CASES:
        body += struct.pack("<qq", seed, n) + struct.pack(f"<{n}I", *raw_draws(seed, n))
    for seed, n in PERMUTATION_CASES:
        body += struct.pack("<qq", seed, n) + struct.pack(f"<{n}i", *llmc_random_permutation(seed, n))

    tmp_path = out_path + ".tmp"
    with open(tmp_path, "wb") as f:
        f.write(body)
    os.replace(tmp_path, out_path)
    import torch
    print(f"torch {torch.__version__}: wrote {out_path}: {header[2]} normal, {header[3]} uniform, "
          f"{header[4]} randint, {header[5]} permutation cases, {len(body)} bytes")


if __name__ == "__main__":
    main()
