#!/usr/bin/env bash
# llm.q (IST-DASLab/llmq) trained from scratch on our Tiny Shakespeare tokens, for the numbers set
# beside train_gpt's (dev/RESULTS.md, "The trainer: Llama 3 and Qwen2.5"). The binary comes from
# scripts/build_llmq.sh (into .peers/llmq, or LLMQ_DIR); its cuDNN, NCCL and CUDA libraries are
# found in torch's nvidia-* wheels on the GPU machine.
#
# Usage (from the repo root, on the GPU machine):
#   scripts/bench_llmq.sh MODEL B T [extra llm.q flags ...]
#     MODEL: qwen2.5-0.5b | qwen2.5-1.5b | llama-3.2-1b   (config.json in scripts/llmq_models/)
#            or any name llm.q knows built in (e.g. Qwen2.5-3B) when MODEL_SOURCE=builtin
#     B    : micro-batch size (--batch-size)      T: sequence length (--seq-len)
#   e.g.  scripts/bench_llmq.sh qwen2.5-0.5b 32 1024
#         GA=16 scripts/bench_llmq.sh qwen2.5-1.5b 32 1024 --lmhead-chunks=4
# The last line: SUMMARY llmq MODEL B= T= GA= matmul=: tok/s N | peak MiB nvidia-smi N | cudaMemGetInfo N
#
# Environment knobs (defaults in brackets):
#   STEPS [30]        optimizer steps (each = GA micro-batches of B x T tokens)
#   GA [1]            --grad-accumulation (llm.q's own H100 benchmarks use 16 with B=32)
#   WARMUP [5]        steps left out of the tok/s summary (the first steps build cuDNN plans / CUDA graphs)
#   MATMUL_DTYPE [bf16]  --matmul-dtype (e4m3 = llm.q's FP8 mode)
#   OPT_DTYPE [bf16]     --opt-m-dtype/--opt-v-dtype (llm.q's benchmarks: bf16 Adam moments)
#   MODEL_DTYPE [bf16]   --model-dtype (master weights, activations, gradients)
#   GRAPHS [1]        1: --use-cuda-graphs (as in llm.q's benchmarks), 0: --no-use-cuda-graphs
#   LR [unset]        --learning-rate (llm.q default 1e-5)
#   MODEL_SOURCE [json]  json: our config.json files; builtin: llm.q's built-in config by name
#   GPU [0]           CUDA device index (sets CUDA_VISIBLE_DEVICES)
#   TIMEOUT [540]     seconds before the training process is killed 
#   KEEP [0]          1: keep /tmp/llmq_run.* (log.json, stdout, nvidia-smi samples)
#   PYTHON [python3]  the python that holds torch's nvidia-* wheels and numpy
#   LLMQ_CONVERT_ONLY=1  only write the token files and exit (no GPU needed)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=${LLMQ_DIR:-$REPO/.peers/llmq}         # bin/train, lib/ (scripts/build_llmq.sh writes them)
MODELS=$REPO/scripts/llmq_models
PY=${PYTHON:-python3}

if [ $# -lt 3 ]; then
    sed -n '2,27p' "$0"; exit 2
fi
MODEL=$1; B=$2; T=$3; shift 3
STEPS=${STEPS:-30}; GA=${GA:-1}; WARMUP=${WARMUP:-5}
MATMUL_DTYPE=${MATMUL_DTYPE:-bf16}; OPT_DTYPE=${OPT_DTYPE:-bf16}; MODEL_DTYPE=${MODEL_DTYPE:-bf16}
GRAPHS=${GRAPHS:-1}; MODEL_SOURCE=${MODEL_SOURCE:-json}; TIMEOUT=${TIMEOUT:-540}; KEEP=${KEEP:-0}

# ---- model config -------------------------------------------------------------------------
case "${MODEL,,}" in
    qwen2.5-0.5b|qwen-0.5b|qwen0.5b)   NAME=Qwen2.5-0.5B ;;
    qwen2.5-1.5b|qwen-1.5b|qwen1.5b)   NAME=Qwen2.5-1.5B ;;
    llama-3.2-1b|llama3.2-1b|llama-3-1b|llama3-1b) NAME=Llama-3.2-1B ;;
    *) NAME=$MODEL; MODEL_SOURCE=builtin ;;
esac
if [ "$MODEL_SOURCE" = builtin ]; then
    MODEL_ARG=$NAME                          # llm.q's create_config_from_name()
    [ "$NAME" = Llama-3.2-1B ] && MODEL_ARG=llama-3.2-1b
else
    MODEL_ARG=$MODELS/$NAME                  # directory holding config.json
    [ -f "$MODEL_ARG/config.json" ] || { echo "no $MODEL_ARG/config.json"; exit 2; }
fi

