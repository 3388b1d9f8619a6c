"""
CPU tests of the flce Python package: no torch, no GPU, no pytest needed.

    FLCE_LIBRARY=build/libflce.so python3 flce/python/tests/test_cpu.py     (what `make test` runs)
    python3 -m pytest flce/python/tests/test_cpu.py                         (also collectable)

The library loads and reports the ABI the binding mirrors (version, struct sizes); the ctypes
structs and enums match flce.h field by field (a C probe compiled with the host compiler prints
every offset, size and enum value); flce_config_init, flce_config_check and
flce_workspace_size answer good and bad configurations with the right status codes; the loader
refuses a missing library or one of another ABI with a message naming it. Closes with
"N passed, M failed" (the Makefile sums it with the other suites).
"""
import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)                       # flce/python
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))      # the repository
HEADER = os.path.join(REPO, "flce", "flce.h")
sys.path.insert(0, PKG_ROOT)

torch_loaded_before = "torch" in sys.modules
import flce  # noqa: E402
from flce import _lib  # noqa: E402
from flce._lib import Config, Dtype, IndexType, Reduction, Status, Tensors  # noqa: E402

_passed = 0
_failed = 0
_UNDER_PYTEST = "pytest" in sys.modules


def check(ok, what):
    global _passed, _failed
    print("%s python: %s" % ("  ok  " if ok else "FAIL  ", what))
    sys.stdout.flush()
    if ok:
        _passed += 1
    else:
        _failed += 1
        if _UNDER_PYTEST:
            raise AssertionError(what)
    return ok


def _good_config():
    cfg = _lib.config(512, 256, 8000)
    return cfg


# --- tests --------------------------------------------------------------------------------------

def test_import_without_torch():
    check(torch_loaded_before or "torch" not in sys.modules,
          "import flce (and flce._lib) does not import torch")


def test_library_loads():
    lib = flce.load_library()
    check(lib is not None, "libflce.so loads from %s" % flce.library_path())


def test_version_and_sizes():
    lib = flce.load_library()
    major, minor = flce.version()
    check((_lib.VERSION_MAJOR, _lib.VERSION_MINOR) == (2, 3) and major == 2 and minor >= 3,
          "the binding mirrors ABI 2.3 (1.1's options, vocab parallelism, flce_scale_device, flce_cast_scaled_device) "
          "and the library is 2.x, x >= 3: %d.%d" % (major, minor))
    check((major, minor >= _lib.VERSION_MINOR) == (_lib.VERSION_MAJOR, True),
          "library ABI %d.%d, binding mirrors %d.%d" % (major, minor, _lib.VERSION_MAJOR, _lib.VERSION_MINOR))
    with open(HEADER) as f:
        text = f.read()
    hmaj = int(re.search(r"#define FLCE_VERSION_MAJOR (\d+)", text).group(1))
    hmin = int(re.search(r"#define FLCE_VERSION_MINOR (\d+)", text).group(1))
    check((hmaj, hmin) == (major, minor), "flce.h says %d.%d, the library %d.%d" % (hmaj, hmin, major, minor))
    check(hmaj == _lib.VERSION_MAJOR and hmin >= _lib.VERSION_MINOR,
          "the binding (%d.%d) accepts flce.h's version %d.%d" % (_lib.VERSION_MAJOR, _lib.VERSION_MINOR, hmaj, hmin))
    check(lib.flce_config_size() == ctypes.sizeof(Config),
          "sizeof(flce_config) = %d in the library, %d in ctypes" % (lib.flce_config_size(), ctypes.sizeof(Config)))
    check(lib.flce_tensors_size() == ctypes.sizeof(Tensors),
          "sizeof(flce_tensors) = %d in the library, %d in ctypes" % (lib.flce_tensors_size(), ctypes.sizeof(Tensors)))


def _header_enums(text):
    """{typedef name: [member names]} of flce.h's enums, comments stripped."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = {}
    for body, name in re.findall(r"typedef\s+enum\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
        out[name] = [m.split("=")[0].strip() for m in body.split(",") if m.strip()]
    return out


def _header_fields(text, struct):
    """Field names of a typedef struct in flce.h, in order."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    m = re.search(r"typedef\s+struct\s*\{([^{}]*)\}\s*%s\s*;" % struct, text)
    names = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            names.append(re.search(r"(\w+)\s*$", decl).group(1))
    return names


