#!/usr/bin/env bash
# dev/flce_bench's flce rows alone (the four shapes), as the library runs them and under its
# measurement settings: flce (as is, -o $OUT/bench.md), noat (autotuning off), timing (the
# per-phase times of every call); logs in $OUT (default gpu_logs/), each run's summary last.
#   scripts/dev/flce_rows.sh [flce] [noat] [timing]     (default: all three)
source "$(dirname "$0")/../gpu_common.sh"
for r in ${*:-flce noat timing}; do
    case $r in
    flce) step bench timeout 300 build/flce_bench -v flce -o "$OUT/bench.md" ;;
    noat) step bench_noat timeout 240 build/flce_bench -v flce --autotune=0 -o "$OUT/bench_noat.md" ;;
    timing) step bench_timing timeout 240 build/flce_bench -v flce --timing -o "$OUT/bench_timing.md" ;;
    *) step_unknown "$r" ;;
    esac
done
ran bench && { echo "== flce =="; tail -25 "$OUT/bench.md"; }
ran bench_noat && { echo "== flce, autotune off =="; grep -A8 "Summary: median" "$OUT/bench_noat.md" | tail -7; }
ran bench_timing && { echo "== bench_timing: per-phase ms =="; grep -E "^flce (config|timing)" "$OUT/bench_timing.log"; }
finish flce-rows
