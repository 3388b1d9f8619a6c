#!/usr/bin/env python3
"""
bench_torch_llama.py - PyTorch baseline for Llama 3 / Qwen2.5 training speed: Hugging Face
transformers' LlamaForCausalLM / Qwen2ForCausalLM built from a config (random init, nothing
downloaded), trained for a few steps on one GPU. The numbers to set beside train_gpt's.

Each step: forward with the loss (HF's logits + cross-entropy, or Liger's fused linear
cross-entropy), backward, gradient clipping at global norm 1.0, fused AdamW (lr 3e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1 on the 2-D tensors). Targets are the next tokens of each
row: T of them per row, as train_gpt counts.

Measured: each step's time by CUDA events; the median over the steps after --warmup;
tok/s = B*T / median; MFU against the GPU's dense bf16 peak with train_gpt's count of FLOPs
(llmc/llama.h llama_family_flops, llmc/mfu.h's peaks: H200/H100 SXM 989 TFLOP/s);
peak memory (torch.cuda.max_memory_allocated / max_memory_reserved) in GiB. The last line is
machine-readable:
    RESULT model=... B=... T=... tok_s=... step_ms=... mfu=<percent> peak_alloc_gib=... ...
An out-of-memory run prints RESULT ... oom=1 and exits 0.

Settings:
    --model        qwen2.5-0.5b qwen2.5-1.5b llama3.2-1b llama3.2-3b llama3.1-8b (train_gpt's values)
    --params fp32  fp32 parameters and AdamW state, bf16 autocast (like train_gpt's master weights)
    --params bf16  bf16 parameters and AdamW state, no autocast
    --attn sdpa    torch SDPA (flash attention on the GPU); eager also works
    --liger all    liger_kernel's rope, rms_norm, swiglu and fused_linear_cross_entropy (patched
                   into transformers before the model is built); flce: only the fused loss
    --compile      torch.compile of the model (default on the GPU; --no-compile to turn off)
    --find-max-batch  B doubled from -b until out of memory, then bisected; a few steps each;
                   reports the largest B that ran (in one process, so a little below a fresh
                   process's limit is possible)
    --data FILE    an llm.c token shard (.bin) instead of random tokens

Run (on the GPU machine; Liger from the wheel in .whl/ where wanted):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    python3 scripts/bench_torch_llama.py --model qwen2.5-0.5b -b 32 -t 1024
    python3 scripts/bench_torch_llama.py --model qwen2.5-0.5b -b 32 --liger all
    python3 scripts/bench_torch_llama.py --model qwen2.5-0.5b --find-max-batch
Check on a CPU (2 layers, small sizes, no compile):
    python3 scripts/bench_torch_llama.py --device cpu --tiny --steps 3 --warmup 1 -b 2 -t 64
"""
import argparse
import gc
import inspect
import os
import statistics
import sys
import time

import torch

MODELS = {
    # name: family, hidden, layers, heads, kv heads, intermediate, vocab, max positions, tied,
    #       rms eps, rope theta, llama3 rope factor (0: none)
    "qwen2.5-0.5b": ("qwen2", 896, 24, 14, 2, 4864, 151936, 32768, True, 1e-6, 1e6, 0.0),
    "qwen2.5-1.5b": ("qwen2", 1536, 28, 12, 2, 8960, 151936, 32768, True, 1e-6, 1e6, 0.0),
    "llama3.2-1b": ("llama", 2048, 16, 32, 8, 8192, 128256, 131072, True, 1e-5, 5e5, 32.0),
    "llama3.2-3b": ("llama", 3072, 28, 24, 8, 8192, 128256, 131072, True, 1e-5, 5e5, 32.0),
    "llama3.1-8b": ("llama", 4096, 32, 32, 8, 14336, 128256, 131072, False, 1e-5, 5e5, 8.0),
}

