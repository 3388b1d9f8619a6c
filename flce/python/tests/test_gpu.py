"""
GPU tests of flce's PyTorch binding (pytest; skipped without torch or a CUDA GPU):

    FLCE_LIBRARY=build/libflce.so python3 -m pytest -q flce/python/tests/test_gpu.py

flce.linear_cross_entropy against F.cross_entropy(hidden.double() @ W.double().T, ...) on the
same inputs (bf16 inputs widened), loss and every gradient as relative L2 errors: fp32 inputs
within 2.5e-3 (they come out near 1e-7), bf16 inputs' gradients within 5e-3, the bf16 floor of
flce's own GPU suite (test/test_gpu.cu: one rounding of dlogits plus one of the bf16 gradient,
about 1.6e-3 RMS each; measured on an H200: 1.5e-3..2.3e-3 at these shapes, 3.5e-3 at
8192 x 768 x 50304, on both GEMM paths). Every option, reductions (none with a non-uniform grad_output),
ignore_index, int32/int64 targets, bias, label smoothing, z-loss, softcap, several chunks under
a small workspace budget, both GEMM paths on a Hopper GPU, the nn.Module, the error cases, and
5 training steps of a tiny model against eager PyTorch.
"""
import copy
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402

# the package in this source tree, unless FLCE_TEST_INSTALLED=1 asks for the installed one
# (`pip install ./flce/python`, which carries its own copy of libflce.so)
if os.environ.get("FLCE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import flce  # noqa: E402
from flce import _torch  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
TOL_FP32 = 2.5e-3
TOL_BF16_GRAD = 5e-3
TOL_LOSS = 2.5e-3

PATHS = ["hopper", "cublaslt"] if flce.hopper_default() else ["default"]


@pytest.fixture(params=PATHS)
def path(request):
    """Each test runs on every GEMM path the GPU has (flce_set_hopper)."""
    if request.param != "default":
        flce.set_hopper(request.param == "hopper")
    yield request.param
    if request.param != "default":
        flce.set_hopper(True)


def rel(out, ref):
    out, ref = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out).all():
        return math.inf
    den = ref.norm().item()
    num = (out - ref).norm().item()
    return num / den if den > 0 else num


def make(N, H, V, dtype, seed=0, bias=False, ignore_frac=0.1, ignore_index=-100, tdtype=torch.int64,
         shape=None, logit_std=2.0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g)
    W = torch.randn(V, H, generator=g) * (logit_std / math.sqrt(H))
    b = torch.randn(V, generator=g) * 0.5 if bias else None
    y = torch.randint(0, V, (N,), generator=g)
    y[torch.rand(N, generator=g) < ignore_frac] = ignore_index
    if shape is not None:
        h, y = h.view(*shape, H), y.view(*shape)
    to = dict(device=DEV, dtype=dtype)
    return (h.to(**to), W.to(**to), y.to(device=DEV, dtype=tdtype),
            b.to(**to) if b is not None else None)