ENUMS = {"flce_status": (Status, "FLCE_"), "flce_dtype": (Dtype, "FLCE_"),
         "flce_index_type": (IndexType, "FLCE_"), "flce_reduction": (Reduction, "FLCE_REDUCTION_")}


def test_header_mirror():
    """Every struct field and enum member of flce.h is in the ctypes mirror, in order, at the
    offset and size the C compiler gives it; every enum value matches."""
    with open(HEADER) as f:
        text = f.read()
    for struct, cls in (("flce_config", Config), ("flce_tensors", Tensors)):
        names = [n for n, _ in cls._fields_]
        hnames = _header_fields(text, struct)
        check(names == hnames, "%s's fields in ctypes are flce.h's, in order (%d fields)" % (struct, len(hnames))
              + ("" if names == hnames else ": header %s, ctypes %s" % (hnames, names)))
    enums = _header_enums(text)
    for cname, (pycls, prefix) in ENUMS.items():
        members = [prefix + m.name for m in pycls]
        check(enums.get(cname) == members, "enum %s has the members of flce._lib.%s" % (cname, pycls.__name__)
              + ("" if enums.get(cname) == members else ": header %s, python %s" % (enums.get(cname), members)))

    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        check(True, "no C compiler: offsets against flce.h not compiled (skipped)")
        return
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flce.h"', "int main(void) {"]
    for struct, cls in (("flce_config", Config), ("flce_tensors", Tensors)):
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (struct, struct))
        for n, _ in cls._fields_:
            lines.append('printf("%s.%s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (struct, n, struct, n, struct, n))
    for cname, (pycls, prefix) in ENUMS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
        for m in pycls:
            lines.append('printf("%s%s %%d\\n", (int)%s%s);' % (prefix, m.name, prefix, m.name))
    lines.append('printf("FLCE_VERSION %d\\n", FLCE_VERSION);')
    lines.append("return 0; }")
    tmp = tempfile.mkdtemp(prefix="flce_probe_")
    try:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.dirname(HEADER), src, "-o", exe],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "the C probe of flce.h compiles with %s" % cc + (": " + r.stderr if r.returncode else "")):
            return
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    got = {}
    for line in out:
        if line:
            k, *v = line.split()
            got[k] = [x for x in v if x != "sizeof"]
    for struct, cls in (("flce_config", Config), ("flce_tensors", Tensors)):
        bad = []
        for n, t in cls._fields_:
            off, size = (int(x) for x in got["%s.%s" % (struct, n)])
            if off != getattr(cls, n).offset or size != ctypes.sizeof(t):
                bad.append("%s at %d (%d bytes) in C, %d (%d) in ctypes" % (n, off, size, getattr(cls, n).offset,
                                                                             ctypes.sizeof(t)))
        csize = int(got[struct + " sizeof"][0] if struct + " sizeof" in got else got[struct][0])
        check(not bad and csize == ctypes.sizeof(cls),
              "%s: every field's offset and size, and sizeof = %d, as the C compiler lays it out%s"
              % (struct, csize, "" if not bad else ": " + "; ".join(bad)))
    bad = []
    for cname, (pycls, prefix) in ENUMS.items():
        if int(got[cname][0]) != ctypes.sizeof(ctypes.c_int):
            bad.append("sizeof(%s) = %s" % (cname, got[cname][0]))
        for m in pycls:
            v = int(got[prefix + m.name][0])
            if v != int(m):
                bad.append("%s%s = %d in C, %d in python" % (prefix, m.name, v, int(m)))
    check(not bad, "every enum value (and int size) as in C" + ("" if not bad else ": " + "; ".join(bad)))
    check(int(got["FLCE_VERSION"][0]) == flce.load_library().flce_version(),
          "FLCE_VERSION of flce.h = flce_version() of the library (%s)" % got["FLCE_VERSION"][0])


