#!/usr/bin/env bash
# Nsight Compute's source counters (stall reasons, shared-memory wavefronts by opcode, the most
# stalled SASS: scripts/ncu_source.py) of the kernels matching NCU_KERNELS (flce_sm90_(logits|dh|dw))
# in NCU_CMD (flce_bench's chunk at NCU_SHAPE, 65536x768x50304, NCU_ARGS: more flce_bench options, e.g. --pingpong=0), NCU_SKIP
# (3) launches skipped, NCU_COUNT (3) profiled; CSV in $OUT/ncu_src.csv (default gpu_logs/).
#   NCU_KERNELS=att90 NCU_SKIP=0 NCU_CMD=build/attention_bench scripts/dev/ncu_src.sh
source "$(dirname "$0")/../gpu_common.sh"
# Source counters (per SASS instruction) of the second chunk's kernels matching $NCU_KERNELS
ncu_src() {
    local shape=${NCU_SHAPE:-65536x768x50304} kern=${NCU_KERNELS:-"flce_sm90_(logits|dh|dw)"} rep=/tmp/ncu_src
    command -v ncu > /dev/null || { echo "FAIL: no ncu on this machine"; return 1; }
    rm -f "$rep.ncu-rep"
    local cmd=${NCU_CMD:-"build/flce_bench -v flce -s $shape -r 1 -w 1 ${NCU_ARGS:-}"}
    timeout 400 ncu --clock-control none --kernel-name-base demangled -k "regex:$kern" --launch-skip "${NCU_SKIP:-3}" \
        --launch-count "${NCU_COUNT:-3}" --section SourceCounters -o "$rep" $cmd > "$OUT/ncu_src.err" 2>&1 ||
        { echo "FAIL: ncu (see $OUT/ncu_src.err)"; tail -5 "$OUT/ncu_src.err"; return 1; }
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_src.csv" 2>> "$OUT/ncu_src.err" ||
        { echo "FAIL: ncu --import (see $OUT/ncu_src.err)"; return 1; }
    python3 scripts/ncu_source.py "$OUT/ncu_src.csv"
}
step ncu_src ncu_src
echo "== ncu source counters =="; grep -E "^==|stalls:|OK|FAIL" "$OUT/ncu_src.log"
finish ncu-src
