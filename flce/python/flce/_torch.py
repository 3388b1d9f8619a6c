"""
PyTorch binding: flce.linear_cross_entropy (a torch.autograd.Function over flce_forward /
flce_forward_backward) and the nn.Module FusedLinearCrossEntropyLoss.

Every call runs on torch's current CUDA stream of the inputs' device, with its workspace
taken from torch's caching allocator. With reduction "mean" or "sum" the gradients are
computed in the forward call (as Liger does: the logits are never held) and scaled by
grad_output in backward(); with reduction "none" the upstream gradient is a per-token vector
known only at backward time, so the forward call computes the losses alone and backward()
runs flce_forward_backward with it as flce's grad_token_loss. With return_logprobs or
return_entropy the outputs' upstream gradients are known only at backward time too: the
forward call computes the values, and backward() runs flce_forward_backward once with all
three upstream gradients (the loss's as a per-token vector: grad_output, divided by the mean's
divisor, computed on the device without a host sync).
"""
import contextlib
import math
import threading

import torch

from . import _lib
from ._lib import Dtype, FlceError, IndexType, Reduction, Status

_DTYPES = {torch.bfloat16: Dtype.BF16, torch.float32: Dtype.FP32}
_INDEX_TYPES = {torch.int32: IndexType.INT32, torch.int64: IndexType.INT64}
_REDUCTIONS = {"mean": Reduction.MEAN, "sum": Reduction.SUM, "none": Reduction.NONE}

# --- contexts and workspace budget ------------------------------------------------------------

_contexts = {}                  # device index -> _lib.Context (one per device, calls under its lock)
_contexts_lock = threading.Lock()
_workspace_budget = 0           # bytes; 0 = the library's default (1 GiB)


def set_workspace_budget(nbytes):
    """Caps the workspace of each call (bytes beyond inputs and gradients; 0 = the library's
    default, 1 GiB). A smaller budget means smaller token chunks or vocabulary tiles: slower,
    never wrong. Returns the previous value."""
    global _workspace_budget
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError("workspace budget must be an int >= 0 (bytes), got %r" % (nbytes,))
    old, _workspace_budget = _workspace_budget, nbytes
    return old


def _context(device):
    """The flce context of a CUDA device, created on first use (with that device current)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _contexts_lock:
        ctx = _contexts.get(index)
        if ctx is None:
            with torch.cuda.device(index):
                ctx = _lib.Context()
            _contexts[index] = ctx
        return ctx


def _device_context(device):
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError("device must be a CUDA device, got %s" % device)
    return device, _context(device)


def set_hopper(on, device=None):
    """flce_set_hopper for the calls on device (default: the current one): True (the default on
    an H100/H200 with an sm_90a build) runs bf16 inputs on flce's own Hopper GEMMs, False on
    cuBLASLt's. Both are exact to the bf16 floor; the workspace each call takes serves both."""
    device, ctx = _device_context(device)
    with torch.cuda.device(device), ctx.lock:
        _lib.load_library().flce_set_hopper(ctx.handle, 1 if on else 0)


def set_autotune(on, device=None):
    """flce_set_autotune for the calls on device: True (the default) times cuBLASLt's candidate
    algorithms at the first call of each GEMM shape; False keeps the heuristic's pick (bitwise
    reproducible across processes)."""
    device, ctx = _device_context(device)
    with torch.cuda.device(device), ctx.lock:
        _lib.load_library().flce_set_autotune(ctx.handle, 1 if on else 0)


def hopper_default(device=None):
    """Whether calls on device take the Hopper path by default (flce_hopper_default)."""
    device, _ = _device_context(device)
    with torch.cuda.device(device):
        return bool(_lib.load_library().flce_hopper_default())


def check_errors(device=None):
    """Waits for the current stream of device (default: the current device) and raises
    FlceError (status ERR_TARGET) for a target id outside [0, V) that is not ignore_index met by
    an earlier call there. Such a target never indexes memory: the call's loss is NaN and the
    error is reported here or by the next call on that device."""
    device, ctx = _device_context(device)
    with torch.cuda.device(device), ctx.lock:
        stream = torch.cuda.current_stream(device).cuda_stream
        ctx.raise_for(_lib.load_library().flce_check_errors(ctx.handle, stream), "flce_check_errors")


# --- argument checks --------------------------------------------------------------------------

