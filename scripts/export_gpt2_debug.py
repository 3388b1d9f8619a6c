"""
export_gpt2_debug.py - writes a tiny GPT-2 in llm.c's model format together with PyTorch's
answer for one batch (loss, every parameter gradient) and for 10 AdamW steps on it.

The C reference (test/gpt2_ref.c, checked by test/test_gpt2_cpu.c) and later the CUDA
trainer are compared against these numbers. The model is written here from the plain
definitions with PyTorch primitives, so it shares no code with either of them.

The model is llm.c's GPT-2: learned position embeddings; pre-LayerNorm blocks (eps 1e-5);
causal multi-head attention with the fused qkv projection (q, k, v are consecutive C-wide
slices of the qkv output, head h uses columns h*hs..(h+1)*hs-1 of each); a 4C MLP with the
tanh approximation of GELU; a final LayerNorm; the LM head tied to wte, whose Vp - V
padding rows are zero, never a target and excluded from the softmax (logits over the first
V rows only); loss = mean cross-entropy over all B*T targets.

Config (small enough that the files stay < 2 MB, shapes chosen to break tiling assumptions):
    max_seq_len 64, V 397 (odd, not a multiple of 64), Vp 448, L 2, NH 4, C 64; B 4, T 32.

Init, as llm.c's train_gpt2.py: torch.manual_seed(42), draws in module order (wte over the
V real rows, wpe, then per layer c_attn, attn c_proj, c_fc, mlp c_proj): N(0, 0.02), the
residual projections (attprojw, fcprojw) N(0, 0.02 / sqrt(2 L)); biases 0, LayerNorm weights
1 and biases 0; wte's padding rows 0, as llm.c's write_model pads them. (train_gpt2.py's
module constructors consume the generator first, so its draws differ; that does not matter
here, the weights are stored.)

The batch: B*T+1 tokens drawn uniformly from [0, V) after the weights; x = tokens[:-1],
y = tokens[1:], viewed (B, T), as llm.c's dataloader cuts a contiguous stream.

What is computed, in float64 on the CPU from the float32 weights as stored (so the answer
is the exact math of the stored model up to fp64 rounding), then stored as float32:
  - the loss and the gradient of every parameter tensor for (x, y);
  - two runs of 10 AdamW steps on that same batch, starting from the stored weights, with
    llm.c's update (gpt2_update, train_gpt2.cu) at lr 1e-4, betas (0.9, 0.95), eps 1e-8:
      for step t = 1..10:
        loss_t = L(params); g = dL/dparams             (forward + backward, mean loss)
        norm_t = sqrt(sum of g^2 over every parameter, padding rows of wte included)
        s = 1.0 / norm_t if norm_t > 1.0 else 1.0      (global-norm clipping at 1.0)
        per element, with wd = weight_decay for the matrices wte, wpe, qkvw, attprojw,
        fcw, fcprojw and 0 for every bias and LayerNorm tensor (llm.c's rule):
          m = 0.9 m + 0.1 (s g);   v = 0.95 v + 0.05 (s g)^2
          p -= lr * ((m / (1 - 0.9^t)) / (sqrt(v / (1 - 0.95^t)) + eps) + wd * p)
    run 0 with weight_decay 0.0, run 1 with weight_decay 0.1; m and v start at 0; no
    learning-rate schedule, no gradient accumulation. loss_t is the loss before update t,
    so losses[0] equals the fixture loss; norms are the unclipped norms. After the run
    with weight decay 0.1 the parameters after all 10 updates are stored as well.
The script checks its own AdamW against torch.optim.AdamW (decoupled decay on the same
parameter groups, clip_grad_norm_) and prints how far a float32 PyTorch run lands from the
float64 answer: the accuracy an fp32 implementation should reach.

Files (little-endian):
  gpt2_debug.bin: llm.c's model file, version 3 (fp32). int32 header[256]: [0] 20240326,
    [1] 3, [2] max_seq_len, [3] V, [4] L, [5] NH, [6] C, [7] Vp, rest 0; then the 16 tensors
    in float32 in llm.c's order: wte (Vp,C), wpe (maxT,C), ln1w, ln1b (L,C), qkvw (L,3C,C),
    qkvb (L,3C), attprojw (L,C,C), attprojb (L,C), ln2w, ln2b (L,C), fcw (L,4C,C),
    fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
  gpt2_debug_state.bin: llm.c's debug state (magic 20240327, version 2) without the logits
    (this project never materializes them; llm.c's own reader would expect B*T*V floats
    after y, so header[4] says how many are stored: 0), extended with the AdamW runs.
    int32 header[256]:
      [0] 20240327  [1] 2  [2] B  [3] T  [4] logits stored (0)  [5] number of parameters P
      [6] AdamW steps per run S (10)  [7] runs R (2)  [8] run whose final parameters are
      stored (1; -1 = none)
      float32 bit patterns: [16] lr  [17] beta1  [18] beta2  [19] eps  [20] grad clip
      [21 .. 21+R) weight decay of each run
    then int32 x[B*T], int32 y[B*T], float32 loss, float32 grads[P] (parameter order),
    for each run r: float32 losses[S], float32 norms[S]; then float32 params[P] after the
    S updates of the run named in [8]. The file size is exactly that (the reader checks).

Run from the repository root (deterministic: re-running rewrites identical bytes):
    python3 scripts/export_gpt2_debug.py [outdir]      # default outdir: test/fixtures
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
STATE_MAGIC, STATE_VERSION = 20240327, 2

CFG = dict(max_seq_len=64, vocab_size=397, padded_vocab_size=448, num_layers=2, num_heads=4,
           channels=64)
B, T = 4, 32
N_STEPS = 10
LR, BETA1, BETA2, EPS, GRAD_CLIP = 1e-4, 0.9, 0.95, 1e-8, 1.0
WEIGHT_DECAYS = (0.0, 0.1)
FINAL_PARAMS_RUN = 1

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# llm.c decays exactly these (the weight matrices), never biases or LayerNorm parameters
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(c):
    Vp, maxT, L, C = c["padded_vocab_size"], c["max_seq_len"], c["num_layers"], c["channels"]
    return dict(wte=(Vp, C), wpe=(maxT, C), ln1w=(L, C), ln1b=(L, C), qkvw=(L, 3 * C, C),
                qkvb=(L, 3 * C), attprojw=(L, C, C), attprojb=(L, C), ln2w=(L, C), ln2b=(L, C),
                fcw=(L, 4 * C, C), fcb=(L, 4 * C), fcprojw=(L, C, 4 * C), fcprojb=(L, C),
                lnfw=(C,), lnfb=(C,))


def init_params(c):
    torch.manual_seed(42)
    V, L = c["vocab_size"], c["num_layers"]
    std, res_std = 0.02, 0.02 / math.sqrt(2 * L)
    p = {}
    for name, shape in shapes(c).items():
        p[name] = torch.ones(shape) if name.startswith("ln") and name.endswith("w") \
            else torch.zeros(shape)
    p["wte"][:V].normal_(0.0, std)
    p["wpe"].normal_(0.0, std)
    for l in range(L):
        p["qkvw"][l].normal_(0.0, std)
        p["attprojw"][l].normal_(0.0, res_std)
        p["fcw"][l].normal_(0.0, std)
        p["fcprojw"][l].normal_(0.0, res_std)
    return [p[n] for n in NAMES]


def forward(params, x, y, c):
    """Mean cross-entropy of the model on (x, y); params in NAMES order, any float dtype."""
    p = dict(zip(NAMES, params))
    V, L, NH, C = c["vocab_size"], c["num_layers"], c["num_heads"], c["channels"]
    Bx, Tx = x.shape
    hs = C // NH
    causal = torch.ones(Tx, Tx, dtype=torch.bool).tril()
    h = p["wte"][x] + p["wpe"][:Tx]
    for l in range(L):
        a = F.layer_norm(h, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = F.linear(a, p["qkvw"][l], p["qkvb"][l])
        q, k, v = (t.view(Bx, Tx, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        o = (att @ v).transpose(1, 2).reshape(Bx, Tx, C)
        h = h + F.linear(o, p["attprojw"][l], p["attprojb"][l])
        a = F.layer_norm(h, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        f = F.gelu(F.linear(a, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        h = h + F.linear(f, p["fcprojw"][l], p["fcprojb"][l])
    h = F.layer_norm(h, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = h @ p["wte"][:V].T        # the padding rows never enter the softmax
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def loss_and_grads(params, x, y, c):
    ps = [t.detach().requires_grad_(True) for t in params]
    loss = forward(ps, x, y, c)
    return loss.detach(), [g.detach() for g in torch.autograd.grad(loss, ps)]


def adamw_run(params0, x, y, c, wd, dtype):
    """llm.c's gpt2_update, written out; returns (losses, norms, final params)."""
    p = [t.to(dtype).clone() for t in params0]
    m = [torch.zeros_like(t) for t in p]
    v = [torch.zeros_like(t) for t in p]
    losses, norms = [], []
    for t in range(1, N_STEPS + 1):
        loss, g = loss_and_grads(p, x, y, c)
        norm = math.sqrt(sum(float((gi.double() ** 2).sum()) for gi in g))
        s = GRAD_CLIP / norm if norm > GRAD_CLIP else 1.0
        losses.append(float(loss))
        norms.append(norm)
        for i, name in enumerate(NAMES):
            gi = g[i] * s
            m[i] = BETA1 * m[i] + (1 - BETA1) * gi
            v[i] = BETA2 * v[i] + (1 - BETA2) * gi * gi
            mhat = m[i] / (1 - BETA1 ** t)
            vhat = v[i] / (1 - BETA2 ** t)
            decay = wd if name in DECAYED else 0.0
            p[i] = p[i] - LR * (mhat / (torch.sqrt(vhat) + EPS) + decay * p[i])
    return losses, norms, p


