"""
export_llama_fixture.py - transformers' answer for small Llama 3 / Qwen2.5 models, the
reference the trainer's Llama family is tested against (build/test_train_gpu reads the files
when given their directory; make test-gpu makes them first).

Three models that between them exercise every feature of the family, with the published
models' vocabularies (the LM head at real size):
  llama: LlamaForCausalLM, 4 layers, hidden 512, 8 heads / 2 kv heads, intermediate 1408,
         V 128256, rope_theta 500000 with Llama 3.1 frequency scaling (factor 32, low 1,
         high 4, original 8192, as Llama 3.2), eps 1e-5, untied LM head, no biases;
  qwen:  Qwen2ForCausalLM, the same sizes, V 151936, rope_theta 1e6, eps 1e-6, q/k/v
         biases, tied embeddings;
  llama_hd128: LlamaForCausalLM, 2 layers, hidden 768, 6 heads / 2 kv heads: head size 128 and
         groups of 3 query heads per kv head, as Llama-3.2-3B; its rope scaling, tied embeddings.
Weights are random (torch.manual_seed per model): matrices and embeddings N(0, 0.02), the
norms' weights 1 + N(0, 0.1) and the biases N(0, 0.02), so that every gradient is exercised;
each value rounded to bf16, so that the trainer's bf16 parameters are exactly the ones
computed with here. The batch: B x T + 1 uniform token ids, x = tokens[:-1], y = tokens[1:].

Computed in float64 on the GPU (model.double(), eager attention), so the answer is the exact
math of transformers' model on the stored weights up to fp64 rounding (its rotary tables are
float32, as transformers computes them for any dtype): the mean cross-entropy of logits
(B, T, V) against y, the logits of a few positions, the gradient of every parameter, and
10 AdamW steps on the same batch from the stored weights with the trainer's update
(global-norm clipping at 1, lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the
matrices and embeddings only, decoupled: p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)).

File (little-endian), one per model, NAME.bin:
  int32 header[256]: [0] 20241203 (magic), [1] 1 (version), [2] B, [3] T, [4] L, [5] C,
    [6] NH, [7] NKV, [8] I, [9] V, [10] tied, [11] attention bias, [12] rope scaling (0/1),
    [13] original_max_position_embeddings, [14] number of parameters P, [15] logit rows R,
    [16] AdamW steps S, [17] max_position_embeddings, [18] model type (0 llama, 1 qwen2);
    float32 bit patterns: [32] rms eps, [33] rope_theta, [34] factor, [35] low_freq_factor,
    [36] high_freq_factor, [37] lr, [38] beta1, [39] beta2, [40] eps, [41] weight decay,
    [42] grad clip
  float32 params[P] in the trainer's table order (llmc/llama.h): embed (V, C), ln1w (L, C),
    qkvw (L, (NH + 2 NKV) hd, C) = [q_proj; k_proj; v_proj] rows, qkvb (L, (NH + 2 NKV) hd)
    when biased, attprojw (L, C, NH hd) = o_proj, ln2w (L, C), gateupw (L, 2 I, C) =
    [gate_proj; up_proj] rows, downw (L, C, I), lnfw (C), lm_head (V, C) when untied
  int32 x[B T], int32 y[B T], int32 logit_pos[R] (flat positions b T + t)
  float32 loss, float32 logits[R][V], float32 grads[P] (the same order),
  float32 inv_freq[hd / 2] (transformers' rotary inverse frequencies),
  float32 losses[S], float32 norms[S] (loss before each update; the unclipped norm)
The file size is exactly that.

Run on a machine with torch and transformers (the GPU machine; a GPU is used when present):
    python3 scripts/export_llama_fixture.py OUTDIR [llama] [qwen] [llama_hd128]
"""
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC, VERSION = 20241203, 1
B, T = 2, 77  # T not a multiple of the kernels' tiles
LOGIT_ROWS = 4
STEPS, LR, BETA1, BETA2, EPS, WD, CLIP = 10, 1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0