class _Options:
    __slots__ = ("ignore_index", "reduction", "label_smoothing", "z_loss", "softcap", "temperature",
                 "return_logprobs", "return_entropy")

    def __init__(self, ignore_index, reduction, label_smoothing, z_loss, softcap, temperature=1.0,
                 return_logprobs=False, return_entropy=False):
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.softcap = softcap
        self.temperature = temperature
        self.return_logprobs = return_logprobs
        self.return_entropy = return_entropy


def _number(name, x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError("%s must be a number, got %r" % (name, x))
    return float(x)


def _check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, ce_weight, temperature,
                   return_logprobs, return_entropy):
    """The scalar options as flce takes them (raises naming the argument); ce_weight's tensor
    checks are _check_ce_weight's."""
    if ce_weight is not None and not isinstance(ce_weight, torch.Tensor):
        raise TypeError("ce_weight must be a torch.Tensor of shape (V,) or None, got %s" % type(ce_weight).__name__)
    temp = _number("temperature", temperature)
    if not (math.isfinite(temp) and temp > 0.0):
        raise ValueError("temperature = %r must be finite and > 0" % (temperature,))
    for name, flag in (("return_logprobs", return_logprobs), ("return_entropy", return_entropy)):
        if not isinstance(flag, bool):
            raise TypeError("%s must be a bool, got %r" % (name, flag))
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError("ignore_index must be an int, got %r" % (ignore_index,))
    if not -2**63 <= ignore_index < 2**63:
        raise ValueError("ignore_index = %d is outside int64" % ignore_index)
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError("reduction must be 'mean', 'sum' or 'none', got %r" % (reduction,))
    eps = _number("label_smoothing", label_smoothing)
    if not 0.0 <= eps < 1.0:
        raise ValueError("label_smoothing = %r must be in [0, 1)" % (label_smoothing,))
    zl = _number("z_loss", z_loss)
    if not (math.isfinite(zl) and zl >= 0.0):
        raise ValueError("z_loss = %r must be finite and >= 0" % (z_loss,))
    cap = 0.0
    if softcap is not None:
        cap = _number("softcap", softcap)
        if not (math.isfinite(cap) and cap > 0.0):
            raise ValueError("softcap = %r must be None (off) or finite and > 0" % (softcap,))
    return _Options(ignore_index, reduction, eps, zl, cap, temp, return_logprobs, return_entropy)


def _check_ce_weight(ce_weight, hidden, V):
    """ce_weight as flce takes it: a contiguous float32 (V,) tensor on hidden's device, or None.
    (Its values are not inspected, which would wait for the device: they must be finite.)"""
    if ce_weight is None:
        return None
    if ce_weight.dim() != 1 or ce_weight.shape[0] != V:
        raise ValueError("ce_weight must have shape (V,) = (%d,), got %s" % (V, tuple(ce_weight.shape)))
    if ce_weight.device != hidden.device:
        raise ValueError("ce_weight is on %s, hidden on %s: all must be on one CUDA device"
                         % (ce_weight.device, hidden.device))
    if not ce_weight.is_floating_point():
        raise TypeError("ce_weight has dtype %s; it must be a floating-point tensor" % ce_weight.dtype)
    return ce_weight.detach().to(torch.float32).contiguous()