def torch_adamw_run(params0, x, y, c, wd):
    """The same run through torch.optim.AdamW, as a check of adamw_run."""
    ps = [t.double().clone().requires_grad_(True) for t in params0]
    groups = [dict(params=[p for p, n in zip(ps, NAMES) if n in DECAYED], weight_decay=wd),
              dict(params=[p for p, n in zip(ps, NAMES) if n not in DECAYED], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad()
        loss = forward(ps, x, y, c)
        loss.backward()
        # clip_grad_norm_ divides by norm + 1e-6 where llm.c divides by norm: a relative
        # difference of 1e-6 in the clipped gradient, far below what is checked here
        torch.nn.utils.clip_grad_norm_(ps, GRAD_CLIP)
        losses.append(loss.item())
        opt.step()
    return losses


def f32(t):
    return np.ascontiguousarray(t.detach().to(torch.float32).numpy(), dtype="<f4").tobytes()


def write_model(path, c, params):
    hd = np.zeros(256, dtype="<i4")
    hd[0:8] = [MODEL_MAGIC, MODEL_VERSION, c["max_seq_len"], c["vocab_size"], c["num_layers"],
               c["num_heads"], c["channels"], c["padded_vocab_size"]]
    data = hd.tobytes() + b"".join(f32(t) for t in params)
    with open(path, "wb") as fp:
        fp.write(data)
    return len(data)


def write_state(path, x, y, loss, grads, runs, final_params):
    P = sum(g.numel() for g in grads)
    hd = np.zeros(256, dtype="<i4")
    hd[0:9] = [STATE_MAGIC, STATE_VERSION, B, T, 0, P, N_STEPS, len(runs), FINAL_PARAMS_RUN]
    hp = np.array([LR, BETA1, BETA2, EPS, GRAD_CLIP] + list(WEIGHT_DECAYS), dtype="<f4")
    hd[16:16 + len(hp)] = hp.view("<i4")
    parts = [hd.tobytes(), x.numpy().astype("<i4").tobytes(), y.numpy().astype("<i4").tobytes(),
             f32(loss.reshape(1))] + [f32(g) for g in grads]
    for losses, norms in runs:
        parts += [np.array(losses, dtype="<f4").tobytes(), np.array(norms, dtype="<f4").tobytes()]
    parts += [f32(t) for t in final_params]
    data = b"".join(parts)
    with open(path, "wb") as fp:
        fp.write(data)
    return len(data)


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm()) if float(b.norm()) > 0 else float((a - b).norm())


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("test", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    # one thread: the float64 sums then run in one order on every machine
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    c = CFG
    assert c["channels"] % c["num_heads"] == 0 and c["padded_vocab_size"] >= c["vocab_size"]
    params = init_params(c)
    tokens = torch.randint(0, c["vocab_size"], (B * T + 1,))
    x, y = tokens[:-1].view(B, T), tokens[1:].view(B, T)

    # the answer, in float64 from the float32 weights as stored
    p64 = [t.double() for t in params]
    loss, grads = loss_and_grads(p64, x, y, c)
    assert torch.all(grads[0][c["vocab_size"]:] == 0)
    runs, finals = [], []
    for wd in WEIGHT_DECAYS:
        losses, norms, final = adamw_run(params, x, y, c, wd, torch.float64)
        assert losses[0] == float(loss)
        ref = torch_adamw_run(params, x, y, c, wd)
        dev = max(abs(a - b) for a, b in zip(losses, ref))
        assert dev < 1e-8, f"adamw_run and torch.optim.AdamW disagree by {dev:.3g}"
        runs.append((losses, norms))
        finals.append(final)

    # how close plain float32 PyTorch gets: the yardstick for an fp32 implementation
    loss32, grads32 = loss_and_grads(params, x, y, c)
    worst = max((rel_l2(g32, g), n) for g32, g, n in zip(grads32, grads, NAMES))
    print(f"float32 PyTorch vs float64: loss {abs(float(loss32) - float(loss)):.2e}, "
          f"worst gradient rel L2 {worst[0]:.2e} ({worst[1]})")
    for wd, (losses, _) in zip(WEIGHT_DECAYS, runs):
        l32, _, _ = adamw_run(params, x, y, c, wd, torch.float32)
        print(f"float32 PyTorch vs float64, AdamW wd {wd}: max loss diff "
              f"{max(abs(a - b) for a, b in zip(l32, losses)):.2e}")

    mpath = os.path.join(outdir, "gpt2_debug.bin")
    spath = os.path.join(outdir, "gpt2_debug_state.bin")
    nm = write_model(mpath, c, params)
    ns = write_state(spath, x, y, loss, grads, runs, finals[FINAL_PARAMS_RUN])
    P = sum(t.numel() for t in params)
    print(f"{mpath}: {nm} bytes, {P} parameters, config {c}")
    print(f"{spath}: {ns} bytes, B={B} T={T}, loss {float(loss):.6f}")
    for wd, (losses, norms) in zip(WEIGHT_DECAYS, runs):
        print(f"  AdamW wd {wd}: losses " + " ".join(f"{l:.6f}" for l in losses))
        print(f"  AdamW wd {wd}: norms  " + " ".join(f"{n:.4f}" for n in norms))


if __name__ == "__main__":
    main()
