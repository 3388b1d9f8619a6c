# Sourced by the scripts that run on a GPU machine (scripts/*.sh, scripts/dev/*.sh), so that each
# of them holds its own job alone: the repository root as the working directory, logs in $OUT
# (default gpu_logs/), cJSON from .deps/ where the machine has none, NCCL's NVLink multicast off.
# step runs one command into its own log; finish prints the steps' results and a last line
# "NAME: N passed, M failed". Also the helpers the trainer's runs share (mpirun, median, memory).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# cJSON (the Hugging Face readers) on a machine that cannot install libcjson-dev: the .debs that
# scripts/gpu_deps.sh unpacked into .deps/cjson here, carried along
if [ ! -f /usr/include/cjson/cJSON.h ] && [ -d .deps/cjson/usr/include/cjson ]; then
    export CJSON_DIR="$PWD/.deps/cjson"
    export LD_LIBRARY_PATH="$CJSON_DIR/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
OUT=${OUT:-gpu_logs}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
# (FLCE_COMMIT, as scripts/bench_peers.py reads it: where the copy's git history is not its
# tree's, as on a GPU machine's copy of a checkout with commits not landed)
if [ -n "${FLCE_COMMIT:-}" ]; then echo "$FLCE_COMMIT" > "$OUT/commit.txt"
else git log -1 --format='%H %cd' > "$OUT/commit.txt" 2>/dev/null || echo "no git" > "$OUT/commit.txt"; fi
# the processes of the multi-GPU runs under mpirun (the -pn pairs of test_multigpu.sh are 2)
MG_NP=${MG_NP:-2}

STEP_RESULTS=()
STEP_FAILED=0
# step NAME COMMAND...: COMMAND's output into $OUT/NAME.log; its result (exit code, seconds, the
# log's last verdict line) printed and kept for finish; returns COMMAND's exit code
step() {
    local name=$1 t0 rc line
    shift
    t0=$(date +%s)
    "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    line="$name: rc=$rc $(( $(date +%s) - t0 ))s | $(grep -E 'passed, [0-9]+ failed|OK|MISMATCH|FAIL' "$OUT/$name.log" | tail -1)"
    STEP_RESULTS+=("$line")
    [ $rc -eq 0 ] || STEP_FAILED=$((STEP_FAILED + 1))
    echo "$line"
    return $rc
}
# a name that no case of the calling script knows: a failed step
step_unknown() {
    STEP_RESULTS+=("$1: unknown (the top of $0 lists the names)")
    STEP_FAILED=$((STEP_FAILED + 1))
    echo "${STEP_RESULTS[-1]}"
}
# whether this call ran step NAME (the summaries skip logs an earlier call left in $OUT)
ran() { [ ${#STEP_RESULTS[@]} -gt 0 ] && printf '%s\n' "${STEP_RESULTS[@]}" | grep -q "^$1: "; }
# finish NAME: the steps' result lines again, then "NAME: N passed, M failed (logs in $OUT/)";
# non-zero when a step failed or none ran
finish() {
    echo "== $1: the gpu =="
    cat "$OUT/gpu.txt"
    echo "== $1: steps =="
    [ ${#STEP_RESULTS[@]} -gt 0 ] && printf '%s\n' "${STEP_RESULTS[@]}"
    echo "$1: $(( ${#STEP_RESULTS[@]} - STEP_FAILED )) passed, $STEP_FAILED failed (logs in $OUT/)"
    [ "$STEP_FAILED" -eq 0 ] && [ ${#STEP_RESULTS[@]} -gt 0 ]
}

# mpirun -np $MG_NP with the arguments given; its output into the file $1
mg_mpirun() {
    local log=$1; shift
    timeout 300 mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE -np $MG_NP ./train_gpt "$@" > "$log" 2>&1
}
# Median ms of a log's steps 11 and on (the trainer's step lines)
mg_median_ms() {
    grep -E "^step +[0-9]+/" "$1" | awk -F'|' 'NR > 10 {gsub(/ ms/, "", $5); print $5 + 0}' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
# MiB in use on rank 0 at the end of a log's run (the trainer's last report)
mg_mib() { grep -oE "at the end \(rank 0\): [0-9]+" "$1" | grep -oE "[0-9]+$"; }