def _check_tensors(hidden, weight, target, bias):
    """(N, H, V) after checking types, devices, dtypes, shapes, contiguity and alignment."""
    for name, t in (("hidden", hidden), ("weight", weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError("bias must be a torch.Tensor or None, got %s" % type(bias).__name__)
    if hidden.device.type != "cuda":
        raise ValueError("hidden is on %s; flce runs on CUDA devices only" % hidden.device)
    for name, t in (("weight", weight), ("target", target), ("bias", bias)):
        if t is not None and t.device != hidden.device:
            raise ValueError("%s is on %s, hidden on %s: all must be on one CUDA device"
                             % (name, t.device, hidden.device))
    if hidden.dtype not in _DTYPES:
        raise TypeError("hidden has dtype %s; flce takes torch.bfloat16 or torch.float32" % hidden.dtype)
    if weight.dtype != hidden.dtype:
        raise TypeError("weight has dtype %s but hidden %s: they must match" % (weight.dtype, hidden.dtype))
    if bias is not None and bias.dtype != hidden.dtype:
        raise TypeError("bias has dtype %s but hidden %s: they must match" % (bias.dtype, hidden.dtype))
    if target.dtype not in _INDEX_TYPES:
        raise TypeError("target has dtype %s; flce takes torch.int32 or torch.int64" % target.dtype)
    if hidden.dim() < 2:
        raise ValueError("hidden must have shape (..., H) with at least 2 dimensions, got %s"
                         % tuple(hidden.shape))
    H = hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != H:
        raise ValueError("weight must have shape (V, H) with H = hidden.shape[-1] = %d, got %s"
                         % (H, tuple(weight.shape)))
    V = weight.shape[0]
    if V < 1:
        raise ValueError("weight has no rows (V = 0)")
    if tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise ValueError("target must have shape hidden.shape[:-1] = %s, got %s"
                         % (tuple(hidden.shape[:-1]), tuple(target.shape)))
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != V):
        raise ValueError("bias must have shape (V,) = (%d,), got %s" % (V, tuple(bias.shape)))
    N = target.numel()
    if N < 1:
        raise ValueError("hidden has no tokens (shape %s)" % (tuple(hidden.shape),))
    if H < 1:
        raise ValueError("hidden has H = 0 features")
    vec = 8 if hidden.dtype == torch.bfloat16 else 4
    if H % vec != 0:
        raise ValueError("hidden.shape[-1] = %d must be a multiple of %d for %s (flce loads rows "
                         "16 bytes at a time)" % (H, vec, hidden.dtype))
    for name, t, align in (("hidden", hidden, 16), ("weight", weight, 16),
                           ("target", target, target.element_size()), ("bias", bias, 4)):
        if t is None:
            continue
        if not t.is_contiguous():
            raise ValueError("%s must be contiguous (call .contiguous() on it)" % name)
        if t.data_ptr() % align != 0:
            raise ValueError("%s's data must be %d-byte aligned (it is a view at an offset); "
                             "pass a copy (.clone())" % (name, align))
    return N, H, V


# --- the call ---------------------------------------------------------------------------------

# A call's config and workspace size by what they are made from: the device, the shapes and
# dtypes, the options, which gradients, the budget. Made afresh they took ~0.2 ms of host time
# before every call's first kernel (three plans, and the config's fields set one by one through
# ctypes), time that an idle GPU waits; the call itself plans within the workspace it is given.
# A kept config is never changed (calls read it).
_configs = {}
_CONFIGS_MAX = 256


def _config(hidden, target, V, opt, reduction, has_bias, has_cw, want_w):
    """(flce_config, workspace bytes) of a call on hidden's device (current); want_w: it
    produces d_weight. Raises FlceError where no workspace within the budget serves the call."""
    N, H = target.numel(), hidden.shape[-1]
    key = (hidden.device.index, N, H, V, hidden.dtype, target.dtype, opt.ignore_index, reduction,
           opt.label_smoothing, opt.z_loss, opt.softcap, opt.temperature, has_bias, has_cw, want_w,
           _workspace_budget)
    hit = _configs.get(key)
    if hit is not None:
        return hit
    dtype = _DTYPES[hidden.dtype]
    cfg = _lib.config(N, H, V)
    cfg.dtype = dtype
    cfg.target_type = _INDEX_TYPES[target.dtype]
    cfg.ignore_index = opt.ignore_index
    cfg.reduction = _REDUCTIONS[reduction]
    cfg.label_smoothing = opt.label_smoothing
    cfg.z_loss_scale = opt.z_loss
    cfg.softcap = opt.softcap
    cfg.temperature = opt.temperature
    cfg.has_bias = 1 if has_bias else 0
    cfg.has_class_weights = 1 if has_cw else 0
    # d_hidden in the inputs' dtype; d_weight in it too where flce writes it whole in one chunk,
    # else in fp32 (added up over the chunks) and cast by _run or in backward (_lib.d_weight_plan
    # says which, within the memory of an fp32 d_weight and its cast); d_bias in fp32, cast
    cfg.d_hidden_dtype = dtype
    cfg.d_weight_dtype = Dtype.FP32
    cfg.d_bias_dtype = Dtype.FP32
    budget = _workspace_budget or (1 << 30)
    if want_w:
        cfg.d_weight_dtype, budget = _lib.d_weight_plan(cfg, _workspace_budget)
    st, ws_bytes = _lib.workspace_size(cfg, budget)
    if st != Status.OK:
        msg = _lib.config_check(cfg)[1] if st != Status.ERR_WORKSPACE else (
            "the workspace budget of %d bytes is too small for this problem: it needs at least "
            "%d (flce.set_workspace_budget)" % (_workspace_budget or (1 << 30), ws_bytes))
        raise FlceError(st, "flce_workspace_size: %s" % (msg or _lib.status_string(st)))
    if len(_configs) >= _CONFIGS_MAX:  # (many shapes: start over rather than grow)
        _configs.clear()
    _configs[key] = (cfg, ws_bytes)
    return cfg, ws_bytes


def _run(hidden, weight, target, bias, opt, want_h, want_w, want_b, backward, grad_token_loss=None,
         ce_weight=None, reduction=None, want_logprobs=False, want_entropy=False, grad_logprobs=None,
         grad_entropy=None, defer_cast=False):
    """One flce call on the current stream: (loss or token losses, d_hidden, d_weight, d_bias,
    logprobs, entropy), the gradients None unless wanted, logprobs and entropy None unless wanted;
    d_weight and d_bias in the inputs' dtype (fp32 with defer_cast, for the caller to cast). reduction overrides opt's; ce_weight is a float32
    (V,) tensor; grad_logprobs and grad_entropy float32 per-token upstream gradients."""
    reduction = opt.reduction if reduction is None else reduction
    H, V = hidden.shape[-1], weight.shape[0]
    dev = hidden.device
    lib = _lib.load_library()
    # (the device made current only where it is not: entering torch.cuda.device costs ~6-30 us)
    with torch.cuda.device(dev) if dev.index != torch.cuda.current_device() else contextlib.nullcontext():
        cfg, ws_bytes = _config(hidden, target, V, opt, reduction, bias is not None, ce_weight is not None,
                                bool(backward and want_w))
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)
        f32 = dict(dtype=torch.float32, device=dev)
        loss = torch.empty((), **f32) if reduction != "none" else None
        token_loss = torch.empty(target.shape, **f32) if reduction == "none" else None
        logprobs = torch.empty(target.shape, **f32) if want_logprobs else None
        entropy = torch.empty(target.shape, **f32) if want_entropy else None
        d_h = torch.empty_like(hidden) if backward and want_h else None
        d_w = torch.empty(V, H, dtype=torch.bfloat16 if cfg.d_weight_dtype == Dtype.BF16 else torch.float32,
                          device=dev) if backward and want_w else None
        d_b = torch.empty(V, **f32) if backward and want_b else None

        def ptr(t):
            return t.data_ptr() if t is not None else None

        t = _lib.Tensors(hidden=ptr(hidden), weight=ptr(weight), bias=ptr(bias), targets=ptr(target),
                         grad_token_loss=ptr(grad_token_loss), loss=ptr(loss),
                         token_loss=ptr(token_loss), token_lse=None, d_hidden=ptr(d_h),
                         d_weight=ptr(d_w), d_bias=ptr(d_b), class_weights=ptr(ce_weight),
                         token_entropy=ptr(entropy), token_logprob=ptr(logprobs),
                         grad_entropy=ptr(grad_entropy), grad_logprob=ptr(grad_logprobs))
        ctx = _context(dev)
        stream = torch.cuda.current_stream(dev).cuda_stream
        fn = lib.flce_forward_backward if backward else lib.flce_forward
        with ctx.lock:
            st = fn(ctx.handle, cfg, t, ws.data_ptr(), ws_bytes, stream)
            ctx.raise_for(st, "flce_forward_backward" if backward else "flce_forward")
        # ws goes back to the caching allocator on this stream: reused only by later work on it
        del ws
    out = loss if loss is not None else token_loss
    if not defer_cast:
        if d_w is not None and d_w.dtype != weight.dtype:
            d_w = d_w.to(weight.dtype)
        if d_b is not None and bias.dtype != torch.float32:
            d_b = d_b.to(bias.dtype)
    return out, d_h, d_w, d_b, logprobs, entropy