def test_config_init():
    cfg = _lib.config(100, 64, 5000)
    ok = (cfg.n_tokens, cfg.hidden, cfg.vocab, cfg.vocab_padded) == (100, 64, 5000, 5000) and \
        cfg.dtype == Dtype.BF16 and cfg.target_type == IndexType.INT32 and cfg.ignore_index == -100 and \
        cfg.reduction == Reduction.MEAN and cfg.grad_scale == 1.0 and cfg.label_smoothing == 0.0 and \
        cfg.z_loss_scale == 0.0 and cfg.softcap == 0.0 and cfg.has_bias == 0 and \
        cfg.d_hidden_dtype == Dtype.BF16 and cfg.d_weight_dtype == Dtype.FP32 and \
        cfg.d_bias_dtype == Dtype.FP32 and cfg.max_chunk_tokens == 0 and cfg.max_vocab_tile == 0 and \
        cfg.bf16_logits == 0 and cfg.temperature == 1.0 and cfg.has_class_weights == 0 and \
        cfg.vocab_parallel == 0 and cfg.d_hidden_partial == 0 and cfg.vocab_offset == 0 and cfg.vocab_total == 0
    check(ok, "flce_config_init fills flce.h's defaults into the ctypes struct")


def _bad_configs():
    def mk(**kw):
        cfg = _good_config()
        for k, v in kw.items():
            setattr(cfg, k, v)
        return cfg
    return [
        ("n_tokens 0", mk(n_tokens=0), Status.ERR_INVALID_SIZE, "n_tokens"),
        ("n_tokens 2^31", mk(n_tokens=2**31), Status.ERR_INVALID_SIZE, "n_tokens"),
        ("hidden -8", mk(hidden=-8), Status.ERR_INVALID_SIZE, "hidden"),
        ("vocab 0", mk(vocab=0, vocab_padded=0), Status.ERR_INVALID_SIZE, "vocab"),
        ("vocab_padded < vocab", mk(vocab_padded=7999), Status.ERR_INVALID_SIZE, "vocab_padded"),
        ("hidden 260 in bf16", mk(hidden=260), Status.ERR_MISALIGNED, "hidden"),
        ("hidden 258 in fp32", mk(hidden=258, dtype=Dtype.FP32, d_hidden_dtype=Dtype.FP32),
         Status.ERR_MISALIGNED, "hidden"),
        ("dtype 2", mk(dtype=2), Status.ERR_INVALID_VALUE, "dtype"),
        ("target_type 5", mk(target_type=5), Status.ERR_INVALID_VALUE, "target_type"),
        ("reduction 3", mk(reduction=3), Status.ERR_INVALID_VALUE, "reduction"),
        ("label_smoothing 1", mk(label_smoothing=1.0), Status.ERR_INVALID_VALUE, "label_smoothing"),
        ("label_smoothing -0.1", mk(label_smoothing=-0.1), Status.ERR_INVALID_VALUE, "label_smoothing"),
        ("z_loss_scale -1", mk(z_loss_scale=-1.0), Status.ERR_INVALID_VALUE, "z_loss_scale"),
        ("z_loss_scale inf", mk(z_loss_scale=math.inf), Status.ERR_INVALID_VALUE, "z_loss_scale"),
        ("softcap NaN", mk(softcap=math.nan), Status.ERR_INVALID_VALUE, "softcap"),
        ("grad_scale inf", mk(grad_scale=math.inf), Status.ERR_INVALID_VALUE, "grad_scale"),
        ("has_bias 2", mk(has_bias=2), Status.ERR_INVALID_VALUE, "has_bias"),
        ("fp32 inputs with a bf16 d_hidden", mk(dtype=Dtype.FP32), Status.ERR_INVALID_VALUE, "d_hidden_dtype"),
        ("bf16_logits 3", mk(bf16_logits=3), Status.ERR_INVALID_VALUE, "bf16_logits"),
        ("max_chunk_tokens -1", mk(max_chunk_tokens=-1), Status.ERR_INVALID_VALUE, "max_chunk_tokens"),
        ("max_vocab_tile 63", mk(max_vocab_tile=63), Status.ERR_INVALID_VALUE, "max_vocab_tile"),
        ("temperature 0", mk(temperature=0.0), Status.ERR_INVALID_VALUE, "temperature"),
        ("temperature -1", mk(temperature=-1.0), Status.ERR_INVALID_VALUE, "temperature"),
        ("temperature NaN", mk(temperature=math.nan), Status.ERR_INVALID_VALUE, "temperature"),
        ("temperature inf", mk(temperature=math.inf), Status.ERR_INVALID_VALUE, "temperature"),
        ("has_class_weights 2", mk(has_class_weights=2), Status.ERR_INVALID_VALUE, "has_class_weights"),
        ("vocab_parallel 2", mk(vocab_parallel=2), Status.ERR_INVALID_VALUE, "vocab_parallel"),
        ("vocab_offset without vocab_parallel", mk(vocab_offset=128), Status.ERR_INVALID_VALUE, "vocab_offset"),
        ("vocab_parallel, a shard past vocab_total",
         mk(vocab_parallel=1, vocab_offset=4000, vocab_total=10000), Status.ERR_INVALID_SIZE, "vocab_total"),
    ]


