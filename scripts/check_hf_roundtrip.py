"""
check_hf_roundtrip.py - transformers and our C reader / writer of Hugging Face checkpoints agree:
run on the GPU machine (torch and transformers; a GPU is used when present, else the CPU).

For each of three small random models,
  llama: LlamaForCausalLM, untied head, grouped-query attention, Llama 3.1's llama3 rope scaling;
  qwen2: Qwen2ForCausalLM, tied head, q/k/v biases (saved in shards: max_shard_size 100KB);
  gpt2:  GPT2LMHeadModel (Conv1D weights, tied head),
  (a) transformers builds it from a config, draws every weight at random (norms around 1 and
      biases too, so that nothing is left at its initial value), casts it to bf16, and
      save_pretrained writes IN;
  (b) build/hf_roundtrip IN OUT reads IN into our parameter table (the trainer's -e IN) and
      writes it back out (the trainer's -hf 1 writer); OUT_SHARDED likewise with shards of 64 KB;
  (c) transformers loads IN, OUT and OUT_SHARDED (AutoModelForCausalLM, eager attention): the
      class is the same, every tensor of the state dict is equal (torch.equal), the rotary
      embedding's inv_freq is equal (the rope fields of config.json read back alike: OUT's
      config.json has transformers 4.x's and 5.x's rope forms both), and the logits of a fixed
      batch are bitwise equal, in bf16 and in fp32.
Prints one line per check and "N passed, M failed"; exits 1 on any failure.

    make build/hf_roundtrip && python3 scripts/check_hf_roundtrip.py [--tool build/hf_roundtrip] [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM

passed = failed = 0


def check(ok, msg):
    global passed, failed
    print(("  ok   " if ok else "FAIL   ") + msg, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def make_config(kind):
    if kind == "gpt2":
        return transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                       activation_function="gelu_new", layer_norm_epsilon=1e-5)
    common = dict(vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, hidden_act="silu", initializer_range=0.02,
                  bos_token_id=1, eos_token_id=2)
    if kind == "llama":
        cfg_cls, theta = transformers.LlamaConfig, 500000.0
        common.update(rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
        scaling = dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=64)
    else:
        cfg_cls, theta = transformers.Qwen2Config, 1000000.0
        common.update(rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False)
        scaling = None
    # transformers 5 takes rope_parameters; 4.x took rope_theta and rope_scaling
    try:
        rope = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
        return cfg_cls(rope_parameters=rope, **common)
    except TypeError:
        return cfg_cls(rope_theta=theta, rope_scaling=scaling, **common)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:  # RMSNorm / LayerNorm weights and LayerNorm biases
                v = (1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=g)
            else:  # matrices, embeddings and biases
                v = 0.02 * torch.randn(p.shape, generator=g)
            p.copy_(v)


def load(path, dtype, device):
    m = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    return m.to(device=device, dtype=dtype).eval()


def run_tool(tool, src, dst, *extra):
    r = subprocess.run([tool, src, dst, *extra], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def compare(label, a, b, ids):
    """b is the model transformers loads from our directory, a the one from its own"""
    check(type(a).__name__ == type(b).__name__, f"{label}: the class {type(b).__name__}")
    sa, sb = a.state_dict(), b.state_dict()
    keys_same = set(sa) == set(sb)
    diff = [k for k in sa if k in sb and not torch.equal(sa[k], sb[k])]
    check(keys_same and not diff, f"{label}: state dict, {len(sa)} tensors equal"
          + ("" if keys_same else f" (keys differ: {sorted(set(sa) ^ set(sb))[:4]})")
          + (f" (differ: {diff[:4]})" if diff else ""))
    ra = getattr(getattr(a, "model", None), "rotary_emb", None)
    if ra is not None:
        rb = b.model.rotary_emb
        check(torch.equal(ra.inv_freq, rb.inv_freq) and getattr(ra, "attention_scaling", 1.0) ==
              getattr(rb, "attention_scaling", 1.0), f"{label}: rotary inv_freq equal (rope config read alike)")
    with torch.no_grad():
        la, lb = a(input_ids=ids).logits, b(input_ids=ids).logits
    check(torch.equal(la, lb), f"{label}: logits {tuple(la.shape)} bitwise equal "
          f"(max |diff| {(la.float() - lb.float()).abs().max().item():.3g})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default="build/hf_roundtrip")
    ap.add_argument("--keep", default=None, help="write the directories here and keep them")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"-- transformers {transformers.__version__}, torch {torch.__version__}, {device}")
    root = args.keep or tempfile.mkdtemp(prefix="check_hf_roundtrip_")
    os.makedirs(root, exist_ok=True)
    try:
        for seed, kind in enumerate(("llama", "qwen2", "gpt2")):
            src, out, out_sh = (os.path.join(root, f"{kind}_{s}") for s in ("in", "out", "out_sharded"))
            for d in (src, out, out_sh):
                shutil.rmtree(d, ignore_errors=True)
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(make_config(kind))
            randomize(model, seed)
            model = model.to(torch.bfloat16)
            model.save_pretrained(src, max_shard_size="100KB" if kind == "qwen2" else "5GB")
            rc, msg = run_tool(args.tool, src, out)
            if not check(rc == 0, f"{kind}: hf_roundtrip IN OUT: {msg}"):
                continue
            rc, msg = run_tool(args.tool, src, out_sh, "65536")
            check(rc == 0 and os.path.exists(os.path.join(out_sh, "model.safetensors.index.json")),
                  f"{kind}: hf_roundtrip IN OUT_SHARDED 65536 (shards + index): {msg}")
            g = torch.Generator().manual_seed(100 + seed)
            ids = torch.randint(0, 1000, (2, 77), generator=g).to(device)
            for dtype in (torch.bfloat16, torch.float32):
                a = load(src, dtype, device)
                for name, path in (("OUT", out), ("OUT_SHARDED", out_sh)):
                    if os.path.isdir(path):
                        compare(f"{kind} {str(dtype).split('.')[-1]} IN vs {name}", a, load(path, dtype, device), ids)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