def _scaled_as(d, grad_output, dtype):
    """d * grad_output in dtype, for the gradients computed in the forward call. One already in
    its dtype (d_hidden; d_weight where flce wrote it whole) is scaled in place by
    flce_scale_device, which reads grad_output on the device and skips the pass when it is 1
    (loss.backward()): no host sync, no pass in the common case. An fp32 one (d_weight over
    several chunks, d_bias) is scaled and cast in one pass (flce_cast_scaled_device)."""
    scalar = grad_output.numel() == 1 and dtype in _DTYPES
    in_place = scalar and d.dtype == dtype
    if in_place or (scalar and d.dtype == torch.float32 and d.is_contiguous()):
        g = grad_output.detach().to(device=d.device, dtype=torch.float32).contiguous()
        lib = _lib.load_library()
        stream = torch.cuda.current_stream(d.device).cuda_stream
        if in_place:
            out, name = d, "flce_scale_device"
            st = lib.flce_scale_device(d.data_ptr(), int(_DTYPES[dtype]), d.numel(), g.data_ptr(), stream)
        else:
            # one pass with 16-byte accesses (torch's mixed-dtype multiply ran at 1.6 TB/s on
            # an H200)
            out, name = torch.empty(d.shape, dtype=dtype, device=d.device), "flce_cast_scaled_device"
            st = lib.flce_cast_scaled_device(d.data_ptr(), out.data_ptr(), int(_DTYPES[dtype]), d.numel(),
                                             g.data_ptr(), stream)
        if st != Status.OK:
            raise FlceError(st, "%s: %s" % (name, _lib.status_string(st)))
        return out
    if d.dtype == dtype:
        return d.mul_(grad_output)
    out = torch.empty(d.shape, dtype=dtype, device=d.device)
    torch.mul(d, grad_output, out=out)
    return out