def test_config_check():
    cfg = _good_config()
    st, msg = _lib.config_check(cfg)
    check(st == Status.OK and msg == "", "flce_config_check accepts the defaults (%s)" % st.name)
    for what, cfg, want, field in _bad_configs():
        st, msg = _lib.config_check(cfg)
        check(st == want and field in msg, "flce_config_check refuses %s: %s, '%s'" % (what, st.name, msg))


def test_workspace_size():
    lib = flce.load_library()
    budget = 256 << 20
    good = [("bf16 defaults", _good_config())]
    cfg = _good_config()
    cfg.dtype = cfg.d_hidden_dtype = cfg.d_weight_dtype = cfg.d_bias_dtype = Dtype.FP32
    cfg.target_type = IndexType.INT64
    cfg.has_bias = 1
    cfg.reduction = Reduction.NONE
    good.append(("fp32, int64 targets, bias, reduction none", cfg))
    cfg = _good_config()
    cfg.vocab, cfg.vocab_padded, cfg.label_smoothing, cfg.z_loss_scale, cfg.softcap = 50257, 50304, 0.1, 1e-4, 30.0
    good.append(("padded vocabulary, smoothing, z-loss, softcap", cfg))
    cfg = _good_config()
    cfg.temperature, cfg.has_class_weights, cfg.label_smoothing = 0.7, 1, 0.1
    good.append(("temperature, class weights, smoothing (1.1)", cfg))
    cfg = _good_config()
    cfg.vocab_parallel, cfg.vocab_offset, cfg.vocab_total = 1, 8000, 24000
    cfg.temperature, cfg.has_class_weights = 1.5, 1
    good.append(("vocab parallel shard 8000..16000 of 24000, temperature, class weights (2.0)", cfg))
    for what, cfg in good:
        st, nbytes = _lib.workspace_size(cfg, budget)
        chunk = _lib.chunk_tokens(cfg, nbytes)
        tile = _lib.vocab_tile(cfg, nbytes)
        check(st == Status.OK and 0 < nbytes <= budget and 1 <= chunk <= cfg.n_tokens and 64 <= tile,
              "workspace for %s: %s, %d bytes within 256 MiB, chunks of %d tokens, tiles of %d columns"
              % (what, st.name, nbytes, chunk, tile))
    cfg = _good_config()
    st, nbytes = _lib.workspace_size(cfg, 0)
    check(st == Status.OK and 0 < nbytes <= (1 << 30), "budget 0 means 1 GiB: %s, %d bytes" % (st.name, nbytes))
    # too small a budget: FLCE_ERR_WORKSPACE with the true minimum
    st, minimum = _lib.workspace_size(cfg, 1)
    at_min, below = _lib.chunk_tokens(cfg, minimum), _lib.chunk_tokens(cfg, minimum - 1)
    check(st == Status.ERR_WORKSPACE and minimum > 1 and at_min >= 1 and below == 0,
          "a 1-byte budget: %s, minimum %d bytes (chunks of %d tokens there, %d one byte below)"
          % (st.name, minimum, at_min, below))
    for what, cfg, want, _ in _bad_configs():
        st, _ = _lib.workspace_size(cfg, budget)
        check(st == want, "flce_workspace_size refuses %s with %s (%s)" % (what, want.name, Status(st).name))
    st = lib.flce_workspace_size(ctypes.byref(_good_config()), budget, None)
    check(st == Status.ERR_NULL_POINTER, "flce_workspace_size with bytes = NULL: %s" % Status(st).name)
    st = lib.flce_workspace_size(None, budget, ctypes.byref(ctypes.c_size_t()))
    check(st == Status.ERR_NULL_POINTER, "flce_workspace_size with config = NULL: %s" % Status(st).name)
    check(_lib.chunk_tokens(_bad_configs()[0][1], budget) == 0, "flce_chunk_tokens of a bad config is 0")