# llmc/mfu.h: dense bf16 tensor-core peaks; the first row whose name part is in the GPU's name
GPU_PEAKS = [
    ("H200 NVL", 835e12), ("H100 NVL", 835e12), ("H100 PCIe", 756e12), ("GH200", 989e12),
    ("H200", 989e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12),
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(MODELS))
    p.add_argument("-b", "--batch", type=int, default=None, help="batch size (default 8; with --find-max-batch the start, 1)")
    p.add_argument("-t", "--seq", type=int, default=1024, help="sequence length T (default 1024)")
    p.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="steps before timing (default 5)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on for cuda, off for cpu)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--params", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--liger", default="none", choices=["none", "all", "flce"])
    p.add_argument("--find-max-batch", action="store_true")
    p.add_argument("--trial-steps", type=int, default=3, help="steps per batch size with --find-max-batch (default 3)")
    p.add_argument("--data", default=None, help="llm.c token shard (.bin); default random tokens")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--peak-tflops", type=float, default=None, help="bf16 peak for MFU (default from the GPU's name)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a 2-layer small model of the family (for checks)")
    a = p.parse_args()
    if a.batch is None:
        a.batch = 1 if a.find_max_batch else 8
    if a.compile is None:
        a.compile = a.device == "cuda"
    return a


def tf_major():
    import transformers
    return int(transformers.__version__.split(".")[0])


def make_config(args):
    fam, C, L, NH, NKV, I, V, maxT, tied, eps, theta, factor = MODELS[args.model]
    if args.tiny:
        C, L, NH, NKV, I, V = 64, 2, 4, 2, 128, 512
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=NKV, max_position_embeddings=maxT, rms_norm_eps=eps, tie_word_embeddings=tied,
              initializer_range=0.02, hidden_act="silu", use_cache=False, attn_implementation=args.attn)
    rope = {"rope_type": "default"}
    if factor:
        rope = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    if tf_major() >= 5:  # transformers 5: theta and scaling in one dict, rope_parameters
        kw["rope_parameters"] = dict(rope, rope_theta=theta)
    else:  # 4.x: rope_theta and rope_scaling
        kw["rope_theta"] = theta
        if factor:
            kw["rope_scaling"] = rope
    if fam == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        kw.update(attention_bias=False, mlp_bias=False)  # Qwen2's q/k/v biases are built in
        return LlamaConfig(**kw), LlamaForCausalLM
    from transformers import Qwen2Config, Qwen2ForCausalLM
    kw.update(use_sliding_window=False)
    return Qwen2Config(**kw), Qwen2ForCausalLM


def apply_liger(args):
    """Patches transformers' modules; before the model is built, as Liger's docs say."""
    if args.liger == "none":
        return None
    import liger_kernel
    from liger_kernel.transformers import apply_liger_kernel_to_llama, apply_liger_kernel_to_qwen2
    on = args.liger == "all"
    fn = apply_liger_kernel_to_qwen2 if MODELS[args.model][0] == "qwen2" else apply_liger_kernel_to_llama
    fn(rope=on, rms_norm=on, swiglu=on, cross_entropy=False, fused_linear_cross_entropy=True)
    try:
        from importlib.metadata import version
        return version("liger-kernel")
    except Exception:
        return getattr(liger_kernel, "__version__", "?")


def flops_per_token(cfg, T):
    """llmc/llama.h llama_family_flops: 6 per matmul parameter (q/k/v, o, gate/up/down per layer,
    the head's Vp x C once, Vp = vocab rounded up to 128) + 12 L T (NH hd) for attention."""
    C, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = getattr(cfg, "head_dim", None) or C // cfg.num_attention_heads
    AH = cfg.num_attention_heads * hd
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd
    Vp = (cfg.vocab_size + 127) // 128 * 128
    per_layer = qkv * C + C * AH + 3.0 * I * C
    matmul = per_layer * L + Vp * C
    return 6.0 * matmul + 12.0 * L * T * AH


def gpu_peak(args, dev):
    if args.peak_tflops:
        return args.peak_tflops * 1e12, "given"
    if dev.type != "cuda":
        return None, "cpu"
    name = torch.cuda.get_device_name(dev)
    for part, flops in GPU_PEAKS:
        if part in name:
            return flops, name
    return None, name