class LinearCrossEntropyFunction(torch.autograd.Function):
    """autograd over flce: apply(hidden, weight, target, bias, options) with checked inputs."""

    @staticmethod
    def forward(ctx, hidden, weight, target, bias, opt, ce_weight=None):
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_b = bias is not None and ctx.needs_input_grad[3]
        ctx.opt = opt
        ctx.want = (want_h, want_w, want_b)
        ctx.grads = None
        if opt.reduction == "none":
            # the upstream gradient is per token: the gradients are computed in backward()
            ctx.save_for_backward(hidden, weight, target, bias, ce_weight)
            out = _run(hidden, weight, target, bias, opt, False, False, False, backward=False,
                       ce_weight=ce_weight)[0]
        else:
            # an fp32 d_weight or d_bias stays so until backward, which scales and casts it in one pass
            out, d_h, d_w, d_b = _run(hidden, weight, target, bias, opt, want_h, want_w, want_b,
                                      backward=True, ce_weight=ce_weight, defer_cast=True)[:4]
            ctx.grads = [d_h, d_w, d_b]
            ctx.grad_dtypes = [hidden.dtype, weight.dtype, bias.dtype if bias is not None else None]
        return out

    @staticmethod
    def backward(ctx, grad_output):
        opt = ctx.opt
        want_h, want_w, want_b = ctx.want
        if opt.reduction == "none":
            hidden, weight, target, bias, ce_weight = ctx.saved_tensors
            g = grad_output.reshape(-1).to(device=hidden.device, dtype=torch.float32).contiguous()
            _, d_h, d_w, d_b = _run(hidden, weight, target, bias, opt, want_h, want_w, want_b,
                                    backward=True, grad_token_loss=g, ce_weight=ce_weight)[:4]
            return d_h, d_w, None, d_b, None, None
        if ctx.grads is None:
            raise RuntimeError(
                "flce.linear_cross_entropy: backward ran twice through one call (retain_graph=True); "
                "with reduction 'mean' or 'sum' its gradients are computed in the forward call and "
                "handed out once: call it again for a second backward")
        grads = [_scaled_as(d, grad_output, dt) if d is not None else None
                 for d, dt in zip(ctx.grads, ctx.grad_dtypes)]
        ctx.grads = None
        return grads[0], grads[1], None, grads[2], None, None