def test_status_strings():
    names = [flce._lib.status_string(s) for s in Status]
    check(all(names) and len(set(names)) == len(names), "flce_status_string: a distinct text per status")
    check(flce._lib.status_string(99) == "unknown flce status", "flce_status_string(99): unknown")


def test_error_class():
    e = flce.FlceError(Status.ERR_TARGET, "flce_forward: target[3] = 9")
    check(isinstance(e, RuntimeError) and e.status == Status.ERR_TARGET and "target[3]" in str(e),
          "FlceError carries the status and the message")


def _load_in_subprocess(env_path):
    env = dict(os.environ)
    env["FLCE_LIBRARY"] = env_path
    code = "import sys; sys.path.insert(0, %r); import flce; flce.load_library()" % PKG_ROOT
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_loader_errors():
    r = _load_in_subprocess("/nonexistent/libflce.so")
    check(r.returncode != 0 and "FlceLibraryError" in r.stderr and "/nonexistent/libflce.so" in r.stderr
          and "FLCE_LIBRARY" in r.stderr, "a missing $FLCE_LIBRARY: FlceLibraryError naming the path tried")
    # without $FLCE_LIBRARY: the repository's build/, then the package's copy
    saved = os.environ.pop("FLCE_LIBRARY", None)
    try:
        paths = [p for p, _ in _lib.candidate_paths()]
    finally:
        if saved is not None:
            os.environ["FLCE_LIBRARY"] = saved
    check(paths == [os.path.join(REPO, "build", "libflce.so"), os.path.join(PKG_ROOT, "flce", "libflce.so")],
          "without $FLCE_LIBRARY the loader tries %s" % paths)
    tmp = tempfile.mkdtemp(prefix="flce_notlib_")
    try:
        fake = os.path.join(tmp, "libflce.so")
        with open(fake, "w") as f:
            f.write("not a library\n")
        r = _load_in_subprocess(fake)
        check(r.returncode != 0 and "cannot load" in r.stderr and fake in r.stderr,
              "a file that is no library: FlceLibraryError 'cannot load' naming it")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _FakeLib:
    def __init__(self, version, config_size, tensors_size):
        self.flce_version = lambda: version
        self.flce_config_size = lambda: config_size
        self.flce_tensors_size = lambda: tensors_size


def test_abi_refusal():
    good = (_lib.VERSION_MAJOR * 1000 + _lib.VERSION_MINOR, ctypes.sizeof(Config), ctypes.sizeof(Tensors))
    cases = [("major + 1", (good[0] + 1000, good[1], good[2]), "ABI"),
             ("an older minor", (good[0] - 1, good[1], good[2]) if _lib.VERSION_MINOR > 0 else None, "ABI"),
             ("ABI 1.1 (the options without vocab parallelism)", (1001, good[1], good[2]), "ABI"),
             ("a larger flce_config", (good[0], good[1] + 8, good[2]), "flce_config"),
             ("a larger flce_tensors", (good[0], good[1], good[2] + 8), "flce_tensors")]
    for what, args, word in cases:
        if args is None:
            continue
        try:
            _lib._check_abi(_FakeLib(*args), "fake.so")
            check(False, "a library with %s is refused" % what)
        except flce.FlceLibraryError as e:
            check(word in str(e) and "fake.so" in str(e), "a library with %s is refused: %s" % (what, e))
    try:
        _lib._check_abi(_FakeLib(good[0] + 1, good[1], good[2]), "fake.so")
        check(True, "a library with a newer minor version is accepted")
    except flce.FlceLibraryError as e:
        check(False, "a library with a newer minor version is accepted: %s" % e)

    class Old:
        pass
    try:
        _lib._check_abi(Old(), "old.so")
        check(False, "a library without flce_version is refused")
    except flce.FlceLibraryError as e:
        check("flce_version" in str(e), "a library without flce_version is refused: %s" % e)