MODELS = {
    "llama": dict(arch="llama", L=4, C=512, NH=8, NKV=2, I=1408, V=128256, theta=500000.0, eps=1e-5,
                  scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=8192),
                  tied=False, bias=False, max_pos=131072, seed=1),
    "qwen": dict(arch="qwen2", L=4, C=512, NH=8, NKV=2, I=1408, V=151936, theta=1000000.0, eps=1e-6,
                 scaling=None, tied=True, bias=True, max_pos=32768, seed=2),
    "llama_hd128": dict(arch="llama", L=2, C=768, NH=6, NKV=2, I=1024, V=128256, theta=500000.0, eps=1e-5,
                        scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=8192),
                        tied=True, bias=False, max_pos=131072, seed=3),
}


def make_model(m):
    import transformers
    common = dict(vocab_size=m["V"], hidden_size=m["C"], intermediate_size=m["I"], num_hidden_layers=m["L"],
                  num_attention_heads=m["NH"], num_key_value_heads=m["NKV"], rms_norm_eps=m["eps"],
                  max_position_embeddings=m["max_pos"], tie_word_embeddings=m["tied"], hidden_act="silu",
                  initializer_range=0.02, attn_implementation="eager")
    rope = {"rope_type": "default", "rope_theta": m["theta"]}
    if m["scaling"] is not None:
        rope = dict(m["scaling"], rope_type="llama3", rope_theta=m["theta"])
    if m["arch"] == "llama":
        cls, cfg_cls = transformers.LlamaForCausalLM, transformers.LlamaConfig
        common["attention_bias"] = m["bias"]
        common["mlp_bias"] = False
    else:
        cls, cfg_cls = transformers.Qwen2ForCausalLM, transformers.Qwen2Config
        common["use_sliding_window"] = False
    # transformers 5 takes rope_parameters; 4.x took rope_theta and rope_scaling
    try:
        cfg = cfg_cls(rope_parameters=rope, **common)
    except TypeError:
        cfg = cfg_cls(rope_theta=m["theta"], rope_scaling=(None if m["scaling"] is None else
                      dict(m["scaling"], rope_type="llama3")), **common)
    return cls(cfg)


def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


def randomize(model, m):
    g = torch.Generator().manual_seed(m["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            else:  # matrices, embeddings and the q/k/v biases
                v = 0.02 * torch.randn(p.shape, generator=g)
            p.copy_(bf16_round(v))


def table(model, m, grads=False):
    """The model's parameters (or their gradients) in the trainer's table order, flattened."""
    L = m["L"]
    get = (lambda p: p.grad) if grads else (lambda p: p)
    mm = model.model
    layers = mm.layers
    parts = [get(mm.embed_tokens.weight)]
    parts += [get(layers[l].input_layernorm.weight) for l in range(L)]
    parts += [torch.cat([get(layers[l].self_attn.q_proj.weight), get(layers[l].self_attn.k_proj.weight),
                         get(layers[l].self_attn.v_proj.weight)], 0) for l in range(L)]
    if m["bias"]:
        parts += [torch.cat([get(layers[l].self_attn.q_proj.bias), get(layers[l].self_attn.k_proj.bias),
                             get(layers[l].self_attn.v_proj.bias)], 0) for l in range(L)]
    parts += [get(layers[l].self_attn.o_proj.weight) for l in range(L)]
    parts += [get(layers[l].post_attention_layernorm.weight) for l in range(L)]
    parts += [torch.cat([get(layers[l].mlp.gate_proj.weight), get(layers[l].mlp.up_proj.weight)], 0)
              for l in range(L)]
    parts += [get(layers[l].mlp.down_proj.weight) for l in range(L)]
    parts += [get(mm.norm.weight)]
    if not m["tied"]:
        parts += [get(model.lm_head.weight)]
    return torch.cat([p.detach().reshape(-1).to(torch.float64) for p in parts])


def decayed(name):
    return name.endswith("_proj.weight") or name.endswith("embed_tokens.weight") or name == "lm_head.weight"


def loss_of(model, x, y, V):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)), logits


