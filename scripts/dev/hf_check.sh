#!/usr/bin/env bash
# Hugging Face checkpoints (llmc/hf_model.h) against transformers: scripts/check_hf_roundtrip.py
# (save_pretrained -> build/hf_roundtrip -> transformers: state dicts and logits bitwise, llama /
# qwen2 / gpt2); then d6, qwen-test and llama-test trained 10 steps with -hf 1, transformers' val
# loss of hf_00000010 (scripts/check_hf_export.py, fp32) within 2e-3 of the trainer's, and the
# trainer started from -e hf_00000010 at the same val loss, bitwise. Logs in $OUT.   scripts/dev/hf_check.sh
source "$(dirname "$0")/../gpu_common.sh"
hf_check() {
    make -s build/hf_roundtrip || return 1
    python3 scripts/check_hf_roundtrip.py || { echo "FAIL: check_hf_roundtrip.py"; return 1; }
    local run m flags dir log v v2
    for run in "d6:-x 10" "qwen-test:-x 10 -n 10" "llama-test:-x 10 -n 5"; do
        m=${run%%:*}; flags=${run#*:}
        dir=/tmp/hf_train_$m; rm -rf "$dir"; log="$OUT/hf_train_$m.log"
        timeout 300 ./train_gpt -e $m -b 4 -t 64 -v 10 -m 4 -s 0 $flags -o "$dir" -hf 1 > "$log" 2>&1 ||
            { echo "FAIL: $m with -hf 1 ($log)"; tail -5 "$log"; return 1; }
        ls "$dir"
        v=$(grep -oE "^val loss [0-9.]+" "$log" | tail -1 | awk '{print $3}')
        python3 scripts/check_hf_export.py "$dir/hf_00000010" --val data/tiny_shakespeare_val.bin -b 4 -t 64 -m 4 \
            --expect "$v" || { echo "FAIL: $m: transformers' val loss of hf_00000010 is not the trainer's $v"; return 1; }
        timeout 300 ./train_gpt -e "$dir/hf_00000010" -b 4 -t 64 -x 1 -v 1 -m 4 -s 0 > "$log.reload" 2>&1 ||
            { echo "FAIL: $m: -e $dir/hf_00000010"; tail -5 "$log.reload"; return 1; }
        v2=$(grep -oE "^val loss [0-9.]+" "$log.reload" | head -1 | awk '{print $3}')
        if [ -n "$v" ] && [ "$v" = "$v2" ]; then echo "OK: $m: -e hf_00000010 starts at its step's val loss $v, bitwise"
        else echo "FAIL: $m: -e hf_00000010 starts at val loss '$v2', the run printed '$v'"; return 1; fi
    done
    echo "OK: Hugging Face checkpoints"
}
step hf hf_check
echo "== Hugging Face checkpoints =="; grep -E "^FAIL|passed, [0-9]+ failed|^val loss|^ok|^OK" "$OUT/hf.log"
finish hf-check