def test_scale_device_checks():
    # flce_scale_device's argument checks come before any GPU work (n = 0 launches nothing)
    lib = flce.load_library()
    cases = [("n -1", (None, int(Dtype.BF16), -1, None, None), Status.ERR_INVALID_SIZE),
             ("dtype 2", (None, 2, 4, None, None), Status.ERR_INVALID_VALUE),
             ("x and scale NULL with n 4", (None, int(Dtype.BF16), 4, None, None), Status.ERR_NULL_POINTER),
             ("n 0", (None, int(Dtype.FP32), 0, None, None), Status.OK)]
    for what, args, want in cases:
        got = lib.flce_scale_device(*args)
        check(got == want, "flce_scale_device, %s: %s (want %s)" % (what, Status(got).name, want.name))


def test_cast_scaled_device_checks():
    # flce_cast_scaled_device's argument checks come before any GPU work (n = 0 launches nothing)
    lib = flce.load_library()
    cases = [("n -1", (None, None, int(Dtype.BF16), -1, None, None), Status.ERR_INVALID_SIZE),
             ("dtype 2", (None, None, 2, 4, None, None), Status.ERR_INVALID_VALUE),
             ("x and out NULL with n 4", (None, None, int(Dtype.BF16), 4, None, None), Status.ERR_NULL_POINTER),
             ("n 0", (None, None, int(Dtype.FP32), 0, None, None), Status.OK)]
    for what, args, want in cases:
        got = lib.flce_cast_scaled_device(*args)
        check(got == want, "flce_cast_scaled_device, %s: %s (want %s)" % (what, Status(got).name, want.name))


