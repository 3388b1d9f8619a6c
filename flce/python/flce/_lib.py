"""
ctypes layer over libflce.so: the structs and enums of flce/flce.h mirrored field by field,
the library's functions with their C signatures, and the ABI check that refuses a library
built from another layout. Imports without torch and without a GPU: loading the library and
the functions that need no device (flce_config_init, flce_config_check, flce_workspace_size,
flce_chunk_tokens, flce_vocab_tile, flce_version, ...) work on any machine with the CUDA
runtime libraries the library links (cuBLASLt).

Where the library is looked for, in this order (the first that exists is loaded):
  1. $FLCE_LIBRARY, when set (a path; it must exist)
  2. <repository>/build/libflce.so, for the package used from its source tree
     (pip install -e, or flce/python on sys.path): `make lib` builds it
  3. libflce.so next to this file, when a copy was installed as package data
"""
import ctypes
import enum
import os
import sys
import threading

# --- flce.h's ABI: keep in step with the header (the CPU test compares every offset) ---------

VERSION_MAJOR = 2   # FLCE_VERSION_MAJOR this binding mirrors
VERSION_MINOR = 3   # FLCE_VERSION_MINOR it needs at least (2.0: the options of 1.1, temperature,
                    # class weights, entropy and log-probabilities, and vocab parallelism's fields;
                    # 2.1: flce_scale_device and 2.3: flce_cast_scaled_device, which the backward
                    # uses)


class Status(enum.IntEnum):
    OK = 0
    ERR_NULL_POINTER = 1
    ERR_INVALID_SIZE = 2
    ERR_INVALID_VALUE = 3
    ERR_MISALIGNED = 4
    ERR_WORKSPACE = 5
    ERR_TARGET = 6
    ERR_CUDA = 7
    ERR_CUBLAS = 8
    ERR_OUT_OF_MEMORY = 9
    ERR_COMM = 10


class Dtype(enum.IntEnum):
    BF16 = 0
    FP32 = 1


class IndexType(enum.IntEnum):
    INT32 = 0
    INT64 = 1


class Reduction(enum.IntEnum):
    MEAN = 0
    SUM = 1
    NONE = 2


_c_enum = ctypes.c_int  # a C enum of small non-negative values: 4 bytes, int's alignment