def _per_token_upstream(grad_output, target, opt, ce_weight, V):
    """The loss's upstream gradient as flce's reduction-none grad_token_loss: grad_output per
    token for "none", broadcast for "sum", and for "mean" divided by the mean's divisor (the
    non-ignored tokens, or their targets' weights; 0 when that is 0, as flce's mean), all on the
    device."""
    dev = target.device
    if grad_output is None:
        return torch.zeros(target.numel(), dtype=torch.float32, device=dev)
    g = grad_output.to(device=dev, dtype=torch.float32)
    if opt.reduction == "none":
        return g.reshape(-1).contiguous()
    g = g.reshape(()).expand(target.numel())
    if opt.reduction == "sum":
        return g.contiguous()
    valid = (target.reshape(-1) != opt.ignore_index)
    if ce_weight is None:
        div = valid.sum().to(torch.float64)
    else:
        # a target outside [0, V) is clamped here only so that the gather stays in bounds: flce
        # reports it, and its loss is NaN
        idx = target.reshape(-1).clamp(0, V - 1).long()
        div = torch.where(valid, ce_weight[idx].double(), torch.zeros((), dtype=torch.float64, device=dev)).sum()
    scale = torch.where(div != 0, 1.0 / torch.where(div != 0, div, torch.ones_like(div)), torch.zeros_like(div))
    return (g.double() * scale).to(torch.float32).contiguous()


class LinearCrossEntropyOutputsFunction(torch.autograd.Function):
    """autograd over flce with per-token outputs: apply(hidden, weight, target, bias, ce_weight,
    options) -> (loss, logprobs, entropy), each of the last two present only if options ask for it.
    The forward call computes values only; backward() runs flce_forward_backward once with the
    upstream gradients of the loss (per token, reduction none), the log-probabilities and the
    entropy."""

    @staticmethod
    def forward(ctx, hidden, weight, target, bias, ce_weight, opt):
        ctx.set_materialize_grads(False)
        ctx.opt = opt
        ctx.want = (ctx.needs_input_grad[0], ctx.needs_input_grad[1],
                    bias is not None and ctx.needs_input_grad[3])
        ctx.save_for_backward(hidden, weight, target, bias, ce_weight)
        out, _, _, _, lp, ent = _run(hidden, weight, target, bias, opt, False, False, False, backward=False,
                                     ce_weight=ce_weight, want_logprobs=opt.return_logprobs,
                                     want_entropy=opt.return_entropy)
        outs = [out] + ([lp] if opt.return_logprobs else []) + ([ent] if opt.return_entropy else [])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        opt = ctx.opt
        hidden, weight, target, bias, ce_weight = ctx.saved_tensors
        want_h, want_w, want_b = ctx.want
        grads = list(grads)
        g_loss = grads.pop(0)
        g_lp = grads.pop(0) if opt.return_logprobs else None
        g_ent = grads.pop(0) if opt.return_entropy else None
        V = weight.shape[0]
        gtl = _per_token_upstream(g_loss, target, opt, ce_weight, V)

        def per_token(g):
            return g.reshape(-1).to(device=hidden.device, dtype=torch.float32).contiguous() if g is not None else None

        _, d_h, d_w, d_b = _run(hidden, weight, target, bias, opt, want_h, want_w, want_b, backward=True,
                                grad_token_loss=gtl, ce_weight=ce_weight, reduction="none",
                                grad_logprobs=per_token(g_lp), grad_entropy=per_token(g_ent))[:4]
        return d_h, d_w, None, d_b, None, None


def _autocast_dtype():
    """torch's CUDA autocast dtype when autocast is on, else None."""
    try:
        if not torch.is_autocast_enabled("cuda"):
            return None
        return torch.get_autocast_dtype("cuda")
    except (TypeError, AttributeError):  # torch < 2.4
        if not torch.is_autocast_enabled():
            return None
        return torch.get_autocast_gpu_dtype()