class Batches:
    """(x, y) of B rows of T tokens and their next tokens: random ids, or consecutive windows of a shard."""

    def __init__(self, args, vocab, dev):
        self.dev, self.vocab, self.tokens, self.pos = dev, vocab, None, 0
        self.gen = torch.Generator(device="cpu").manual_seed(args.seed)
        if args.data:
            import numpy as np
            header = np.fromfile(args.data, dtype=np.int32, count=256)
            magic, ver, ntok = int(header[0]), int(header[1]), int(header[2])
            if (magic, ver) == (20240520, 1):
                dt = np.uint16
            elif (magic, ver) == (20240801, 7):
                dt = np.uint32
            else:
                sys.exit(f"{args.data}: magic {magic} version {ver}: not an llm.c shard (20240520 v1, 20240801 v7)")
            toks = np.fromfile(args.data, dtype=dt, count=ntok, offset=1024)
            if len(toks) != ntok or int(toks.max()) >= vocab:
                sys.exit(f"{args.data}: {len(toks)} of {ntok} tokens read, max id {int(toks.max())} (vocab {vocab})")
            self.tokens = torch.from_numpy(toks.astype(np.int64))

    def get(self, B, T):
        if self.tokens is None:
            buf = torch.randint(0, self.vocab, (B, T + 1), generator=self.gen)
        else:
            n = B * T + 1
            if n > len(self.tokens):
                sys.exit(f"shard of {len(self.tokens)} tokens is shorter than B*T+1 = {n}")
            if self.pos + n > len(self.tokens):
                self.pos = 0
            flat = self.tokens[self.pos:self.pos + n]
            self.pos += B * T
            buf = torch.stack([flat[i * T:i * T + T + 1] for i in range(B)])
        buf = buf.to(self.dev, non_blocking=True)
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()


