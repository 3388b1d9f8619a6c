#!/usr/bin/env bash
# test/fuzz/run.sh ENGINE SECONDS BUILD_DIR TARGET... - make fuzz's runner (run from the repository
# root). ENGINE: libfuzzer or builtin (test/fuzz/driver.c). Each target first replays every input of
# test/fuzz/regressions/<target>/, then fuzzes SECONDS seconds from test/fuzz/corpus/<target>/ (new
# inputs go to BUILD_DIR/corpus/<target>, findings to BUILD_DIR/findings/<target>/). Prints per
# target its executions and findings, then "N passed, M failed"; exits 1 on any finding.
#   test/fuzz/run.sh merge BUILD_DIR TARGET... (make fuzz-merge; libFuzzer only): the inputs of the
# last run (BUILD_DIR/corpus/<target>) that add coverage to test/fuzz/corpus/<target>/ are copied
# there (libFuzzer's -merge=1), so that every later run starts from them once committed.
set -u
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=0:max_allocation_size_mb=1024:malloc_limit_mb=1024"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
if [ "$1" = merge ]; then
    build=$2
    shift 2
    bad=0
    for t in "$@"; do
        corpus=test/fuzz/corpus/$t work=$build/corpus/$t log=$build/merge_$t.log
        [ -d "$work" ] || { echo "SKIP  fuzz_$t: no $work (run make fuzz first)"; continue; }
        before=$(find "$corpus" -type f | wc -l)
        if "$build/fuzz_$t" -merge=1 -timeout=2 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
            "$corpus" "$work" >"$log" 2>&1; then
            printf 'MERGE fuzz_%-22s %4d new inputs, %s files, %s bytes in %s\n' "$t" \
                $(($(find "$corpus" -type f | wc -l) - before)) "$(find "$corpus" -type f | wc -l)" \
                "$(find "$corpus" -type f -exec cat {} + | wc -c)" "$corpus"
        else
            bad=1
            echo "FAIL  fuzz_$t: the merge failed (log: $log)"
        fi
    done
    exit $bad
fi
engine=$1 seconds=$2 build=$3
shift 3
passed=0 failed=0
for t in "$@"; do
    bin=$build/fuzz_$t corpus=test/fuzz/corpus/$t reg=test/fuzz/regressions/$t
    work=$build/corpus/$t findings=$build/findings/$t log=$build/fuzz_$t.log
    rm -rf "$work" "$findings"
    mkdir -p "$work" "$findings"
    : >"$log"
    rc=0
    regs=()
    [ -d "$reg" ] && while IFS= read -r f; do regs+=("$f"); done < <(find "$reg" -type f | sort)
    if [ "$engine" = libfuzzer ]; then
        if [ ${#regs[@]} -gt 0 ]; then
            "$bin" -timeout=2 -rss_limit_mb=2048 -malloc_limit_mb=1024 "${regs[@]}" >>"$log" 2>&1 || rc=1
        fi
        if [ $rc -eq 0 ]; then
            "$bin" -max_total_time="$seconds" -timeout=2 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
                -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$corpus" >>"$log" 2>&1 || rc=1
        fi
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
    else
        "$bin" -seconds="$seconds" -timeout=2 -artifact_prefix="$findings/" -regressions="$reg" "$corpus" \
            >>"$log" 2>&1 || rc=1
        execs=$(grep -o 'executions: [0-9]*' "$log" | tail -1 | awk '{print $2 + 0}')
    fi
    nfind=$(find "$findings" -type f | wc -l)
    [ $rc -ne 0 ] && [ "$nfind" -eq 0 ] && nfind=1
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS  fuzz_%-22s %10s executions, 0 findings\n' "$t" "${execs:-0}"
    else
        failed=$((failed + 1))
        printf 'FAIL  fuzz_%-22s %10s executions, %s finding(s) in %s (log: %s)\n' "$t" "${execs:-0}" "$nfind" \
            "$findings" "$log"
        grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|FUZZ FINDING|timeout' "$log" | sed 's/^/      /'
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