def export(name, outdir, device):
    m = MODELS[name]
    torch.manual_seed(m["seed"])
    model = make_model(m)
    randomize(model, m)
    model = model.to(device=device, dtype=torch.float64)
    model.train()
    L, C, NH, NKV, I, V = m["L"], m["C"], m["NH"], m["NKV"], m["I"], m["V"]
    hd = C // NH
    g = torch.Generator().manual_seed(100 + m["seed"])
    tokens = torch.randint(0, V, (B * T + 1,), generator=g)
    x = tokens[:-1].view(B, T).to(device)
    y = tokens[1:].view(B, T).to(device)
    pos = torch.tensor([0, T - 1, T + 5, B * T - 1], dtype=torch.int64)
    params0 = table(model, m).to(torch.float32).cpu()
    inv_freq = model.model.rotary_emb.inv_freq.detach().to(torch.float32).cpu()

    model.zero_grad(set_to_none=True)
    loss, logits = loss_of(model, x, y, V)
    loss.backward()
    grads = table(model, m, grads=True).to(torch.float32).cpu()
    rows = logits.detach().reshape(B * T, V)[pos.to(device)].to(torch.float32).cpu()
    print(f"{name}: {params0.numel()} parameters, loss {loss.item():.6f} (ln V {math.log(V):.6f}), "
          f"|grad| {grads.double().norm().item():.4f}, inv_freq[0, 16, 31] "
          f"{inv_freq[0].item():.6g} {inv_freq[hd // 4].item():.6g} {inv_freq[-1].item():.6g}")

    # 10 AdamW steps, the trainer's rule, in float64
    named = [(n, p) for n, p in model.named_parameters()]
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in named}
    losses, norms = [], []
    for t in range(1, STEPS + 1):
        model.zero_grad(set_to_none=True)
        lt, _ = loss_of(model, x, y, V)
        lt.backward()
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for _, p in named))
        losses.append(lt.item())
        norms.append(norm)
        s = 1.0 / norm if norm > CLIP else 1.0
        with torch.no_grad():
            for n, p in named:
                mo, vo = state[n]
                gr = p.grad * s
                mo.mul_(BETA1).add_(gr, alpha=1 - BETA1)
                vo.mul_(BETA2).addcmul_(gr, gr, value=1 - BETA2)
                mhat = mo / (1 - BETA1 ** t)
                vhat = vo / (1 - BETA2 ** t)
                wd = WD if decayed(n) else 0.0
                p.sub_(LR * (mhat / (vhat.sqrt() + EPS) + wd * p))
    print(f"{name}: AdamW losses " + " ".join(f"{v:.6f}" for v in losses))

    sc = m["scaling"] or dict(factor=1.0, low_freq_factor=1.0, high_freq_factor=1.0,
                              original_max_position_embeddings=0)
    hdr = np.zeros(256, dtype=np.int32)
    hdr[:19] = [MAGIC, VERSION, B, T, L, C, NH, NKV, I, V, int(m["tied"]), int(m["bias"]),
                int(m["scaling"] is not None), sc["original_max_position_embeddings"], params0.numel(),
                len(pos), STEPS, m["max_pos"], int(m["arch"] == "qwen2")]
    fl = [m["eps"], m["theta"], sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], LR, BETA1, BETA2, EPS,
          WD, CLIP]
    hdr[32:32 + len(fl)] = np.array(fl, dtype=np.float32).view(np.int32)
    path = os.path.join(outdir, name + ".bin")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(hdr.tobytes())
        f.write(params0.numpy().astype("<f4").tobytes())
        f.write(x.cpu().numpy().astype("<i4").tobytes())
        f.write(y.cpu().numpy().astype("<i4").tobytes())
        f.write(pos.numpy().astype("<i4").tobytes())
        f.write(struct.pack("<f", loss.item()))
        f.write(rows.numpy().astype("<f4").tobytes())
        f.write(grads.numpy().astype("<f4").tobytes())
        f.write(inv_freq.numpy().astype("<f4").tobytes())
        f.write(np.array(losses, dtype="<f4").tobytes())
        f.write(np.array(norms, dtype="<f4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    print(f"{name}: wrote {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: export_llama_fixture.py OUTDIR [" + "] [".join(MODELS) + "]")
    outdir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(outdir, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model '{n}' ({', '.join(MODELS)})")
        export(n, outdir, device)


if __name__ == "__main__":
    main()
