#!/usr/bin/env bash
# The trainer's scaling table on $MG_NP GPUs (default 2) of one host (mg_scale below says how);
# logs in $OUT (default gpu_logs/).   MG_NP=8 SCALE_MODELS="d12 d24" scripts/dev/train_scale.sh
source "$(dirname "$0")/../gpu_common.sh"
# The scaling table: $SCALE_MODELS (default d12) at B = 64, T = 1024 per GPU, 30 steps: one GPU,
# then $MG_NP under mpirun with -z 0|1 x -ov 0|1. tok/s from the median step time of steps 11-30
# (B T processes tokens a step), efficiency = tok/s / (MG_NP x one GPU's), MiB in use on rank 0
# at the end. The data: Tiny Shakespeare's train shard repeated until a step fits (repeat_shard).
mg_scale() {
    local data=/tmp/scale_train.bin models=${SCALE_MODELS:-d12} bad=0 m one ms tok
    local args="-b 64 -x 30 -v 0 -s 0 -i $data"
    python3 scripts/repeat_shard.py data/tiny_shakespeare_train.bin $data $(( MG_NP * 65536 / 305260 + 2 )) || return 1
    echo "| model | GPUs | ZeRO | overlap | ms/step | tok/s | efficiency | MiB in use (rank 0) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for m in $models; do
        timeout 300 ./train_gpt $args -e $m > "$OUT/scale_${m}_1gpu.log" 2>&1 || { echo "FAIL: $m on one GPU"; bad=1; continue; }
        ms=$(mg_median_ms "$OUT/scale_${m}_1gpu.log")
        one=$(awk -v ms="$ms" 'BEGIN {printf "%.0f", 65536 / (ms / 1000)}')
        echo "| $m | 1 | - | - | $ms | $one | 1.00 | $(mg_mib "$OUT/scale_${m}_1gpu.log") |"
        for zs in 0 1; do for ov in 0 1; do
            local log="$OUT/scale_${m}_${MG_NP}gpu_z${zs}_ov${ov}.log"
            mg_mpirun "$log" $args -e $m -z $zs -ov $ov || { echo "FAIL: $m -z $zs -ov $ov"; tail -3 "$log"; bad=1; continue; }
            ms=$(mg_median_ms "$log")
            tok=$(awk -v ms="$ms" -v n="$MG_NP" 'BEGIN {printf "%.0f", n * 65536 / (ms / 1000)}')
            echo "| $m | $MG_NP | $zs | $ov | $ms | $tok | $(awk -v t="$tok" -v o="$one" -v n="$MG_NP" 'BEGIN {printf "%.3f", t / (n * o)}') |" \
                 "$(mg_mib "$log") |"
        done; done
    done
    [ $bad -eq 0 ] && echo "OK: scaling table for $models on $MG_NP GPUs" || return 1
}
step train_scale mg_scale; grep -E "^\|" "$OUT/train_scale.log"
finish train-scale
