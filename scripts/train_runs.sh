#!/usr/bin/env bash
# The trainer on one GPU at fixed configurations (make bench-train runs the default list), each
# run's log in $OUT (default gpu_logs/) and its memory, last steps and val loss shown after them.
#   scripts/train_runs.sh [RUN...]   (default: train train-b64 train-profile train-bmax train-vocab
#   train-llama train-flags; also train-lt and train-b64-lt on the cuBLASLt path, train-fa, train-f)
source "$(dirname "$0")/gpu_common.sh"
runs="${*:-train train-b64 train-profile train-bmax train-vocab train-llama train-flags}"
# The trainer at B = 64 with each flce budget of $TRAIN_F (MiB, default "1024 4096"): median
# step of 11-30, tok/s, MiB in use at the end.
train_f() {
    local f log ms bad=0
    for f in ${TRAIN_F:-1024 4096}; do
        log="$OUT/train_f$f.log"
        timeout 200 ./train_gpt -b 64 -x 30 -v 0 -s 0 -f "$f" > "$log" 2>&1 || { echo "FAIL: -f $f"; bad=1; continue; }
        ms=$(mg_median_ms "$log")
        echo "| -f $f | $ms ms | $(awk -v ms="$ms" 'BEGIN {printf "%.0f", 65536 / (ms / 1000)}') tok/s | $(mg_mib "$log") MiB |"
    done
    [ $bad -eq 0 ] && echo "OK: trainer at -f ${TRAIN_F:-1024 4096}" || return 1
}
for r in $runs; do
    case $r in
    train-profile) step train_profile timeout 300 ./train_gpt -b 64 -x 25 -v 0 -s 0 -sp 1 ;;
    train-lt) step train_lt timeout 400 ./train_gpt -fh 0 ;;
    train) step train timeout 400 ./train_gpt ;;
    train-b64) step train_b64 timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 ;;
    train-b64-lt) step train_b64_lt timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fh 0 ;;
    train-fa) step train_b64_fa timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fa 1 ;;
    train-bmax) step train_bmax timeout 300 ./train_gpt -b 256 -x 6 -v 0 -s 0 ;;
    train-vocab) step train_vocab timeout 300 ./train_gpt -V 176256 -b 32 -x 8 -v 0 -s 0 ;;
    train-llama) for m in qwen2.5-0.5b:32:1024 qwen2.5-1.5b:16:1024 llama3.2-1b:8:2048 llama3.2-3b:4:2048; do
                     IFS=: read -r name b t <<< "$m"
                     step "train_$name" timeout 300 ./train_gpt -e "$name" -b "$b" -t "$t" -x 12 -v 0 -s 0
                 done ;;
    train-flags) for fl in 0 1; do for f in 1024 4096; do
                     step "train_b64_fl${fl}_f${f}" timeout 200 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fl $fl -f $f; done; done ;;
    train-f) step train_f train_f; grep -E "^\|" "$OUT/train_f.log" ;;
    *) step_unknown "$r" ;;
    esac
done
for f in train train_lt train_b64 train_b64_lt train_b64_fa train_bmax train_vocab train_qwen2.5-0.5b train_qwen2.5-1.5b \
         train_llama3.2-1b train_llama3.2-3b train_b64_fl0_f1024 train_b64_fl0_f4096 train_b64_fl1_f1024 train_b64_fl1_f4096; do
    ran "$f" && { echo "== $f =="; grep -E "^memory|^step +[0-9]+/|val loss|Error|rror" "$OUT/$f.log" | tail -6; }
done
ran train_profile && { echo "== a B=64 step, -sp 1 =="; sed -n '/^step profile/,$p' "$OUT/train_profile.log"; }
finish bench-train
