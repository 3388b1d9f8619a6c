"""
test_hf_reference.py - our safetensors reader and writer against the reference implementation
(the `safetensors` Python package, Hugging Face's Rust code): no torch, numpy or GPU needed.

Model directories are written here with the reference's serialize() the way transformers'
save_pretrained lays them out (config.json, model.safetensors or an index and shards), then
build/hf_roundtrip reads each into our parameter table and writes it back out
(llmc/hf_model.h). The output is read with the reference's deserialize(), which validates the
header, offsets and sizes itself, and compared tensor by tensor:
  - a Llama (untied head, llama3 rope) whose tensors are BF16, one F32 and one F16, plus a
    rotary_emb.inv_freq buffer: the output has every model tensor (no buffer), BF16, the same
    shapes, BF16 bytes unchanged and F32 / F16 rounded to nearest even; the header is padded
    with spaces to a multiple of 8 and its __metadata__ is {"format": "pt"}; config.json keeps
    the fields, with rope_theta and the rope dictionaries in both transformers 4.x's and 5.x's forms;
  - a Qwen2 (tied, q/k/v biases) given as two shards and an index, written back as three
    shards: the index's weight_map matches the shards' contents and total_size their bytes;
  - a GPT-2 with GPT2Model's names (no "transformer.") and the old attn.bias buffers: written back
    with GPT2LMHeadModel's names, the Conv1D weights unchanged, no buffers;
  - two bad inputs (an I64 model tensor; a shape other than config.json implies): hf_roundtrip
    exits 1 naming the file and the tensor.

    python3 test/test_hf_reference.py build/hf_roundtrip      (what `make test` runs)

Without the safetensors module the suite is skipped with a note, except under CI=true (where
.ci/run installs it): there a missing module fails. The last line is "N passed, M failed".
"""
import ctypes
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

passed = failed = 0


def check(ok, msg):
    global passed, failed
    print(("  ok   " if ok else "FAIL   ") + msg)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def summary():
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


try:
    import safetensors
    from safetensors import deserialize, serialize
except ImportError:
    if os.environ.get("CI") == "true":
        check(False, "the safetensors module is missing (.ci/run installs it: pip install safetensors)")
    else:
        print("  (skipped: no safetensors module; pip install safetensors to run the reference cross-check)")
    summary()

# ----------------------------------------------------------------------------
# values


def bf16_bits(x):
    """float -> bf16 bits, round to nearest even (llmc/bf16.h's rule; no NaNs here)"""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def f32_of_bits(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def tensor(dtype, shape, rng):
    """(dtype, shape, data bytes, expected BF16 bytes after our round trip)"""
    n = 1
    for d in shape:
        n *= d
    if dtype == "BF16":
        bits = [bf16_bits(rng.uniform(-1, 1)) for _ in range(n)]
        data = struct.pack(f"<{n}H", *bits)
        return dtype, shape, data, data
    if dtype == "F32":
        vals = [struct.unpack("<f", struct.pack("<f", rng.uniform(-1, 1)))[0] for _ in range(n)]
        data = struct.pack(f"<{n}f", *vals)
        return dtype, shape, data, struct.pack(f"<{n}H", *[bf16_bits(v) for v in vals])
    if dtype == "F16":
        vals = [rng.uniform(-1, 1) for _ in range(n)]
        data = struct.pack(f"<{n}e", *vals)
        back = struct.unpack(f"<{n}e", data)  # exact halves, widened exactly
        return dtype, shape, data, struct.pack(f"<{n}H", *[bf16_bits(v) for v in back])
    if dtype == "I64":
        return dtype, shape, struct.pack(f"<{n}q", *range(n)), None
    raise ValueError(dtype)


# ----------------------------------------------------------------------------
# the reference's serialize / deserialize (0.8 takes TensorSpec, older versions dicts)

TORCH_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64"}


def st_bytes(tensors, metadata=None):
    if hasattr(safetensors, "TensorSpec"):
        keep, specs = [], {}
        for name, (dt, shape, data, _) in tensors.items():
            buf = ctypes.create_string_buffer(data, len(data))
            keep.append(buf)
            specs[name] = safetensors.TensorSpec(dtype=TORCH_NAMES[dt], shape=list(shape),
                                                 data_ptr=ctypes.addressof(buf), data_len=len(data))
        return bytes(serialize(specs, metadata))
    return bytes(serialize({n: {"dtype": dt, "shape": list(s), "data": d} for n, (dt, s, d, _) in tensors.items()},
                           metadata))


def st_read(path):
    """{name: (dtype, shape, bytes)} through the reference (which validates the file), and the header"""
    with open(path, "rb") as f:
        raw = f.read()
    out = {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in deserialize(raw)}
    n = struct.unpack("<Q", raw[:8])[0]
    return out, n, raw[8:8 + n]


def write_dir(path, config, tensors, shards=None):
    """a model directory as save_pretrained lays it out; shards: a list of name lists"""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards is None:
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(st_bytes(tensors, {"format": "pt"}))
        return
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with open(os.path.join(path, file), "wb") as f:
            f.write(st_bytes({n: tensors[n] for n in names}, {"format": "pt"}))
        for n in names:
            weight_map[n] = file
            total += len(tensors[n][2])
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)