# ---- training data: llm.c uint16 shards -> llm.q BIN.TOK v2 int32, tiled to the size needed ----
DATA=/tmp/llmq_data; mkdir -p "$DATA"
# train: llm.q needs strictly more than STEPS*GA*B chunks of T tokens (+1 target token); add one step spare
NTRAIN=$(( ( (STEPS + 1) * GA * B + 2 ) * T + 1 ))
NEVAL=$(( ( 2 * B + 1 ) * T + 1 ))
TRAIN_BIN=$DATA/ts-train-$NTRAIN.bin; EVAL_BIN=$DATA/ts-eval-$NEVAL.bin
cat > /tmp/llmq_convert.py <<'PYEOF'
# llm.c token shard (int32 header[256]: 20240520, version 1 (uint16) or 7 (uint32), ntok) ->
# llm.q token file (1024-byte header: b"BIN.TOK\n", int32 version=2, bytes_per_token=4, ntok,
# vocab_size, has_masks=0; then ntok int32), tiling the tokens to exactly `ntok` tokens.
import sys, numpy as np
src, dst, ntok, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
hdr = np.fromfile(src, dtype=np.int32, count=256)
assert hdr[0] == 20240520, f"{src}: not an llm.c shard (magic {hdr[0]})"
dt = {1: np.uint16, 7: np.uint32}[int(hdr[1])]
tok = np.fromfile(src, dtype=dt, offset=1024, count=int(hdr[2])).astype(np.int32)
assert tok.size == hdr[2] and tok.size > 0 and int(tok.max()) < vocab
assert ntok < 2**31, "llm.q stores the token count as int32"
out = np.resize(tok, ntok)                   # repeats the stream as often as needed
header = np.zeros(256, dtype=np.int32)
header[:2] = np.frombuffer(b"BIN.TOK\n", dtype=np.int32)
header[2:7] = [2, 4, ntok, vocab, 0]
with open(dst + ".tmp", "wb") as f:
    f.write(header.tobytes()); f.write(out.tobytes())
import os; os.replace(dst + ".tmp", dst)
print(f"wrote {dst}: {ntok} tokens ({tok.size} distinct positions from {src}, x{ntok / tok.size:.1f})")
PYEOF
convert() {  # src dst ntok
    [ -s "$2" ] || "$PY" /tmp/llmq_convert.py "$1" "$2" "$3" 50257
}
convert "$REPO/data/tiny_shakespeare_train.bin" "$TRAIN_BIN" "$NTRAIN" || exit 1
convert "$REPO/data/tiny_shakespeare_val.bin" "$EVAL_BIN" "$NEVAL" || exit 1
if [ "${LLMQ_CONVERT_ONLY:-0}" = 1 ]; then ls -l "$TRAIN_BIN" "$EVAL_BIN"; exit 0; fi

# ---- shared libraries: torch's nvidia-* wheels first, then the system CUDA ------------------
LIBS=$HERE/lib
for NVDIR in $("$PY" -c "import nvidia; print(' '.join(nvidia.__path__))" 2>/dev/null); do
    for d in "$NVDIR"/cu13/lib "$NVDIR"/cudnn/lib "$NVDIR"/nccl/lib "$NVDIR"/cublas/lib "$NVDIR"/cuda_runtime/lib "$NVDIR"/cuda_nvrtc/lib; do
        [ -d "$d" ] && LIBS=$LIBS:$d
    done
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && LIBS=$LIBS:$d; done
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUDA_VISIBLE_DEVICES=${GPU:-0}
BIN=$HERE/bin/train
[ -x "$BIN" ] || chmod +x "$BIN"
if ldd "$BIN" | grep -q "not found"; then
    echo "missing shared libraries:"; ldd "$BIN" | grep "not found"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; exit 1
fi
echo "== llm.q $(cat "$HERE/COMMIT" 2>/dev/null) | libs:"
ldd "$BIN" | grep -E "cudnn|nccl|cublas|cudart|llmq|stdc" | sed 's/^/   /'

# ---- run -----------------------------------------------------------------------------------
RUN=$(mktemp -d /tmp/llmq_run.XXXX)
GFLAG=--use-cuda-graphs; [ "$GRAPHS" = 1 ] || GFLAG=--no-use-cuda-graphs
DEFAULTS=(--model="$MODEL_ARG" --from-scratch
      --train-file="$TRAIN_BIN" --eval-file="$EVAL_BIN"
      --batch-size="$B" --seq-len="$T" --grad-accumulation="$GA" --steps="$STEPS"
      --model-dtype="$MODEL_DTYPE" --matmul-dtype="$MATMUL_DTYPE"
      --opt-m-dtype="$OPT_DTYPE" --opt-v-dtype="$OPT_DTYPE" "$GFLAG" --gpus=1
      --eval-every-n-steps=1000000 --eval-num-steps=1 --ckpt-interval=1000000
      --save-training-state=false
      --out-dir="$RUN/out" --checkpoint-dir="$RUN/ckpt" --log-file="$RUN/log.json")