def reference(h, W, y, b=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
              softcap=None, grad_output=None):
    """F.cross_entropy on fp64 logits (plus z-loss); returns (loss, d_h, d_W, d_b)."""
    h64 = h.detach().double().requires_grad_()
    W64 = W.detach().double().requires_grad_()
    b64 = b.detach().double().requires_grad_() if b is not None else None
    z = h64.reshape(-1, h.shape[-1]) @ W64.T
    if b64 is not None:
        z = z + b64
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    yl = y.reshape(-1).long()
    loss = F.cross_entropy(z, yl, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
    if z_loss:
        valid = (yl != ignore_index).double()
        zl = z_loss * torch.logsumexp(z, dim=-1).pow(2) * valid
        loss = loss + (zl.sum() / valid.sum() if reduction == "mean" else zl.sum() if reduction == "sum" else zl)
    if reduction == "none":
        loss = loss.view(y.shape)
    loss.backward(grad_output.double() if grad_output is not None else None)
    return loss.detach(), h64.grad, W64.grad, (b64.grad if b64 is not None else None)


def entropy_reference(h, W, y, seed):
    """A random per-token upstream gradient for the entropy, and the fp64 loss and entropy with
    their graph: (upstream, h64, W64, loss, entropy), for the caller's backward."""
    g = torch.Generator().manual_seed(seed)
    up_ent = torch.randn(h.shape[0], generator=g).to(DEV)
    h64, W64 = (t.detach().double().requires_grad_() for t in (h, W))
    z = h64 @ W64.T
    logp = torch.log_softmax(z, dim=1)
    return up_ent, h64, W64, F.cross_entropy(z, y), -(logp.exp() * logp).sum(1)


def run_flce(h, W, y, b=None, grad_output=None, **kw):
    hh = h.detach().clone().requires_grad_()
    WW = W.detach().clone().requires_grad_()
    bb = b.detach().clone().requires_grad_() if b is not None else None
    loss = flce.linear_cross_entropy(hh, WW, y, bb, **kw)
    loss.backward(grad_output)
    return loss.detach(), hh.grad, WW.grad, (bb.grad if bb is not None else None)


def compare(got, ref, dtype, what):
    tol_grad = TOL_FP32 if dtype == torch.float32 else TOL_BF16_GRAD
    names = ("loss", "d_hidden", "d_weight", "d_bias")
    errs = {}
    for name, g, r in zip(names, got, ref):
        if r is None:
            assert g is None, "%s: %s should be None" % (what, name)
            continue
        assert g is not None, "%s: %s missing" % (what, name)
        if name != "loss":
            assert g.dtype == dtype and g.shape == r.shape, "%s: %s is %s %s" % (what, name, g.dtype, tuple(g.shape))
        errs[name] = rel(g, r)
    bad = {k: e for k, e in errs.items() if not e <= (TOL_LOSS if k == "loss" else tol_grad)}
    assert not bad, "%s: rel L2 errors %s" % (what, errs)
    return errs


OPTIONS = {
    "mean": dict(),
    "sum": dict(reduction="sum"),
    "smoothing": dict(label_smoothing=0.1),
    "z_loss": dict(z_loss=1e-2),
    "softcap": dict(softcap=4.0),
    "ignore_index_3": dict(ignore_index=3),
    "all_options": dict(label_smoothing=0.05, z_loss=1e-3, softcap=5.0, reduction="sum"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tdtype", [torch.int64, torch.int32], ids=["i64", "i32"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("opt", list(OPTIONS), ids=list(OPTIONS))
def test_against_pytorch(path, dtype, tdtype, bias, opt):
    kw = OPTIONS[opt]
    h, W, y, b = make(300, 128, 1003, dtype, seed=1, bias=bias, tdtype=tdtype,
                      ignore_index=kw.get("ignore_index", -100))
    got = run_flce(h, W, y, b, **kw)
    ref = reference(h, W, y, b, **kw)
    assert got[0].dtype == torch.float32 and got[0].dim() == 0
    compare(got, ref, dtype, "%s %s" % (opt, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kw", [dict(), dict(label_smoothing=0.1, z_loss=1e-3, softcap=6.0, ignore_index=5)],
                         ids=["plain", "options"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_reduction_none(path, dtype, kw, bias):
    """Per-token losses; a non-uniform grad_output reaches the gradients through flce's
    grad_token_loss."""
    h, W, y, b = make(257, 64, 515, dtype, seed=2, bias=bias, ignore_index=kw.get("ignore_index", -100),
                      shape=None)
    g = torch.Generator().manual_seed(7)
    go = (torch.rand(257, generator=g) * 2 - 0.5).to(DEV)
    got = run_flce(h, W, y, b, grad_output=go, reduction="none", **kw)
    ref = reference(h, W, y, b, reduction="none", grad_output=go, **kw)
    assert got[0].shape == (257,) and got[0].dtype == torch.float32
    ignored = y == kw.get("ignore_index", -100)
    assert ignored.any() and (got[0][ignored] == 0).all()
    compare(got, ref, dtype, "none %s" % dtype)


def test_shapes_3d_and_grad_output_scale(path):
    """(B, T, H) hidden with (B, T) targets; (loss * 0.5).backward() scales every gradient."""
    h, W, y, b = make(4 * 50, 64, 777, torch.float32, seed=3, bias=True, shape=(4, 50))
    go = torch.tensor(0.5, device=DEV)
    compare(run_flce(h, W, y, b, grad_output=go), reference(h, W, y, b, grad_output=go), torch.float32, "3d")
    go = torch.rand(4, 50, device=DEV)
    got = run_flce(h, W, y, b, grad_output=go, reduction="none")
    assert got[0].shape == (4, 50) and got[1].shape == h.shape
    compare(got, reference(h, W, y, b, reduction="none", grad_output=go), torch.float32, "3d none")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_many_chunks_small_budget(path, dtype):
    """A workspace budget that holds a fraction of the tokens: several chunks (or vocabulary
    tiles), the same results; with an upstream gradient too (bf16: the fp32 d_W and d_b scaled
    and cast by flce_cast_scaled_device)."""
    h, W, y, b = make(2048, 256, 32000, dtype, seed=4, bias=True)
    go = torch.tensor(-0.75, device=DEV)
    old = flce.set_workspace_budget(40 << 20)
    try:
        got = run_flce(h, W, y, b, label_smoothing=0.1)
        got_go = run_flce(h, W, y, b, grad_output=go, label_smoothing=0.1)
    finally:
        flce.set_workspace_budget(old)
    compare(got, reference(h, W, y, b, label_smoothing=0.1), dtype, "small budget %s" % dtype)
    compare(got_go, reference(h, W, y, b, label_smoothing=0.1, grad_output=go), dtype,
            "small budget %s, grad_output -0.75" % dtype)


def test_bf16_d_weight_whole_past_accumulator(path):
    """A bf16 d_weight that one chunk writes whole, where the fp32 accumulator a call of several
    chunks would need does not fit the budget (V x H x 4 bytes against the base plus V x H x 2:
    the Llama 3 8B head at 4096 tokens in the default 1 GiB, here at 40 MiB): the call runs, and so
    does one with an entropy gradient in the same workspace (its own plan's chunk), against fp64."""
    h, W, y, _ = make(256, 2048, 32000, torch.bfloat16, seed=41)
    up_ent, h64, W64, rl, rent = entropy_reference(h, W, y, seed=42)
    rl.backward(retain_graph=True)
    ref_plain = (h64.grad.clone(), W64.grad.clone())
    h64.grad, W64.grad = None, None
    (rl + (rent * up_ent.double()).sum()).backward()
    old = flce.set_workspace_budget(40 << 20)
    try:
        got = run_flce(h, W, y)
        hh, WW = (t.clone().requires_grad_() for t in (h, W))
        loss, _, ent = flce.linear_cross_entropy(hh, WW, y, return_entropy=True)
        (loss + (ent * up_ent).sum()).backward()
    finally:
        flce.set_workspace_budget(old)
    compare(got, (rl.detach(), ref_plain[0], ref_plain[1], None), torch.bfloat16, "bf16 d_W whole in 40 MiB")
    errs = [rel(loss, rl), rel(ent, rent), rel(hh.grad, h64.grad), rel(WW.grad, W64.grad)]
    assert errs[0] < TOL_LOSS and errs[1] < TOL_LOSS and max(errs[2:]) < TOL_BF16_GRAD, errs


def test_plans_kept(path):
    """The binding keeps a call's config and workspace size by shapes, options and budget, the
    library a context's last plan: a call made again gives bitwise the same results as its
    first, a new budget (or shape) is planned afresh, and a call after it with the old budget
    is the first's again."""
    h, W, y, _ = make(2048, 256, 32000, torch.bfloat16, seed=5)
    _torch._configs.clear()
    first = run_flce(h, W, y)
    n = len(_torch._configs)
    again = run_flce(h, W, y)
    assert n >= 1 and len(_torch._configs) == n
    old = flce.set_workspace_budget(40 << 20)
    try:
        small = run_flce(h, W, y)
    finally:
        flce.set_workspace_budget(old)
    assert len(_torch._configs) == n + 1
    other = run_flce(h[:1000], W, y[:1000])
    last = run_flce(h, W, y)
    for name, a, b, c in zip(("loss", "d_hidden", "d_weight"), first, again, last):
        assert torch.equal(a, b) and torch.equal(a, c), "%s differs between calls of one plan" % name
    compare(small, reference(h, W, y), torch.bfloat16, "plans kept: another budget")
    compare(other, reference(h[:1000], W, y[:1000]), torch.bfloat16, "plans kept: another config")


def test_partial_requires_grad_and_no_grad(path):
    h, W, y, _ = make(128, 64, 500, torch.float32, seed=5)
    ref = reference(h, W, y)
    WW = W.clone().requires_grad_()
    loss = flce.linear_cross_entropy(h, WW, y)           # hidden needs no gradient
    loss.backward()
    assert rel(loss, ref[0]) < TOL_FP32 and rel(WW.grad, ref[2]) < TOL_FP32
    hh = h.clone().requires_grad_()
    loss = flce.linear_cross_entropy(hh, W, y)           # weight frozen
    loss.backward()
    assert rel(hh.grad, ref[1]) < TOL_FP32
    with torch.no_grad():
        loss = flce.linear_cross_entropy(hh, WW, y)
    assert not loss.requires_grad and rel(loss, ref[0]) < TOL_FP32
    assert flce.linear_cross_entropy(h, W, y).requires_grad is False


def test_int32_equals_int64(path):
    h, W, y, _ = make(200, 64, 300, torch.bfloat16, seed=6)
    a = run_flce(h, W, y)
    b = run_flce(h, W, y.to(torch.int32))
    for x, z in zip(a, b):
        if x is not None:
            assert torch.equal(x, z)


def test_all_ignored(path):
    """Every target ignored: loss 0 and zero gradients (F.cross_entropy's mean would be NaN)."""
    h, W, y, _ = make(64, 64, 100, torch.float32, seed=7, ignore_frac=1.0)
    loss, dh, dW, _ = run_flce(h, W, y)
    assert loss.item() == 0.0 and (dh == 0).all() and (dW == 0).all()


def test_non_default_stream(path):
    h, W, y, b = make(300, 128, 1003, torch.bfloat16, seed=8, bias=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = run_flce(h, W, y, b, z_loss=1e-3)
    torch.cuda.current_stream().wait_stream(s)
    compare(got, reference(h, W, y, b, z_loss=1e-3), torch.bfloat16, "side stream")


def test_second_backward(path):
    h, W, y, _ = make(64, 64, 100, torch.float32, seed=9)
    hh = h.clone().requires_grad_()
    loss = flce.linear_cross_entropy(hh, W, y)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()
    # reduction none computes its gradients at backward time: a second backward works
    hh = h.clone().requires_grad_()
    loss = flce.linear_cross_entropy(hh, W, y, reduction="none")
    loss.sum().backward(retain_graph=True)
    first = hh.grad.clone()
    loss.sum().backward()
    assert rel(hh.grad, 2 * first) < 1e-6


def test_module(path):
    h, W, y, b = make(300, 128, 1003, torch.bfloat16, seed=10, bias=True, ignore_index=0)
    mod = flce.FusedLinearCrossEntropyLoss(ignore_index=0, label_smoothing=0.1, lse_square_scale=1e-3,
                                           softcap=8.0)
    hh, WW, bb = (t.clone().requires_grad_() for t in (h, W, b))
    loss = mod(WW, hh, y, bb)                              # Liger's order: (lin_weight, _input, target, bias)
    loss.backward()
    ref = reference(h, W, y, b, ignore_index=0, label_smoothing=0.1, z_loss=1e-3, softcap=8.0)
    compare((loss.detach(), hh.grad, WW.grad, bb.grad), ref, torch.bfloat16, "module")
    assert "ignore_index=0" in repr(mod)
    with pytest.raises(ValueError, match="reduction"):
        flce.FusedLinearCrossEntropyLoss(reduction="avg")
    with pytest.raises(ValueError, match="temperature"):
        flce.FusedLinearCrossEntropyLoss(temperature=0.0)


def test_autocast(path):
    """Under autocast to bf16, fp32 hidden and weight are cast to bf16 first."""
    h, W, y, _ = make(128, 64, 500, torch.float32, seed=11)
    hh, WW = h.clone().requires_grad_(), W.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = flce.linear_cross_entropy(hh, WW, y)
    loss.backward()
    ref = reference(h.bfloat16(), W.bfloat16(), y)
    assert hh.grad.dtype == torch.float32 and WW.grad.dtype == torch.float32
    errs = [rel(loss, ref[0]), rel(hh.grad, ref[1]), rel(WW.grad, ref[2])]
    assert errs[0] < TOL_LOSS and errs[1] < TOL_BF16_GRAD and errs[2] < TOL_BF16_GRAD, errs


# --- errors -----------------------------------------------------------------------------------

def _args(dtype=torch.bfloat16, N=16, H=64, V=100):
    h, W, y, _ = make(N, H, V, dtype, seed=12)
    return h, W, y


@pytest.mark.parametrize("case", [
    "hidden_fp16", "weight_dtype", "bias_dtype", "target_float", "target_int16", "hidden_cpu", "weight_cpu",
    "target_cpu", "hidden_1d", "weight_shape", "target_shape", "bias_shape", "hidden_H_bf16",
    "hidden_noncontig", "weight_noncontig", "target_noncontig", "hidden_misaligned", "not_tensor",
    "empty"])
def test_input_errors(case):
    h, W, y = _args()
    b = None
    exc, word = ValueError, None
    if case == "hidden_fp16":
        h, exc, word = h.half(), TypeError, "hidden"
    elif case == "weight_dtype":
        W, exc, word = W.float(), TypeError, "weight"
    elif case == "bias_dtype":
        b, exc, word = torch.zeros(100, device=DEV), TypeError, "bias"
    elif case == "target_float":
        y, exc, word = y.float(), TypeError, "target"
    elif case == "target_int16":
        y, exc, word = y.to(torch.int16), TypeError, "target"
    elif case == "hidden_cpu":
        h, word = h.cpu(), "hidden"
    elif case == "weight_cpu":
        W, word = W.cpu(), "weight"
    elif case == "target_cpu":
        y, word = y.cpu(), "target"
    elif case == "hidden_1d":
        h, word = h[0], "hidden"
    elif case == "weight_shape":
        W, word = W[:, :32].contiguous(), "weight"
    elif case == "target_shape":
        y, word = y[:8], "target"
    elif case == "bias_shape":
        b, word = torch.zeros(99, device=DEV, dtype=h.dtype), "bias"
    elif case == "hidden_H_bf16":
        h, W, word = h[:, :12].contiguous(), W[:, :12].contiguous(), "hidden"
    elif case == "hidden_noncontig":
        h, word = torch.cat([h, h], 1)[:, ::2], "hidden"
    elif case == "weight_noncontig":
        W, word = torch.cat([W, W], 1)[:, ::2], "weight"
    elif case == "target_noncontig":
        y, word = torch.stack([y, y], 1)[:, 0], "target"
    elif case == "hidden_misaligned":
        flat = torch.empty(h.numel() + 1, dtype=h.dtype, device=DEV)
        flat[1:].copy_(h.reshape(-1))
        h, word = flat[1:].view(h.shape), "hidden"
    elif case == "not_tensor":
        y, exc, word = [1, 2, 3], TypeError, "target"
    elif case == "empty":
        h, y, word = h[:0], y[:0], "tokens"
    with pytest.raises(exc, match=word):
        flce.linear_cross_entropy(h, W, y, b)


@pytest.mark.parametrize("kw,exc,word", [
    (dict(reduction="avg"), ValueError, "reduction"),
    (dict(label_smoothing=1.0), ValueError, "label_smoothing"),
    (dict(label_smoothing=-0.5), ValueError, "label_smoothing"),
    (dict(z_loss=-1.0), ValueError, "z_loss"),
    (dict(z_loss=float("nan")), ValueError, "z_loss"),
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(softcap=-3.0), ValueError, "softcap"),
    (dict(ignore_index=1.5), TypeError, "ignore_index"),
    (dict(ce_weight=[1.0] * 100), TypeError, "ce_weight"),
    (dict(ce_weight=torch.ones(7, device=DEV)), ValueError, "ce_weight"),
    (dict(temperature=0.0), ValueError, "temperature"),
    (dict(temperature=float("inf")), ValueError, "temperature"),
    (dict(return_logprobs=1), TypeError, "return_logprobs"),
    (dict(return_entropy="yes"), TypeError, "return_entropy"),
])
def test_option_errors(kw, exc, word):
    h, W, y = _args()
    with pytest.raises(exc, match=word):
        flce.linear_cross_entropy(h, W, y, **kw)


def test_bad_target_reported(path):
    """A target outside [0, V): never an index; the loss is NaN, check_errors() raises
    FlceError(ERR_TARGET) naming the token, and the next call is clean."""
    h, W, y = _args(torch.float32)
    y = y.clone()
    y[5] = 100 + 7
    loss = flce.linear_cross_entropy(h, W, y)
    assert math.isnan(loss.item())
    with pytest.raises(flce.FlceError, match=r"target\[5\] = 107") as e:
        flce.check_errors()
    assert e.value.status == flce.Status.ERR_TARGET
    flce.check_errors()                                    # reported once
    y[5] = 1
    assert math.isfinite(flce.linear_cross_entropy(h, W, y).item())


def test_workspace_budget_errors():
    with pytest.raises(ValueError):
        flce.set_workspace_budget(-1)
    h, W, y = _args()
    old = flce.set_workspace_budget(1)
    try:
        with pytest.raises(flce.FlceError, match="set_workspace_budget") as e:
            flce.linear_cross_entropy(h, W, y)
        assert e.value.status == flce.Status.ERR_WORKSPACE
    finally:
        flce.set_workspace_budget(old)


# --- training ---------------------------------------------------------------------------------

class TinyLM(torch.nn.Module):
    def __init__(self, V=384, C=64):
        super().__init__()
        self.emb = torch.nn.Embedding(V, C)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(C, 4 * C), torch.nn.GELU(), torch.nn.Linear(4 * C, C))
        self.norm = torch.nn.LayerNorm(C)
        self.head = torch.nn.Linear(C, V, bias=True)

    def hidden(self, idx):
        x = self.emb(idx)
        return self.norm(x + self.mlp(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_training_loop(path, dtype):
    """5 AdamW steps of a tiny model, flce vs eager F.cross_entropy on the logits: the same
    losses and parameters (fp32 within 2.5e-3; a bf16 model within its own rounding)."""
    torch.manual_seed(0)
    V, B, T = 384, 8, 32
    eager = TinyLM(V).to(DEV, dtype)
    fused = copy.deepcopy(eager)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in (eager, fused)]
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (5, B, T + 1), generator=g).to(DEV)
    loss_fn = flce.FusedLinearCrossEntropyLoss(label_smoothing=0.1)
    tol = TOL_FP32 if dtype == torch.float32 else 2e-2
    for step in range(5):
        x, y = data[step, :, :-1], data[step, :, 1:]
        y = y.masked_fill(torch.rand(y.shape, generator=g).to(DEV) < 0.1, -100).contiguous()
        le = F.cross_entropy(eager.head(eager.hidden(x)).float().view(-1, V), y.reshape(-1),
                             label_smoothing=0.1)
        lf = loss_fn(fused.head.weight, fused.hidden(x), y, fused.head.bias)
        assert rel(lf, le) < tol, "step %d: loss %g vs %g" % (step, lf.item(), le.item())
        for m, l, o in ((eager, le, opts[0]), (fused, lf, opts[1])):
            o.zero_grad(set_to_none=True)
            l.backward()
            o.step()
    for (n, pe), (_, pf) in zip(eager.named_parameters(), fused.named_parameters()):
        assert rel(pf, pe) < tol, "parameter %s after 5 steps: rel L2 %g" % (n, rel(pf, pe))


# --- the options of flce 1.1 ------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_options_outputs(path, reduction, dtype):
    """temperature, ce_weight, return_logprobs and return_entropy against fp64 PyTorch, with
    upstream gradients into all three outputs (verl's use: the loss, log-probabilities and
    entropy all feed the objective)."""
    N, H, V = 257, 64, 1003
    h, W, y, b = make(N, H, V, dtype, seed=21, bias=True)
    g = torch.Generator().manual_seed(22)
    cw = (torch.rand(V, generator=g) * 1.5 + 0.25).to(DEV)
    T, eps, cap = 0.7, 0.1, 20.0
    up_lp = torch.randn(N, generator=g).to(DEV)
    up_ent = torch.randn(N, generator=g).to(DEV)
    up_loss = torch.randn(N, generator=g).to(DEV) if reduction == "none" else torch.tensor(0.5, device=DEV)
    hh, WW, bb = (t.clone().requires_grad_() for t in (h, W, b))
    loss, lp, ent = flce.linear_cross_entropy(hh, WW, y, bb, reduction=reduction, label_smoothing=eps,
                                              softcap=cap, ce_weight=cw, temperature=T,
                                              return_logprobs=True, return_entropy=True)
    ((loss * up_loss).sum() + (lp * up_lp).sum() + (ent * up_ent).sum()).backward()
    h64, W64, b64 = (t.detach().double().requires_grad_() for t in (h, W, b))
    z = (h64 @ W64.T + b64)
    z = cap * torch.tanh(z / cap) / T
    rl = F.cross_entropy(z, y, weight=cw.double(), reduction=reduction, label_smoothing=eps)
    logp = torch.log_softmax(z, dim=1)
    valid = y != -100
    rlp = torch.where(valid, logp.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1), torch.zeros_like(logp[:, 0]))
    rent = -(logp.exp() * logp).sum(1)
    ((rl * up_loss.double()).sum() + (rlp * up_lp.double()).sum() + (rent * up_ent.double()).sum()).backward()
    tol = TOL_FP32 if dtype == torch.float32 else TOL_BF16_GRAD
    errs = [rel(loss, rl), rel(lp, rlp), rel(ent, rent), rel(hh.grad, h64.grad), rel(WW.grad, W64.grad),
            rel(bb.grad, b64.grad)]
    assert errs[0] < TOL_LOSS and errs[1] < TOL_LOSS and errs[2] < TOL_LOSS, errs
    assert max(errs[3:]) < tol, errs
    # with neither output asked for, temperature and ce_weight alone (gradients in forward)
    hh2 = h.clone().requires_grad_()
    loss2 = flce.linear_cross_entropy(hh2, W, y, ce_weight=cw, temperature=T, reduction="mean")
    loss2.backward()
    h64b = h.detach().double().requires_grad_()
    rl2 = F.cross_entropy(h64b @ W.double().T / T, y, weight=cw.double())
    rl2.backward()
    assert rel(loss2, rl2) < TOL_LOSS and rel(hh2.grad, h64b.grad) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_entropy_gradient_alone(path, dtype):
    """An entropy gradient with no other option (on the Hopper path it takes the dlogits pass by
    the call's plan, not the config's; in a workspace of 8 MiB, too small for that plan, the
    fused route) against fp64 PyTorch."""
    h, W, y, _ = make(600, 64, 1003, dtype, seed=31)
    up_ent, h64, W64, rl, rent = entropy_reference(h, W, y, seed=32)
    (rl + (rent * up_ent.double()).sum()).backward()
    tol = TOL_FP32 if dtype == torch.float32 else TOL_BF16_GRAD
    for budget in [0] + ([8 << 20] if path == "hopper" and dtype == torch.bfloat16 else []):
        hh, WW = (t.clone().requires_grad_() for t in (h, W))
        old = flce.set_workspace_budget(budget)
        try:
            loss, _, ent = flce.linear_cross_entropy(hh, WW, y, return_entropy=True)
            (loss + (ent * up_ent).sum()).backward()
        finally:
            flce.set_workspace_budget(old)
        errs = [rel(loss, rl), rel(ent, rent), rel(hh.grad, h64.grad), rel(WW.grad, W64.grad)]
        assert errs[0] < TOL_LOSS and errs[1] < TOL_LOSS, (budget, errs)
        assert max(errs[2:]) < tol, (budget, errs)
