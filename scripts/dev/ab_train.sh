#!/usr/bin/env bash
# Trainer builds alternated in one call, as a step's time moves 2-3% between calls on one GPU
# (clocks under its power limit): each of $TRAIN_AB (train_gpt binaries, default ./train_gpt, or
# path+VAR=value) for $AB_ROUNDS (default 2) rounds at -b $TRAIN_AB_B (64) -x 40 -v 0 -s 0 and
# $TRAIN_AB_ARGS (more flags for every run, e.g. "-e qwen2.5-0.5b -t 1024"); one table row per run
# (median and mean step of 11-40, MiB in use at the end, step 40's loss). Logs in $OUT (default
# gpu_logs/).   TRAIN_AB="./train_gpt build_b/train_gpt" scripts/dev/ab_train.sh
source "$(dirname "$0")/../gpu_common.sh"
train_ab() {
    local set bin r log bad=0
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do for set in ${TRAIN_AB:-./train_gpt}; do
        local envs=()
        bin=${set%%+*}
        case $set in *+*) envs=("${set#*+}") ;; esac
        log="$OUT/train_ab_${set//[^A-Za-z0-9_]/_}_$r.log"
        env "${envs[@]}" timeout 200 "$bin" -b "${TRAIN_AB_B:-64}" -x 40 -v 0 -s 0 ${TRAIN_AB_ARGS:-} > "$log" 2>&1 ||
            { echo "FAIL: $set (round $r)"; bad=1; continue; }
        echo "| $set | $r | $(grep -E '^step +[0-9]+/' "$log" | sed -n '11,40p' | awk -F'|' '{gsub(/ ms/, "", $5); print $5 + 0}' |
            sort -g | awk '{v[NR] = $1; s += $1} END {printf "%.2f | %.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, s / NR}') ms | $(mg_mib "$log") MiB | $(grep -E '^step +40/' "$log" | grep -oE 'loss [0-9.]+') |"
    done; done
    [ $bad -eq 0 ] && echo "OK: train-ab of ${TRAIN_AB:-./train_gpt}, ${AB_ROUNDS:-2} rounds" || return 1
}
step train_ab train_ab; grep -E "^\|" "$OUT/train_ab.log"
finish ab-train