[ -n "${LR:-}" ] && DEFAULTS+=(--learning-rate="$LR")
# llm.q (CLI11) rejects a value option given twice: an extra flag replaces the default of the same name
canon() { local n=${1%%=*}; case $n in --batch) n=--batch-size;; --seq-length) n=--seq-len;; --lr) n=--learning-rate;;
          --no-use-cuda-graphs) n=--use-cuda-graphs;; esac; echo "$n"; }
declare -A OVR=()
for a in "$@"; do [[ $a == --* ]] && OVR[$(canon "$a")]=1; done
ARGS=()
for a in "${DEFAULTS[@]}"; do [ -n "${OVR[$(canon "$a")]:-}" ] || ARGS+=("$a"); done
ARGS+=("$@")
echo "== $BIN ${ARGS[*]}"

SMI=""
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU:-0}" > "$RUN/smi0.txt" 2>/dev/null
    # sample every ~0.2 s until llm.q's final evaluation line ([V]) shows up, i.e. leave out the model export
    ( while ! grep -q '\[V\] step' "$RUN/stdout.txt" 2>/dev/null; do
          nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU:-0}" >> "$RUN/smi.txt" 2>/dev/null
          sleep 0.2
      done ) &
    SMI=$!
fi
START=$(date +%s)
timeout -k 10 "$TIMEOUT" "$BIN" "${ARGS[@]}" 2>&1 | tee "$RUN/stdout.txt"
RC=${PIPESTATUS[0]}
[ -n "$SMI" ] && kill "$SMI" 2>/dev/null && wait "$SMI" 2>/dev/null
echo "== exit code $RC after $(( $(date +%s) - START )) s"

# ---- summary -------------------------------------------------------------------------------
"$PY" - "$RUN" "$WARMUP" "$MODEL" "$B" "$T" "$GA" "$MATMUL_DTYPE" <<'PYEOF'
import json, sys, statistics, os
run, warm, model, B, T, GA, mm = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
import re
log = []
try:
    for line in open(f"{run}/log.json"):          # one JSON object a line; tolerate a torn last line
        line = line.strip().rstrip(",")
        if not line.startswith("{"): continue
        line = re.sub(r"(:\s*)(-?)nan\b", r"\1NaN", line)
        line = re.sub(r"(:\s*)(-?)inf\b", r"\1\2Infinity", line)
        try: log.append(json.loads(line))
        except ValueError: pass
except OSError as e:
    print(f"SUMMARY llmq {model} B={B} T={T} GA={GA}: no usable log ({e})"); sys.exit(0)
steps = [e for e in log if e.get("log") == "step"]
gm = [e for e in log if e.get("log") == "gpu-model"]
total = gm[0]["memory"] if gm else None
gpu = [e for e in log if e.get("log") == "gpu"]
alloc = [e for e in log if e.get("log") == "allocator"]
MiB = 1024 * 1024
use = steps[warm:] if len(steps) > warm else steps[len(steps) // 2:]
if use:
    tps = [1000.0 * s["step_tokens"] / s["duration_ms"] for s in use if s["duration_ms"] > 0]
    mean = 1000.0 * sum(s["step_tokens"] for s in use) / sum(s["duration_ms"] for s in use)
    ms = statistics.median(s["duration_ms"] for s in use)
    print(f"llm.q steps {use[0]['step']}..{use[-1]['step']} ({len(use)} of {len(steps)}): "
          f"tok/s mean {mean:.0f}, median {statistics.median(tps):.0f}, min {min(tps):.0f}, max {max(tps):.0f}; "
          f"median step {ms:.0f} ms; last loss {steps[-1]['loss']:.4f}")
else:
    mean = float("nan"); print("llm.q: no training step finished")
if alloc:
    dev = sum(s["device"] for s in alloc[0]["stats"])
    print("llm.q allocator (device MiB): " + ", ".join(f"{s['name']} {s['device'] // MiB}" for s in alloc[0]["stats"] if s["device"]) + f"; total {dev // MiB}")
peak_cuda = None
if gpu and total:
    peak_cuda = (total - min(g["dram_free"] for g in gpu)) // MiB
    print(f"cudaMemGetInfo after steps ({len(gpu)} samples): max used {peak_cuda} MiB of {total // MiB} MiB")
peak_smi = base = None
try:
    vals = [int(x) for x in open(f"{run}/smi.txt").read().split() if x.strip().isdigit()]
    base = int(open(f"{run}/smi0.txt").read().split()[0])
    if vals: peak_smi = max(vals)
    print(f"nvidia-smi memory.used during training: max {peak_smi} MiB over {len(vals)} samples (~0.2 s apart), {base} MiB before start")
except Exception as e:
    print(f"nvidia-smi: {e}")
print(f"SUMMARY llmq {model} B={B} T={T} GA={GA} matmul={mm}: tok/s {mean:.0f} | "
      f"peak MiB nvidia-smi {peak_smi} (before {base}) | cudaMemGetInfo {peak_cuda}")
PYEOF

if [ "$KEEP" = 1 ]; then echo "kept $RUN"; else rm -rf "$RUN"; fi
exit "$RC"
