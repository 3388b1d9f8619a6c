"""
export_fixtures.py - writes the FLCE reference fixtures test/fixtures/*.bin with PyTorch.

Each fixture is one small fused-linear-cross-entropy problem (inputs and options) together
with PyTorch's answer: the loss, per-token loss and log-sum-exp, and the gradients with
respect to the hidden states, the weight and the bias. The C tests (test/test_cpu.c and
the GPU tests) load them with test/fixture.h, which documents the binary layout.

How the answer is computed: everything in float64 on the CPU with autograd, from the
plain definitions, so it shares no code with the CUDA kernels or the C reference:
    logits = h @ W[:V].T (+ bias[:V]);  softcap * tanh(logits / softcap) if softcap > 0;
    then / temperature (flce 1.1; 1 = off)
    F.cross_entropy(logits, y, weight, ignore_index, reduction, label_smoothing)
    + z_loss_scale * logsumexp(logits)^2 per non-ignored token (reduced the same way: a
    weighted mean divides it by the targets' weight sum too, as Liger; it is not weighted)
The loss is backpropagated times grad_scale (reduction none: times grad_token_loss, or
ones). Rows V..Vp-1 of W and bias are padding and get exactly zero gradient. A mean over
zero non-ignored tokens (or zero total weight) is defined as 0 with zero gradients
(PyTorch would give NaN).
The options of flce 1.1 (a version 2 file; the others stay version 1, byte-identical to
before): temperature, class weights (F.cross_entropy's weight), the per-token entropy
-sum_j p_j log p_j (every token) and target log-probability log_softmax(logits)[y] (0 for
ignored tokens) as outputs, and upstream gradients of each: the objective backpropagated is
then grad_scale * (loss + sum_i grad_entropy_i H_i + sum_i grad_logprob_i logprob_i).

Inputs are drawn from a torch.Generator seeded per case and rounded to bf16-representable
values, so a bf16 run sees exactly the same numbers; W is scaled so that the logits are
about N(0, s^2) with s in 1..3. Re-running rewrites byte-identical files.

Run (from the repository root):
    python3 scripts/export_fixtures.py [outdir]      # default outdir: test/fixtures
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 20261130
VERSION = 1        # files without the options of flce 1.1
VERSION_OPTIONS = 2
REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def case(name, N, H, V, Vp=None, reduction="mean", bias=False, smoothing=0.0, z_loss=0.0,
         softcap=0.0, grad_scale=1.0, grad_token_loss=False, ignore_index=-100,
         ignore_frac=0.1, logit_std=2.0, seed=0, temperature=1.0, class_weights=False,
         entropy=False, logprob=False, grad_entropy=False, grad_logprob=False,
         zero_grad_token_loss=False):
    return dict(name=name, N=N, H=H, V=V, Vp=Vp if Vp is not None else V, reduction=reduction,
                bias=bias, smoothing=smoothing, z_loss=z_loss, softcap=softcap,
                grad_scale=grad_scale, grad_token_loss=grad_token_loss,
                ignore_index=ignore_index, ignore_frac=ignore_frac, logit_std=logit_std,
                seed=seed, temperature=temperature, class_weights=class_weights,
                entropy=entropy, logprob=logprob, grad_entropy=grad_entropy,
                grad_logprob=grad_logprob, zero_grad_token_loss=zero_grad_token_loss)


def new_options(c):
    """Whether a case uses an option of flce 1.1 (a version 2 file)."""
    return (c["temperature"] != 1.0 or c["class_weights"] or c["entropy"] or c["logprob"] or
            c["grad_entropy"] or c["grad_logprob"])


# Shapes are chosen to break tiling assumptions: V odd and not a multiple of 8, padded
# vocabularies, N not a multiple of any tile; all kept small so the files stay < 2 MB total.
CASES = [
    case("mean_n37_h64_v251", 37, 64, 251, seed=1),
    case("mean_n131_h16_v1001_vp1024", 131, 16, 1001, Vp=1024, seed=2),
    case("sum_n301_h16_v517", 301, 16, 517, reduction="sum", seed=3),
    case("sum_n1_h8_v3", 1, 8, 3, reduction="sum", ignore_frac=0.0, seed=4),
    case("none_n64_h64_v127", 64, 64, 127, reduction="none", seed=5),
    case("none_gtl_n37_h64_v127_vp128", 37, 64, 127, Vp=128, reduction="none",
         grad_token_loss=True, seed=6),
    case("mean_n19_h128_v97", 19, 128, 97, logit_std=1.0, seed=7),
    case("mean_n37_h136_v61_vp64", 37, 136, 61, Vp=64, logit_std=3.0, seed=8),
    case("smooth0.1_mean_n131_h24_v251", 131, 24, 251, smoothing=0.1, seed=9),
    case("smooth0.1_none_n37_h32_v251", 37, 32, 251, reduction="none", smoothing=0.1, seed=10),
    case("zloss1e-4_mean_n37_h32_v251", 37, 32, 251, z_loss=1e-4, seed=11),
    case("zloss1e-2_sum_n37_h32_v251", 37, 32, 251, reduction="sum", z_loss=1e-2, seed=12),
    case("softcap30_mean_n37_h32_v251", 37, 32, 251, softcap=30.0, logit_std=3.0, seed=13),
    case("softcap3_mean_n37_h32_v251_bias", 37, 32, 251, softcap=3.0, bias=True,
         logit_std=3.0, seed=14),
    case("bias_mean_n131_h24_v517_vp520", 131, 24, 517, Vp=520, bias=True, seed=15),
    case("gradscale0.25_sum_n37_h32_v251", 37, 32, 251, reduction="sum", grad_scale=0.25,
         seed=16),
    case("ignore-1_mean_n37_h32_v251", 37, 32, 251, ignore_index=-1, ignore_frac=0.3, seed=17),
    case("all_ignored_mean_n37_h16_v251_vp256", 37, 16, 251, Vp=256, bias=True,
         ignore_frac=1.0, seed=18),
    case("combined_mean_n67_h32_v1001_vp1024", 67, 32, 1001, Vp=1024, bias=True,
         smoothing=0.1, z_loss=1e-3, softcap=15.0, grad_scale=0.5, logit_std=3.0, seed=19),
    case("combined_none_gtl_n37_h32_v517_vp520", 37, 32, 517, Vp=520, reduction="none",
         bias=True, smoothing=0.1, z_loss=1e-2, softcap=3.0, grad_scale=0.25,
         grad_token_loss=True, logit_std=3.0, seed=20),
    # the options of flce 1.1 (version 2 files)
    case("temp0.7_mean_n37_h32_v251", 37, 32, 251, temperature=0.7, seed=21),
    case("temp1.5_softcap15_sum_n37_h32_v251_bias", 37, 32, 251, reduction="sum", bias=True,
         softcap=15.0, temperature=1.5, logit_std=3.0, seed=22),
    case("weight_mean_n131_h24_v517_vp520", 131, 24, 517, Vp=520, class_weights=True, seed=23),
    case("weight_smooth0.1_mean_n67_h32_v251", 67, 32, 251, class_weights=True, smoothing=0.1,
         seed=24),
    case("weight_smooth0.1_none_gtl_n37_h32_v251", 37, 32, 251, reduction="none",
         grad_token_loss=True, class_weights=True, smoothing=0.1, seed=25),
    case("entropy_logprob_mean_n37_h32_v251", 37, 32, 251, entropy=True, logprob=True, seed=26),
    case("entropy_grad_none_gtl_n37_h64_v127_vp128", 37, 64, 127, Vp=128, reduction="none",
         grad_token_loss=True, entropy=True, grad_entropy=True, seed=27),
    case("logprob_grad_sum_n37_h32_v251", 37, 32, 251, reduction="sum", logprob=True,
         grad_logprob=True, seed=28),
    # verl's use: temperature, log-probabilities and entropy with their gradients, no loss
    case("verl_t0.6_none_n64_h64_v127", 64, 64, 127, reduction="none", grad_token_loss=True,
         zero_grad_token_loss=True, temperature=0.6, entropy=True, logprob=True,
         grad_entropy=True, grad_logprob=True, seed=29),
    case("options_combined_mean_n67_h32_v1001_vp1024", 67, 32, 1001, Vp=1024, bias=True,
         smoothing=0.1, z_loss=1e-3, softcap=15.0, grad_scale=0.5, logit_std=3.0,
         temperature=0.8, class_weights=True, entropy=True, logprob=True, grad_entropy=True,
         grad_logprob=True, seed=30),
    case("options_combined_none_gtl_n37_h32_v517_vp520", 37, 32, 517, Vp=520,
         reduction="none", bias=True, smoothing=0.1, z_loss=1e-2, softcap=3.0,
         grad_scale=0.25, grad_token_loss=True, logit_std=3.0, temperature=1.3,
         class_weights=True, entropy=True, logprob=True, grad_entropy=True, grad_logprob=True,
         seed=31),
]


def bf16_round(x):
    return x.to(torch.bfloat16).to(torch.float32)


def make_inputs(c):
    g = torch.Generator(device="cpu").manual_seed(1000 + c["seed"])
    N, H, V, Vp = c["N"], c["H"], c["V"], c["Vp"]
    h = bf16_round(torch.randn(N, H, generator=g))
    # logit_ij = h_i . W_j has variance H * var(W) when h ~ N(0, 1)
    W = torch.randn(Vp, H, generator=g) * (c["logit_std"] / H ** 0.5)
    # padding rows get large values so that any leak of them into the softmax shows up
    W[V:] *= 8.0
    W = bf16_round(W)
    b = None
    if c["bias"]:
        b = torch.randn(Vp, generator=g) * 0.5
        b[V:] = 20.0
        b = bf16_round(b)
    y = torch.randint(0, V, (N,), generator=g, dtype=torch.int64)
    drop = torch.rand(N, generator=g) < c["ignore_frac"]
    y[drop] = c["ignore_index"]
    gtl = None
    if c["grad_token_loss"]:
        gtl = bf16_round(torch.randn(N, generator=g))
        if c["zero_grad_token_loss"]:
            gtl.zero_()
    # the options of flce 1.1, drawn after everything else so that the inputs of the older
    # cases are unchanged
    ex = {}
    if c["class_weights"]:
        ex["class_weights"] = bf16_round(torch.rand(V, generator=g) * 1.75 + 0.25)
    if c["grad_entropy"]:
        ex["grad_entropy"] = bf16_round(torch.randn(N, generator=g))
    if c["grad_logprob"]:
        ex["grad_logprob"] = bf16_round(torch.randn(N, generator=g))
    return h, W, b, y, gtl, ex


def leaves_and_logits(c, h, W, b):
    """h, W and b as float64 leaves (b None without a bias) and the logits of the real classes:
    bias, softcap, then the temperature of flce 1.1 (after the softcap, as verl and vLLM; a
    temperature of 1 divides nothing, so the version 1 files are as before)."""
    V = c["V"]
    h64 = h.double().requires_grad_(True)
    W64 = W.double().requires_grad_(True)
    b64 = b.double().requires_grad_(True) if b is not None else None
    logits = h64 @ W64[:V].T
    if b64 is not None:
        logits = logits + b64[:V]
    if c["softcap"] > 0:
        logits = c["softcap"] * torch.tanh(logits / c["softcap"])
    if c.get("temperature", 1.0) != 1.0:
        logits = logits / c["temperature"]
    return h64, W64, b64, logits


def reference_options(c, h, W, b, y, gtl, ex):
    """reference() with the options of flce 1.1: returns its outputs plus the per-token
    entropy and log-probability."""
    V, red, ii = c["V"], c["reduction"], c["ignore_index"]
    h64, W64, b64, logits = leaves_and_logits(c, h, W, b)
    lse = torch.logsumexp(logits, dim=1)
    valid_b = y != ii
    valid = valid_b.double()
    w = ex["class_weights"].double() if "class_weights" in ex else None
    divisor = (w[y[valid_b]].sum().item() if w is not None else float(valid.sum().item()))
    zterm = c["z_loss"] * lse * lse * valid
    kw = dict(ignore_index=ii, label_smoothing=c["smoothing"], weight=w)
    token_loss = F.cross_entropy(logits, y, reduction="none", **kw) + zterm
    logp = torch.log_softmax(logits, dim=1)
    entropy = -(logp.exp() * logp).sum(dim=1)
    logprob = torch.where(valid_b, logp.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1),
                          torch.zeros_like(lse))
    if red == "none":
        loss = token_loss.sum()
        upstream = gtl.double() if gtl is not None else torch.ones_like(token_loss)
        obj = (token_loss * upstream).sum()
    else:
        if divisor != 0.0:
            loss = F.cross_entropy(logits, y, reduction=red, **kw)
            loss = loss + (zterm.sum() / divisor if red == "mean" else zterm.sum())
        else:
            loss = (logits * 0.0).sum()  # defined as 0, with zero (not NaN) gradients
        manual = token_loss.sum() / (divisor if divisor != 0.0 else 1.0) if red == "mean" \
            else token_loss.sum()
        if divisor != 0.0 or red != "mean":
            assert abs(manual.item() - loss.item()) <= 1e-12 * max(1.0, abs(loss.item())), c["name"]
        obj = loss
    if "grad_entropy" in ex:
        obj = obj + (ex["grad_entropy"].double() * entropy).sum()
    if "grad_logprob" in ex:
        obj = obj + (ex["grad_logprob"].double() * logprob).sum()
    (obj * c["grad_scale"]).backward()
    assert torch.all(token_loss[~valid_b] == 0), c["name"]
    assert torch.all(logprob[~valid_b] == 0), c["name"]
    d_W = W64.grad
    assert torch.all(d_W[V:] == 0), c["name"]
    d_b = b64.grad if b64 is not None else None
    return (loss.detach(), token_loss.detach(), lse.detach(), h64.grad, d_W, d_b,
            entropy.detach(), logprob.detach())


def reference(c, h, W, b, y, gtl):
    V, red, ii = c["V"], c["reduction"], c["ignore_index"]
    h64, W64, b64, logits = leaves_and_logits(c, h, W, b)
    lse = torch.logsumexp(logits, dim=1)
    valid = (y != ii).double()
    n_valid = int(valid.sum().item())
    zterm = c["z_loss"] * lse * lse * valid
    kw = dict(ignore_index=ii, label_smoothing=c["smoothing"])
    token_loss = F.cross_entropy(logits, y, reduction="none", **kw) + zterm
    if red == "none":
        loss = token_loss.sum()
        upstream = gtl.double() if gtl is not None else torch.ones_like(token_loss)
        token_loss.backward(upstream * c["grad_scale"], retain_graph=True)
    else:
        if n_valid > 0:
            loss = F.cross_entropy(logits, y, reduction=red, **kw)
            loss = loss + (zterm.sum() / n_valid if red == "mean" else zterm.sum())
        else:
            loss = (logits * 0.0).sum()  # defined as 0, with zero (not NaN) gradients
        (loss * c["grad_scale"]).backward(retain_graph=True)
        # the per-token losses reduced by hand must agree with PyTorch's reduction
        manual = token_loss.sum() / max(n_valid, 1) if red == "mean" else token_loss.sum()
        assert abs(manual.item() - loss.item()) <= 1e-12 * max(1.0, abs(loss.item())), c["name"]
    assert torch.all(token_loss[y == ii] == 0), c["name"]
    d_W = W64.grad
    assert torch.all(d_W[V:] == 0), c["name"]
    d_b = b64.grad if b64 is not None else None
    return loss.detach(), token_loss.detach(), lse.detach(), h64.grad, d_W, d_b


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()


def write_fixture(path, c, h, W, b, y, gtl, ex, out):
    loss, token_loss, lse, d_h, d_W, d_b = out[:6]
    v2 = new_options(c)
    hd = np.zeros(256, dtype="<i4")
    hd[0:10] = [MAGIC, VERSION_OPTIONS if v2 else VERSION, c["N"], c["H"], c["V"], c["Vp"],
                int(b is not None), REDUCTIONS[c["reduction"]], c["ignore_index"],
                int(gtl is not None)]
    opts = np.array([c["smoothing"], c["z_loss"], c["softcap"], c["grad_scale"]], dtype="<f4")
    hd[16:20] = opts.view("<i4")
    if v2:
        hd[10:15] = [int("class_weights" in ex), int(c["entropy"]), int(c["logprob"]),
                     int("grad_entropy" in ex), int("grad_logprob" in ex)]
        hd[20:21] = np.array([c["temperature"]], dtype="<f4").view("<i4")
    parts = [hd.tobytes(), f32(h), f32(W)]
    if b is not None:
        parts.append(f32(b))
    parts.append(y.to(torch.int32).numpy().astype("<i4").tobytes())
    if gtl is not None:
        parts.append(f32(gtl))
    for k in ("class_weights", "grad_entropy", "grad_logprob"):
        if k in ex:
            parts.append(f32(ex[k]))
    parts += [f32(loss.reshape(1)), f32(token_loss), f32(lse), f32(d_h), f32(d_W)]
    if d_b is not None:
        parts.append(f32(d_b))
    if v2 and c["entropy"]:
        parts.append(f32(out[6]))
    if v2 and c["logprob"]:
        parts.append(f32(out[7]))
    data = b"".join(parts)
    with open(path, "wb") as fp:
        fp.write(data)
    return len(data)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("test", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    total = 0
    for c in CASES:
        assert c["reduction"] == "none" or not c["grad_token_loss"], c["name"]
        h, W, b, y, gtl, ex = make_inputs(c)
        # the older cases keep their own computation, so that their files stay byte-identical
        out = reference_options(c, h, W, b, y, gtl, ex) if new_options(c) else \
            reference(c, h, W, b, y, gtl)
        path = os.path.join(outdir, c["name"] + ".bin")
        n = write_fixture(path, c, h, W, b, y, gtl, ex, out)
        total += n
        print(f"{path}: N={c['N']} H={c['H']} V={c['V']} Vp={c['Vp']} {c['reduction']}"
              f" bias={int(c['bias'])} eps={c['smoothing']} zl={c['z_loss']}"
              f" softcap={c['softcap']} grad_scale={c['grad_scale']}"
              f" gtl={int(c['grad_token_loss'])} ignore_index={c['ignore_index']}"
              f" T={c['temperature']} cw={int(c['class_weights'])}"
              f" ent={int(c['entropy'])}/{int(c['grad_entropy'])}"
              f" lp={int(c['logprob'])}/{int(c['grad_logprob'])}"
              f" ignored={int((y == c['ignore_index']).sum())}"
              f" loss={out[0].item():.6f} bytes={n}")
    print(f"{len(CASES)} fixtures, {total} bytes")


if __name__ == "__main__":
    main()
