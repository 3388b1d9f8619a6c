#!/usr/bin/env bash
# train_gpt against llm.q on one GPU, in one call (README's Llama / Qwen table): for each of
# $VS_MODELS (default "qwen2.5-0.5b:32:1024 qwen2.5-1.5b:32:1024 llama3.2-1b:8:2048", our -e
# name:B:T), train_gpt -x 40 -bm 1 -r 0 (bf16 moments, no recompute, as llm.q's benchmarks) for
# $VS_ROUNDS rounds (default 1), also the binary $VS_BASE where set (another build, alternated
# with ./train_gpt), then llm.q through scripts/bench_llmq.sh (its binary from
# scripts/build_llmq.sh in .peers/llmq, carried). One row per run: median step of 11-40 (llm.q:
# its median step after warm-up), the largest nvidia-smi memory.used sample (every 200 ms), and
# train_gpt's step-40 loss and MFU. Logs in $OUT (default gpu_logs/).
#   VS_BASE=build_main/train_gpt VS_ROUNDS=2 scripts/dev/vs_llmq.sh
source "$(dirname "$0")/../gpu_common.sh"
# ours NAME BINARY ARGS...: one train_gpt run with nvidia-smi sampling beside it
ours() {
    local name=$1 bin=$2 sp rc peak
    shift 2
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/$name.smi" &
    sp=$!
    timeout 300 "$bin" -x 40 -v 0 -s 0 -bm 1 -r 0 "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    kill "$sp"; wait "$sp" 2> /dev/null
    peak=$(sort -g "$OUT/$name.smi" | tail -1)
    echo "| $bin $* | $(mg_median_ms "$OUT/$name.log") ms | ${peak:-?} MiB | $(grep -E '^step +40/' "$OUT/$name.log" |
        grep -oE 'loss [0-9.]+|[0-9.]+% bf16 MFU' | tr '\n' ' ')| rc $rc |"
    return $rc
}
vs_llmq() {
    local m name b t lq r bad=0
    for m in ${VS_MODELS:-qwen2.5-0.5b:32:1024 qwen2.5-1.5b:32:1024 llama3.2-1b:8:2048}; do
        IFS=: read -r name b t <<< "$m"
        for r in $(seq 1 "${VS_ROUNDS:-1}"); do
            if [ -n "${VS_BASE:-}" ]; then ours "vs_${name}_base_$r" "$VS_BASE" -e "$name" -b "$b" -t "$t" || bad=1; fi
            ours "vs_${name}_$r" ./train_gpt -e "$name" -b "$b" -t "$t" || bad=1
        done
        # llm.q's config names (scripts/llmq_models/) spell Llama's with a dash
        lq=${name/llama3/llama-3}
        STEPS=30 TIMEOUT=240 bash scripts/bench_llmq.sh "$lq" "$b" "$t" > "$OUT/vs_${name}_llmq.log" 2>&1 || bad=1
        echo "| llm.q $lq B=$b T=$t | $(grep -oE 'median step [0-9.]+ ms' "$OUT/vs_${name}_llmq.log" | grep -oE '[0-9.]+') ms |" \
             "$(grep -oE 'nvidia-smi [0-9]+' "$OUT/vs_${name}_llmq.log" | tail -1 | grep -oE '[0-9]+') MiB |" \
             "$(grep -oE 'tok/s [0-9]+' "$OUT/vs_${name}_llmq.log" | head -1) | |"
    done
    [ $bad -eq 0 ] && echo "OK: train_gpt and llm.q at ${VS_MODELS:-the default models}" ||
        { echo "FAIL: a run (llm.q does not start at Llama-3.2-1B: its log says why)"; return 1; }
}
step vs_llmq vs_llmq
echo "| run | median step | peak memory | step 40 | |"
echo "|---|---|---|---|---|"
grep -E "^\|" "$OUT/vs_llmq.log"
finish vs-llmq
