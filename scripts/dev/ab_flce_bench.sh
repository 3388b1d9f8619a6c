#!/usr/bin/env bash
# Library settings or builds alternated in one call: dev/flce_bench's flce rows (-r 9) under each
# of $AB_ARGS (flce_bench options joined by commas, "-" for none, another flce_bench's path, or
# path+options), $AB_ROUNDS
# (default 2) rounds, so that the GPU's warm-up and clock drift fall on each; a row per run (the
# summary's flce row, x its floor). Logs in $OUT (default gpu_logs/).
#   AB_ARGS="--pingpong=0 --pingpong=1" scripts/dev/ab_flce_bench.sh    (that is the default)
#   AB_ARGS="--lt-backward=1,--dw-scaled=0 - build_main/flce_bench" scripts/dev/ab_flce_bench.sh
source "$(dirname "$0")/../gpu_common.sh"
bench_ab() {
    local settings=${AB_ARGS:-"--pingpong=0 --pingpong=1"} rounds=${AB_ROUNDS:-2} r set log bad=0
    for r in $(seq 1 "$rounds"); do for set in $settings; do
        log="$OUT/ab_${set//[^A-Za-z0-9_]/_}_$r.log"
        # a setting: "-" (as is), options joined by commas, a flce_bench binary (a path), or
        # a path+options
        local bin=build/flce_bench opts=""
        case $set in
        -) ;;
        */*+*) bin=${set%%+*}; opts=${set#*+} ;;
        */*) bin=$set ;;
        *) opts=$set ;;
        esac
        timeout 200 "$bin" -v flce -r 9 ${opts//,/ } > "$log" 2>&1 || bad=1
        echo "| $set | $r | $(grep -A9 '^## Summary' "$log" | grep -E '^\| flce \|' | cut -d'|' -f3- )"
    done; done
    [ $bad -eq 0 ] && echo "OK: A/B of $settings, $rounds rounds" || { echo "FAIL: a run of the A/B"; return 1; }
}
step bench_ab bench_ab; grep -E "^\|" "$OUT/bench_ab.log"
finish ab-flce-bench