def flash_probe(cfg, T, dev):
    """Whether SDPA's flash kernel takes this attention (it is first in SDPA's order, so 'auto' uses it)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    NH, NKV = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // NH
    q = torch.zeros(1, NH, T, hd, device=dev, dtype=torch.bfloat16)
    k = torch.zeros(1, NKV, T, hd, device=dev, dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=NH != NKV)
        return "yes"
    except RuntimeError as e:
        return "no (" + str(e).splitlines()[0][:120] + ")"


OOM_ERRORS = tuple({getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError), torch.cuda.OutOfMemoryError})


def is_oom(e):
    if isinstance(e, OOM_ERRORS):
        return True
    s = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in s or "CUBLAS_STATUS_ALLOC_FAILED" in s)


def main():
    args = parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device (use --device cpu for a check)")
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    import transformers

    liger_ver = apply_liger(args)
    cfg, cls = make_config(args)
    # build on the device; bf16 parameters by default dtype (HF keeps rope's inv_freq fp32 itself)
    if args.params == "bf16":
        torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = cls(cfg)
    torch.set_default_dtype(torch.float32)
    model.train()
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False

    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    n_embed = model.get_input_embeddings().weight.numel()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.compile else model

    # the targets y are already the next tokens: shift_labels keeps all T of them (HF and Liger take it)
    try:
        from transformers.loss import loss_utils
        use_shift = "shift_labels" in inspect.signature(loss_utils.ForCausalLMLoss).parameters
    except ImportError:
        use_shift = False
    autocast = args.params == "fp32"

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            if use_shift:
                out = fwd(input_ids=x, labels=y, shift_labels=y, use_cache=False)
            else:  # older transformers shift the labels themselves: T - 1 targets per row
                out = fwd(input_ids=x, labels=x, use_cache=False)
        loss = out.loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip) if args.grad_clip > 0 else None
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss, norm

    peak, peak_src = gpu_peak(args, dev)
    T = args.seq
    fpt = flops_per_token(cfg, T)
    if T > cfg.max_position_embeddings:
        sys.exit(f"T {T} > max_position_embeddings {cfg.max_position_embeddings}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, liger {liger_ver or 'off'}, "
          f"device {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}")
    print(f"model {args.model}{' (tiny)' if args.tiny else ''}: {cls.__name__}, L {cfg.num_hidden_layers}, "
          f"C {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, I {cfg.intermediate_size}, "
          f"V {cfg.vocab_size}, tied {cfg.tie_word_embeddings}, params {n_params / 1e6:.1f}M "
          f"(embedding {n_embed / 1e6:.1f}M), attn {model.config._attn_implementation}")
    print(f"params {args.params} ({params[0].dtype}){' + bf16 autocast' if autocast else ''}, AdamW fused lr {args.lr} "
          f"wd {args.wd} (2-D), grad clip {args.grad_clip}, compile {args.compile}, liger {args.liger}, "
          f"data {args.data or 'random tokens'}, targets per row {T if use_shift else T - 1}")
    if dev.type == "cuda" and args.attn == "sdpa":
        print(f"SDPA flash kernel for this attention (B 1, T {T}, bf16, causal, GQA): {flash_probe(cfg, T, dev)}; "
              f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}")
    print(f"flops/token {fpt:.4e} (train_gpt's count at T {T}); peak "
          + (f"{peak / 1e12:.1f} TFLOP/s ({peak_src})" if peak else f"unknown ({peak_src}): no MFU"))

    data = Batches(args, cfg.vocab_size, dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def mem():
        if dev.type != "cuda":
            return 0.0, 0.0
        return torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30

    def run(B, nsteps, label):
        """nsteps steps at batch B; the step times (ms) and losses."""
        times, losses = [], []
        for i in range(nsteps):
            x, y = data.get(B, T)
            sync()
            if dev.type == "cuda":
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                loss, norm = step(x, y)
                e1.record()
                e1.synchronize()
                ms = e0.elapsed_time(e1)
            else:
                t0 = time.perf_counter()
                loss, norm = step(x, y)
                ms = (time.perf_counter() - t0) * 1e3
            lv = loss.item()
            times.append(ms)
            losses.append(lv)
            ns = f" norm {norm.item():.3f}" if norm is not None else ""
            print(f"{label} step {i + 1}/{nsteps}: loss {lv:.4f}{ns} {ms:.1f} ms "
                  f"({B * T / ms * 1e3:,.0f} tok/s)", flush=True)
        return times, losses

    def tried(B, nsteps, label):
        """run(), or None where it ran out of memory (memory given back); peak memory counted from here."""
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        try:
            return run(B, nsteps, label)
        except Exception as e:  # noqa: BLE001 - only out of memory is caught
            if not is_oom(e):
                raise
            print(f"{label}: out of memory at B {B}: {str(e).splitlines()[0][:200]}", flush=True)
        opt.zero_grad(set_to_none=True)
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return None

    common = (f"model={args.model}{'-tiny' if args.tiny else ''} T={T} liger={args.liger} params={args.params} "
              f"attn={args.attn} compile={int(args.compile)}")

    def mfu_of(tok_s):
        return f"{fpt * tok_s / peak * 100:.1f}" if peak else "na"

    if args.find_max_batch:
        ok, bad, B, best = 0, None, max(1, args.batch), None
        while bad is None:
            r = tried(B, args.trial_steps, f"B={B}")
            if r is None:
                bad = B
            else:
                ok, best, best_mem = B, r, mem()
                B *= 2
                if B > 1 << 16:
                    break
        while bad is not None and bad - ok > 1:
            B = (ok + bad) // 2
            r = tried(B, args.trial_steps, f"B={B}")
            if r is None:
                bad = B
            else:
                ok, best, best_mem = B, r, mem()
        if ok == 0:
            print("no batch size ran (B=1 out of memory)")
            print(f"RESULT {common} find_max_batch=1 max_B=0 oom=1")
            return
        ms, (pa, pr) = best[0][-1], best_mem
        tok_s = ok * T / ms * 1e3
        print(f"largest B that ran: {ok} (first out of memory at {bad}); its last step {ms:.1f} ms, "
              f"{tok_s:,.0f} tok/s, MFU {mfu_of(tok_s)}% (rough: {args.trial_steps} steps); peak allocated "
              f"{pa:.2f} GiB, reserved {pr:.2f} GiB at that B")
        print(f"RESULT {common} find_max_batch=1 max_B={ok} oom_B={bad} tok_s={tok_s:.0f} step_ms={ms:.1f} "
              f"mfu={mfu_of(tok_s)} peak_alloc_gib={pa:.2f} peak_reserved_gib={pr:.2f}")
        return

    B = args.batch
    r = tried(B, args.warmup + args.steps, "train")
    pa, pr = mem()
    if r is None:
        print(f"out of memory at B {B} T {T}: no result (peak allocated {pa:.2f} GiB, reserved {pr:.2f} GiB)")
        print(f"RESULT {common} B={B} oom=1 peak_alloc_gib={pa:.2f} peak_reserved_gib={pr:.2f}")
        return
    times, losses = r
    timed = times[args.warmup:] or times
    med = statistics.median(timed)
    tok_s = B * T / med * 1e3
    print(f"median step {med:.2f} ms over {len(timed)} steps (min {min(timed):.2f}, max {max(timed):.2f}); "
          f"{tok_s:,.0f} tok/s; MFU {mfu_of(tok_s)}%; peak allocated {pa:.2f} GiB, reserved {pr:.2f} GiB")
    print(f"RESULT {common} B={B} tok_s={tok_s:.0f} step_ms={med:.2f} mfu={mfu_of(tok_s)} peak_alloc_gib={pa:.2f} "
          f"peak_reserved_gib={pr:.2f} loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f} oom=0")


if __name__ == "__main__":
    main()