def roundtrip(tool, src, dst, *extra):
    r = subprocess.run([tool, src, dst, *extra], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


# ----------------------------------------------------------------------------
# the models


def llama_tensors(rng, C, L, NH, NKV, I, V, bias, tied, dtypes=None):
    hd = C // NH
    t = {"model.embed_tokens.weight": ("BF16", [V, C]), "model.norm.weight": ("BF16", [C])}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ("BF16", [C])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [C])
        t[p + "self_attn.q_proj.weight"] = ("BF16", [NH * hd, C])
        t[p + "self_attn.k_proj.weight"] = ("BF16", [NKV * hd, C])
        t[p + "self_attn.v_proj.weight"] = ("BF16", [NKV * hd, C])
        t[p + "self_attn.o_proj.weight"] = ("BF16", [C, NH * hd])
        t[p + "mlp.gate_proj.weight"] = ("BF16", [I, C])
        t[p + "mlp.up_proj.weight"] = ("BF16", [I, C])
        t[p + "mlp.down_proj.weight"] = ("BF16", [C, I])
        if bias:
            t[p + "self_attn.q_proj.bias"] = ("BF16", [NH * hd])
            t[p + "self_attn.k_proj.bias"] = ("BF16", [NKV * hd])
            t[p + "self_attn.v_proj.bias"] = ("BF16", [NKV * hd])
    if not tied:
        t["lm_head.weight"] = ("BF16", [V, C])
    for name, dt in (dtypes or {}).items():
        t[name] = (dt, t[name][1])
    return {name: tensor(dt, shape, rng) for name, (dt, shape) in sorted(t.items())}


def check_output(label, out_dir, expected, extra_names=()):
    """the files of out_dir (one or shards) hold exactly expected's tensors, BF16, as expected"""
    index = os.path.join(out_dir, "model.safetensors.index.json")
    files = {}
    if os.path.exists(index):
        with open(index) as f:
            idx = json.load(f)
        for file in sorted(set(idx["weight_map"].values())):
            files[file] = st_read(os.path.join(out_dir, file))
        contents = {n: file for file, (ts, _, _) in files.items() for n in ts}
        check(contents == idx["weight_map"], f"{label}: the index's weight_map is what each shard holds "
              f"({len(files)} shards)")
        total = sum(len(d) for ts, _, _ in files.values() for _, _, d in ts.values())
        check(idx["metadata"]["total_size"] == total, f"{label}: metadata.total_size {total} = the tensors' bytes")
    else:
        files["model.safetensors"] = st_read(os.path.join(out_dir, "model.safetensors"))
    got = {n: t for ts, _, _ in files.values() for n, t in ts.items()}
    headers_ok = True
    for ts, n, header in files.values():
        text = header.decode("utf-8")
        headers_ok = headers_ok and n % 8 == 0 and json.loads(text)["__metadata__"] == {"format": "pt"} \
            and text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 8
    check(headers_ok, f"{label}: read by the reference; each header padded with spaces to a multiple of 8, "
          "__metadata__ {format: pt}")
    check(set(got) == set(expected) - set(extra_names),
          f"{label}: the same {len(got)} tensor names"
          + ("" if set(got) == set(expected) - set(extra_names)
             else f" (missing {sorted(set(expected) - set(got) - set(extra_names))[:3]}, "
                  f"extra {sorted(set(got) - set(expected))[:3]})"))
    bad = [n for n in got if n in expected and
           (got[n][0] != "BF16" or got[n][1] != list(expected[n][1]) or got[n][2] != expected[n][3])]
    check(not bad, f"{label}: every tensor BF16 with its shape; BF16 bytes unchanged, F32 / F16 rounded to nearest "
          f"even" + (f" (differ: {bad[:3]})" if bad else ""))


