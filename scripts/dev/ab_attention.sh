#!/usr/bin/env bash
# dev/attention_bench builds or options alternated in one call: each of $ATT_AB (a binary, default
# build/attention_bench, or binary+flags, the flags joined by commas) for $AB_ROUNDS (default 2)
# rounds; one table row per run (the Hopper forward | backward ms, the backward's checks against
# mma.sync). Logs in $OUT (default gpu_logs/).
#   ATT_AB="build/attention_bench build/attention_bench+-g,0 build_b/attention_bench" scripts/dev/ab_attention.sh
source "$(dirname "$0")/../gpu_common.sh"
att_ab() {
    local set bin r log bad=0
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do for set in ${ATT_AB:-build/attention_bench}; do
        local args=()
        bin=${set%%+*}
        case $set in *+*) IFS=, read -ra args <<< "${set#*+}" ;; esac
        log="$OUT/att_ab_${set//[^A-Za-z0-9_]/_}_$r.log"
        timeout 200 "$bin" -r 30 "${args[@]}" > "$log" 2>&1 || { echo "FAIL: $set (round $r)"; bad=1; continue; }
        echo "| $set | $r | $(grep -E '^\| (forward|backward), Hopper' "$log" | cut -d'|' -f3 | tr -d ' ' | paste -sd'|') ms | $(grep -E '^Hopper backward vs' "$log" | cut -d: -f2) |"
    done; done
    [ $bad -eq 0 ] && echo "OK: att-ab of ${ATT_AB:-build/attention_bench}, ${AB_ROUNDS:-2} rounds" || return 1
}
step att_ab att_ab; grep -E "^\|" "$OUT/att_ab.log"
finish ab-attention