def linear_cross_entropy(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, ce_weight=None,
                         temperature=1.0, return_logprobs=False, return_entropy=False):
    """Cross-entropy of the logits hidden @ weight.T (+ bias) against target, without holding the
    logits, as F.cross_entropy(hidden @ weight.T + bias, target, ignore_index=...,
    reduction=..., label_smoothing=...) plus:
      z_loss   z * logsumexp(logits)^2 added to each non-ignored token's loss (PaLM's z-loss;
               Liger's lse_square_scale)
      softcap  logits -> softcap * tanh(logits / softcap) before the softmax (Gemma 2)
      temperature  logits / temperature before the softmax, after the softcap (as verl, vLLM)
      ce_weight    per-class weights (V,): F.cross_entropy's weight, label smoothing's term
               included; a mean divides by the non-ignored targets' weights (z-loss unweighted)
      return_logprobs, return_entropy  also return per-token log_softmax(logits)[target] (0
               for ignored tokens) and entropy -sum p log p (every token), float32 of target's
               shape, differentiable: the result is then (loss, logprobs, entropy) with None for
               the one not asked for (verl's use: their gradients flow into hidden and weight)
    hidden (..., H) and weight (V, H) are torch.bfloat16 or torch.float32 (the same), bias (V,)
    the same dtype, target hidden.shape[:-1] of torch.int32 or torch.int64, all contiguous on
    one CUDA device; H a multiple of 8 (bf16) or 4 (fp32). Returns a float32 scalar, or with
    reduction "none" float32 per-token losses of target's shape (0 for ignored tokens). Unlike
    F.cross_entropy, a mean over tokens that are all ignored is 0 (not NaN). Under CUDA autocast
    to bfloat16, hidden, weight and bias are cast to it first. A target id outside [0, V) that
    is not ignore_index makes the loss NaN and is reported by flce.check_errors() or by the next
    call on the device (FlceError).
    With return_logprobs or return_entropy the gradients are computed at backward time (one flce
    call there), for every reduction."""
    opt = _check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, ce_weight,
                         temperature, return_logprobs, return_entropy)
    if isinstance(hidden, torch.Tensor) and hidden.is_cuda and _autocast_dtype() == torch.bfloat16:
        hidden = hidden.to(torch.bfloat16)
        if isinstance(weight, torch.Tensor):
            weight = weight.to(torch.bfloat16)
        if isinstance(bias, torch.Tensor):
            bias = bias.to(torch.bfloat16)
    _check_tensors(hidden, weight, target, bias)
    cw = _check_ce_weight(ce_weight, hidden, weight.shape[0])
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad or
                                        (bias is not None and bias.requires_grad))
    if opt.return_logprobs or opt.return_entropy:
        if grad:
            outs = list(LinearCrossEntropyOutputsFunction.apply(hidden, weight, target, bias, cw, opt))
        else:
            out, _, _, _, lp, ent = _run(hidden, weight, target, bias, opt, False, False, False, backward=False,
                                         ce_weight=cw, want_logprobs=opt.return_logprobs,
                                         want_entropy=opt.return_entropy)
            outs = [out] + ([lp] if opt.return_logprobs else []) + ([ent] if opt.return_entropy else [])
        loss = outs.pop(0)
        lp = outs.pop(0) if opt.return_logprobs else None
        ent = outs.pop(0) if opt.return_entropy else None
        return loss, lp, ent
    if grad:
        return LinearCrossEntropyFunction.apply(hidden, weight, target, bias, opt, cw)
    return _run(hidden, weight, target, bias, opt, False, False, False, backward=False, ce_weight=cw)[0]


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """nn.Module over flce.linear_cross_entropy, called like Liger's
    LigerFusedLinearCrossEntropyLoss: loss = module(lin_weight, _input, target, bias=None).
    lse_square_scale is Liger's name for z_loss (give one of them)."""

    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
                 softcap=None, ce_weight=None, temperature=1.0, return_logprobs=False,
                 return_entropy=False, lse_square_scale=None):
        super().__init__()
        if lse_square_scale is not None:
            if z_loss:
                raise ValueError("give z_loss or lse_square_scale (its Liger name), not both")
            z_loss = lse_square_scale
        # checked now, so that a bad option fails where the module is made
        _check_options(ignore_index, reduction, label_smoothing, z_loss, softcap, ce_weight,
                       temperature, return_logprobs, return_entropy)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.softcap = softcap
        self.ce_weight = ce_weight
        self.temperature = temperature
        self.return_logprobs = return_logprobs
        self.return_entropy = return_entropy

    def forward(self, lin_weight, _input, target, bias=None):
        return linear_cross_entropy(_input, lin_weight, target, bias, ignore_index=self.ignore_index,
                                    reduction=self.reduction, label_smoothing=self.label_smoothing,
                                    z_loss=self.z_loss, softcap=self.softcap, ce_weight=self.ce_weight,
                                    temperature=self.temperature,
                                    return_logprobs=self.return_logprobs,
                                    return_entropy=self.return_entropy)

    def extra_repr(self):
        return ("ignore_index=%d, reduction=%r, label_smoothing=%g, z_loss=%g, softcap=%r, temperature=%g, "
                "ce_weight=%s, return_logprobs=%r, return_entropy=%r"
                % (self.ignore_index, self.reduction, self.label_smoothing, self.z_loss, self.softcap,
                   self.temperature, "None" if self.ce_weight is None else "(%d,)" % self.ce_weight.numel(),
                   self.return_logprobs, self.return_entropy))