class Config(ctypes.Structure):
    """flce_config"""
    _fields_ = [
        ("n_tokens", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("vocab", ctypes.c_int64),
        ("vocab_padded", ctypes.c_int64),
        ("dtype", _c_enum),
        ("target_type", _c_enum),
        ("ignore_index", ctypes.c_int64),
        ("reduction", _c_enum),
        ("label_smoothing", ctypes.c_float),
        ("z_loss_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("grad_scale", ctypes.c_float),
        ("has_bias", ctypes.c_int),
        ("d_hidden_dtype", _c_enum),
        ("accumulate_d_hidden", ctypes.c_int),
        ("d_weight_dtype", _c_enum),
        ("accumulate_d_weight", ctypes.c_int),
        ("d_bias_dtype", _c_enum),
        ("accumulate_d_bias", ctypes.c_int),
        ("max_chunk_tokens", ctypes.c_int64),
        ("max_vocab_tile", ctypes.c_int64),
        ("bf16_logits", ctypes.c_int),
        # since 1.1
        ("temperature", ctypes.c_float),
        ("has_class_weights", ctypes.c_int),
        # since 2.0: vocabulary parallelism; its communicator (flce_set_comm) is not bound here
        ("vocab_parallel", ctypes.c_int),
        ("d_hidden_partial", ctypes.c_int),
        ("vocab_offset", ctypes.c_int64),
        ("vocab_total", ctypes.c_int64),
    ]


class Tensors(ctypes.Structure):
    """flce_tensors: device pointers (ints from torch's data_ptr(), or None for NULL)"""
    _fields_ = [
        ("hidden", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("targets", ctypes.c_void_p),
        ("grad_token_loss", ctypes.c_void_p),
        ("loss", ctypes.c_void_p),
        ("token_loss", ctypes.c_void_p),
        ("token_lse", ctypes.c_void_p),
        ("d_hidden", ctypes.c_void_p),
        ("d_weight", ctypes.c_void_p),
        ("d_bias", ctypes.c_void_p),
        # 1.1
        ("class_weights", ctypes.c_void_p),
        ("token_entropy", ctypes.c_void_p),
        ("token_logprob", ctypes.c_void_p),
        ("grad_entropy", ctypes.c_void_p),
        ("grad_logprob", ctypes.c_void_p),
    ]


_P = ctypes.c_void_p
_PCFG = ctypes.POINTER(Config)
_PT = ctypes.POINTER(Tensors)
# name: (restype, argtypes)
_SIGNATURES = {
    "flce_version": (ctypes.c_int, []),
    "flce_config_size": (ctypes.c_size_t, []),
    "flce_tensors_size": (ctypes.c_size_t, []),
    "flce_config_init": (None, [_PCFG, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
    "flce_config_check": (ctypes.c_int, [_PCFG, ctypes.c_char_p, ctypes.c_size_t]),
    "flce_workspace_size": (ctypes.c_int, [_PCFG, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "flce_chunk_tokens": (ctypes.c_int64, [_PCFG, ctypes.c_size_t]),
    "flce_vocab_tile": (ctypes.c_int64, [_PCFG, ctypes.c_size_t]),
    "flce_create": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "flce_destroy": (None, [_P]),
    "flce_set_autotune": (None, [_P, ctypes.c_int]),
    "flce_set_hopper": (None, [_P, ctypes.c_int]),
    "flce_hopper_default": (ctypes.c_int, []),
    "flce_forward_backward": (ctypes.c_int, [_P, _PCFG, _PT, _P, ctypes.c_size_t, _P]),
    "flce_forward": (ctypes.c_int, [_P, _PCFG, _PT, _P, ctypes.c_size_t, _P]),
    "flce_check_errors": (ctypes.c_int, [_P, _P]),
    "flce_last_error": (ctypes.c_char_p, [_P]),
    "flce_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "flce_scale_device": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int64, _P, _P]),
    "flce_cast_scaled_device": (ctypes.c_int, [_P, _P, ctypes.c_int, ctypes.c_int64, _P, _P]),
}


class FlceLibraryError(OSError):
    """libflce.so was not found, could not be loaded, or is not the ABI this binding mirrors."""


class FlceError(RuntimeError):
    """A call of the library failed: .status is the flce_status, the message flce's own."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        super().__init__(message)


# --- finding and loading the library ----------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
# flce/python/flce/_lib.py -> the repository's root
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))


def candidate_paths():
    """[(path, where it comes from)] in the order they are tried."""
    env = os.environ.get("FLCE_LIBRARY")
    if env:
        return [(env, "$FLCE_LIBRARY")]
    paths = []
    if os.path.isfile(os.path.join(_REPO, "flce", "flce.h")):  # used from the source tree
        paths.append((os.path.join(_REPO, "build", "libflce.so"), "the repository's build (make lib)"))
    paths.append((os.path.join(_HERE, "libflce.so"), "a copy installed with the package"))
    return paths


_lock = threading.Lock()
_lib = None


def _check_abi(lib, path):
    if not hasattr(lib, "flce_version"):
        raise FlceLibraryError(
            "%s has no flce_version(): it predates the ABI check this binding needs; rebuild it "
            "(make lib)" % path)
    version = lib.flce_version()
    major, minor = version // 1000, version % 1000
    if major != VERSION_MAJOR or minor < VERSION_MINOR:
        raise FlceLibraryError(
            "%s is flce ABI %d.%d; this binding mirrors %d.%d (needs major %d, minor >= %d): "
            "rebuild the library or update flce/python" % (path, major, minor, VERSION_MAJOR,
                                                          VERSION_MINOR, VERSION_MAJOR, VERSION_MINOR))
    for what, got, want in (("flce_config", lib.flce_config_size(), ctypes.sizeof(Config)),
                            ("flce_tensors", lib.flce_tensors_size(), ctypes.sizeof(Tensors))):
        if got != want:
            raise FlceLibraryError(
                "%s: sizeof(%s) is %d bytes in the library and %d in this binding: the struct "
                "layouts differ; rebuild the library or update flce/python/flce/_lib.py"
                % (path, what, got, want))


def load_library():
    """The loaded, ABI-checked library (loaded once per process)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, origin in candidate_paths():
            if not os.path.isfile(path):
                tried.append("%s (%s): not found" % (path, origin))
                continue
            try:
                lib = ctypes.CDLL(os.path.abspath(path))
            except OSError as e:
                raise FlceLibraryError("cannot load %s (%s): %s" % (path, origin, e)) from None
            for name, (restype, argtypes) in _SIGNATURES.items():
                if name in ("flce_version", "flce_config_size", "flce_tensors_size") and \
                        not hasattr(lib, name):
                    continue  # reported by _check_abi
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise FlceLibraryError("%s has no function %s" % (path, name)) from None
                fn.restype = restype
                fn.argtypes = argtypes
            _check_abi(lib, path)
            _lib = lib
            return lib
        raise FlceLibraryError(
            "libflce.so not found; tried:\n  " + "\n  ".join(tried) +
            "\nBuild it with `make lib` in the repository and use the package from there (pip "
            "install -e), copy it into the package before installing, or point $FLCE_LIBRARY at it.")


def library_path():
    """The path of the library load_library() loads (or raises FlceLibraryError)."""
    lib = load_library()
    return lib._name


# --- thin wrappers ----------------------------------------------------------------------------

def version():
    """(major, minor) of the loaded library."""
    v = load_library().flce_version()
    return v // 1000, v % 1000


def status_string(status):
    return load_library().flce_status_string(int(status)).decode()


def config(n_tokens, hidden, vocab):
    """A Config filled with the library's defaults (flce_config_init)."""
    cfg = Config()
    load_library().flce_config_init(ctypes.byref(cfg), n_tokens, hidden, vocab)
    return cfg


def config_check(cfg):
    """(status, message) of flce_config_check."""
    buf = ctypes.create_string_buffer(512)
    st = load_library().flce_config_check(ctypes.byref(cfg), buf, len(buf))
    return Status(st), buf.value.decode(errors="replace")


def workspace_size(cfg, budget_bytes=0):
    """(status, bytes) of flce_workspace_size: FLCE_ERR_WORKSPACE comes with the minimum."""
    n = ctypes.c_size_t(0)
    st = load_library().flce_workspace_size(ctypes.byref(cfg), budget_bytes, ctypes.byref(n))
    return Status(st), n.value


def chunk_tokens(cfg, workspace_bytes):
    return load_library().flce_chunk_tokens(ctypes.byref(cfg), workspace_bytes)


def vocab_tile(cfg, workspace_bytes):
    return load_library().flce_vocab_tile(ctypes.byref(cfg), workspace_bytes)


def d_weight_plan(cfg, base_budget=0):
    """For a binding that hands out d_weight in the inputs' dtype: (the d_weight_dtype to ask flce
    for, the workspace budget), on the current device's default GEMM path. bf16 inputs: where one
    chunk holds every token, with no vocabulary tiles, within the base budget plus V x H x 2 bytes
    (the fp32 d_weight's cost beyond the bf16 one handed out), flce writes the bf16 d_weight
    itself, no pass after it;
    otherwise an fp32 d_weight, added up over the chunks, to be cast (with the upstream scale) in
    one pass: a bf16 d_weight over several chunks needs its fp32 accumulator in the workspace
    beside the bf16 output, more memory than an fp32 d_weight and its cast. fp32 inputs: fp32 and
    the base budget. cfg is left as it was."""
    base = base_budget or (1 << 30)
    if cfg.dtype != Dtype.BF16:
        return Dtype.FP32, base
    saved = cfg.d_weight_dtype
    try:
        cfg.d_weight_dtype = Dtype.BF16
        budget = base + cfg.vocab_padded * cfg.hidden * 2
        # the chunk schedule only: one chunk of every token over vocabulary tiles writes
        # d_weight whole too, but pays the tile schedule's second logits GEMM, which costs more
        # than chunks of fewer tokens with an fp32 d_weight (dev/RESULTS.md, "What was tried")
        # (and only where flce_workspace_size sizes that call within the budget: a budget below
        # what the plain gradients' minimum takes, the cuBLASLt workspace, keeps fp32)
        if (chunk_tokens(cfg, budget) == cfg.n_tokens and vocab_tile(cfg, budget) >= cfg.vocab_padded
                and workspace_size(cfg, budget)[0] == Status.OK):
            return Dtype.BF16, budget
    finally:
        cfg.d_weight_dtype = saved
    return Dtype.FP32, base


class Context:
    """An flce_context (flce_create on the current CUDA device), destroyed with the object.
    Not thread-safe by itself: hold .lock around calls, and read last_error() under it."""

    def __init__(self):
        lib = load_library()
        handle = ctypes.c_void_p()
        st = lib.flce_create(ctypes.byref(handle))
        if st != Status.OK:
            raise FlceError(st, "flce_create: %s" % status_string(st))
        self._lib = lib
        self.handle = handle
        self.lock = threading.Lock()

    def last_error(self):
        msg = self._lib.flce_last_error(self.handle)
        return msg.decode(errors="replace") if msg else ""

    def raise_for(self, status, what):
        if status != Status.OK:
            msg = self.last_error() or status_string(status)
            raise FlceError(status, "%s: %s" % (what, msg))

    def __del__(self, _finalizing=sys.is_finalizing):
        handle = getattr(self, "handle", None)
        # at interpreter exit the CUDA runtime may be going down: leave it to the process's end
        if handle is not None and handle.value and not _finalizing():
            self._lib.flce_destroy(handle)
            self.handle = None