def test_d_weight_plan():
    # the binding's choice for d_weight: bf16 from flce where one chunk holds every token, with
    # no vocabulary tiles, within the base budget plus V x H x 2 bytes, else fp32 (cast by the binding); fp32 inputs: fp32
    cfg = _lib.config(64, 64, 1000)
    cfg.dtype = Dtype.BF16
    cfg.d_hidden_dtype = Dtype.BF16
    dt, budget = _lib.d_weight_plan(cfg, 0)
    check((dt, budget) == (Dtype.BF16, (1 << 30) + 1000 * 64 * 2) and cfg.d_weight_dtype == Dtype.FP32,
          "d_weight_plan: one chunk within 1 GiB + V H 2 bytes: bf16 (%s, %d), cfg untouched" % (Dtype(dt).name, budget))
    dt, budget = _lib.d_weight_plan(cfg, 4096)
    check((dt, budget) == (Dtype.FP32, 4096),
          "d_weight_plan: no single chunk within a 4 KiB budget + V H 2: fp32 and the base budget (%s, %d)"
          % (Dtype(dt).name, budget))
    # as planned for an H200 (flce_dev_set_plan_sms, flce_internal.h: the Hopper path's planner on
    # any machine): 16384 tokens fit in one chunk within 1 GiB + V H 2 only over vocabulary tiles
    # (the lean schedule), which is slower than an fp32 d_W: fp32
    big = _lib.config(16384, 4096, 151936)
    big.dtype = Dtype.BF16
    big.d_hidden_dtype = Dtype.BF16
    plan_sms = flce.load_library().flce_dev_set_plan_sms
    plan_sms.argtypes, plan_sms.restype = [ctypes.c_int], None
    plan_sms(132)
    try:
        big.d_weight_dtype = Dtype.BF16
        tiled = _lib.vocab_tile(big, (1 << 30) + 151936 * 4096 * 2)
        big.d_weight_dtype = Dtype.FP32
        dt, budget = _lib.d_weight_plan(big, 0)
    finally:
        plan_sms(0)
    check(tiled < 151936 and (dt, budget) == (Dtype.FP32, 1 << 30),
          "d_weight_plan: one chunk over vocabulary tiles (%d of 151936) is not taken: fp32 and 1 GiB (%s, %d)"
          % (tiled, Dtype(dt).name, budget))
    # a bf16 d_weight that flce writes whole is then sized within that budget: at the Llama 3 8B
    # and Qwen2.5 7B heads (4096 tokens), whose fp32 accumulator alone (V x H x 4 bytes) is more
    # than the budget, the binding's default call must not fail for want of one it never uses
    for N, H, V in ((4096, 4096, 128256), (4096, 3584, 152064)):
        head = _lib.config(N, H, V)
        head.dtype = Dtype.BF16
        head.d_hidden_dtype = Dtype.BF16
        plan_sms(132)
        try:
            dt, budget = _lib.d_weight_plan(head, 0)
            head.d_weight_dtype = dt
            st, ws = _lib.workspace_size(head, budget)
            chunk = _lib.chunk_tokens(head, ws) if st == Status.OK else 0
        finally:
            plan_sms(0)
        check(dt == Dtype.BF16 and st == Status.OK and ws <= budget and chunk == N,
              "d_weight_plan then workspace_size at %dx%dx%d: %s d_weight, %s, %d bytes of a %d budget, one "
              "chunk (%d tokens)" % (N, H, V, Dtype(dt).name, Status(st).name, ws, budget, chunk))
    # the binding's sizing over a grid of shapes and budgets, on both planners (132 SMs, and the
    # cuBLASLt path's): a workspace within the budget that plans a chunk (every token for a bf16
    # d_weight), or FLCE_ERR_WORKSPACE for an fp32 one with a true minimum above the budget
    bad, first = 0, None
    for sms in (132, 0):
        plan_sms(sms)
        try:
            for N in (1, 7, 512, 4096, 16384):
                for H in (64, 2048, 3584, 8192):
                    for V in (1003, 50304, 128256, 176245):
                        for base in (8 << 20, 40 << 20, 1 << 30):
                            c = _lib.config(N, H, V)
                            c.dtype = Dtype.BF16
                            c.d_hidden_dtype = Dtype.BF16
                            dt, budget = _lib.d_weight_plan(c, base)
                            c.d_weight_dtype = dt
                            st, ws = _lib.workspace_size(c, budget)
                            if st == Status.OK:
                                chunk = _lib.chunk_tokens(c, ws)
                                ok = ws <= budget and chunk >= 1 and (dt != Dtype.BF16 or chunk == N)
                            else:
                                ok = st == Status.ERR_WORKSPACE and dt == Dtype.FP32 and ws > budget
                            if not ok:
                                bad += 1
                                first = first or (sms, N, H, V, base, Dtype(dt).name, Status(st).name, ws, budget)
        finally:
            plan_sms(0)
    check(bad == 0, "the binding's workspace over 480 shapes and budgets: %d inconsistent%s"
          % (bad, ", first (sms, N, H, V, base, d_weight, status, bytes, budget) %s" % (first,) if first else ""))
    cfg.dtype = Dtype.FP32
    cfg.d_hidden_dtype = Dtype.FP32
    dt, budget = _lib.d_weight_plan(cfg, 0)
    check((dt, budget) == (Dtype.FP32, 1 << 30), "d_weight_plan: fp32 inputs: fp32 (%s, %d)" % (Dtype(dt).name, budget))


def main():
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    # in the order written
    tests.sort(key=lambda f: f.__code__.co_firstlineno)
    for t in tests:
        try:
            t()
        except Exception as e:  # a test that dies counts as one failure, and the rest run
            check(False, "%s raised %s: %s" % (t.__name__, type(e).__name__, e))
    print("%d passed, %d failed" % (_passed, _failed))
    return 0 if _failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