def main():
    if len(sys.argv) != 2:
        print("usage: python3 test/test_hf_reference.py build/hf_roundtrip")
        sys.exit(2)
    tool = sys.argv[1]
    print(f"-- llmc/safetensors.h and llmc/hf_model.h against safetensors {safetensors.__version__}")
    rng = random.Random(1234)
    tmp = tempfile.mkdtemp(prefix="test_hf_reference_")
    try:
        # a Llama: untied, llama3 rope; mixed dtypes and a buffer
        C, L, NH, NKV, I, V = 32, 2, 2, 1, 64, 200
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
                  "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
                  "intermediate_size": I, "vocab_size": V, "max_position_embeddings": 128, "rms_norm_eps": 1e-05,
                  "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0,
                                                           "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 64,
                                                           "rope_type": "llama3"},
                  "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
                  "torch_dtype": "bfloat16", "transformers_version": "4.46.0"}
        t = llama_tensors(rng, C, L, NH, NKV, I, V, bias=False, tied=False,
                          dtypes={"model.norm.weight": "F32", "model.layers.1.mlp.down_proj.weight": "F16"})
        t["model.layers.0.self_attn.rotary_emb.inv_freq"] = tensor("F32", [8], rng)
        src, dst = os.path.join(tmp, "llama_in"), os.path.join(tmp, "llama_out")
        write_dir(src, config, t)
        rc, out = roundtrip(tool, src, dst)
        if check(rc == 0, f"llama: hf_roundtrip of the reference's file: {out.strip()}"):
            check_output("llama", dst, t, extra_names=["model.layers.0.self_attn.rotary_emb.inv_freq"])
            with open(os.path.join(dst, "config.json")) as f:
                c = json.load(f)
            same = all(c[k] == config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                   "num_key_value_heads", "intermediate_size", "vocab_size",
                                                   "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                                   "tie_word_embeddings", "bos_token_id", "eos_token_id"))
            rope4 = c["rope_scaling"] == config["rope_scaling"]
            rope5 = c["rope_parameters"] == dict(config["rope_scaling"], rope_theta=500000.0)
            floats = all(isinstance(c[k], float) for k in ("rope_theta", "rms_norm_eps", "initializer_range"))
            check(same and rope4 and rope5 and floats and c["architectures"] == ["LlamaForCausalLM"]
                  and c["torch_dtype"] == "bfloat16" and c["dtype"] == "bfloat16",
                  "llama: config.json keeps the fields; rope_scaling as 4.x wrote it, rope_parameters as 5.x does "
                  "(with rope_theta); floats are JSON floats; (torch_)dtype bfloat16")

        # a Qwen2: tied, biases; two shards in, three out
        t = llama_tensors(rng, C, L, NH, NKV, I, V, bias=True, tied=True)
        config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": C,
                  "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
                  "intermediate_size": I, "vocab_size": V, "max_position_embeddings": 128, "rms_norm_eps": 1e-06,
                  "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": True,
                  "use_sliding_window": False, "sliding_window": 128, "max_window_layers": 2}
        names = sorted(t)
        src, dst = os.path.join(tmp, "qwen_in"), os.path.join(tmp, "qwen_out")
        write_dir(src, config, t, shards=[names[: len(names) // 2], names[len(names) // 2:]])
        rc, out = roundtrip(tool, src, dst, "20000")
        if check(rc == 0, f"qwen: hf_roundtrip of 2 reference shards + index, written as shards: {out.strip()}"):
            check_output("qwen", dst, t)

        # a GPT-2 with GPT2Model's names and the old mask buffers
        C, L, V, T = 32, 2, 300, 64
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": C, "n_layer": L,
                  "n_head": 2, "n_positions": T, "n_ctx": T, "vocab_size": V, "layer_norm_epsilon": 1e-05,
                  "activation_function": "gelu_new"}
        shapes = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
        for l in range(L):
            for k, s in (("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                         ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                         ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, 4 * C]),
                         ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])):
                shapes[f"h.{l}.{k}"] = s
        t = {n: tensor("BF16", s, rng) for n, s in shapes.items()}
        buffers = {f"h.{l}.attn.bias": tensor("F32", [1, 1, T, T], rng) for l in range(L)}
        src, dst = os.path.join(tmp, "gpt2_in"), os.path.join(tmp, "gpt2_out")
        write_dir(src, config, dict(t, **buffers))
        rc, out = roundtrip(tool, src, dst)
        if check(rc == 0, f"gpt2: hf_roundtrip of GPT2Model's names with attn.bias buffers: {out.strip()}"):
            check_output("gpt2", dst, {"transformer." + n: v for n, v in t.items()})

        # bad inputs: the message names the file and the tensor
        t = llama_tensors(rng, 32, 2, 2, 1, 64, 200, bias=False, tied=True)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
               "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
               "intermediate_size": 64, "vocab_size": 200, "max_position_embeddings": 128,
               "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": True}
        bad = dict(t)
        bad["model.norm.weight"] = tensor("I64", [32], rng)
        src = os.path.join(tmp, "bad_dtype")
        write_dir(src, cfg, bad)
        rc, out = roundtrip(tool, src, os.path.join(tmp, "bad_out"))
        check(rc == 1 and "model.norm.weight" in out and "I64" in out and src in out,
              f"an I64 model tensor: refused: {out.strip()}")
        bad = dict(t)
        bad["model.layers.1.mlp.gate_proj.weight"] = tensor("BF16", [32, 64], rng)
        src = os.path.join(tmp, "bad_shape")
        write_dir(src, cfg, bad)
        rc, out = roundtrip(tool, src, os.path.join(tmp, "bad_out"))
        check(rc == 1 and "'model.layers.1.mlp.gate_proj.weight' has shape [32, 64]" in out and "implies [64, 32]" in out,
              f"a shape other than config.json implies: refused: {out.strip()}")
        check(not os.path.exists(os.path.join(tmp, "bad_out")), "  and no output directory is left")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary()


if __name__ == "__main__":
    main()
