#!/usr/bin/env bash
# One call on a GPU machine: build everything for sm_90, run the CPU and GPU test suites,
# re-run the fixture exporter and compare with the committed fixtures, check the shipped
# tokens against tiktoken, and run the dev/ benchmark. Logs go to $OUT (default gpu_logs/);
# a short table is printed last.
#   scripts/gpu_check.sh [build] [test] [fixtures] [tokens] [gemm-sm90] [attention] [matmul-bench] [pytest] [train-profile] [bench-check] [bench] [bench-flce] [bench-timing] [bench-noat] [gemm-algos] [bench-peers] [ncu-flce] [ncu-src]
#                        [train] [train-lt] [train-b64] [train-b64-lt] [train-fa] [train-bmax] [train-vocab] [train-llama] [train-flags] [train-mpi]
#                        [train-fs] [train-tcp] [train-nompi] [train-fault] [train-fault-tcp] [train-fault-fs]
#                        [train-zero] [train-overlap] [train-tp] [vp-bench] [train-scale] [bench-ab] [train-f]
#                        [train-ab] [att-ab] [hf]
#   hf (not in the default list): Hugging Face checkpoints (llmc/hf_model.h) against transformers:
#   scripts/check_hf_roundtrip.py (transformers' save_pretrained -> build/hf_roundtrip -> transformers:
#   state dicts and logits bitwise, llama / qwen2 / gpt2); then d6, qwen-test and llama-test trained 10
#   steps with -hf 1 (d6: the end-of-run directory alone; qwen-test: with the checkpoint of step 10;
#   llama-test: checkpoints 5 and 10): transformers' val loss of hf_00000010
#   (scripts/check_hf_export.py, fp32) within 2e-3 of the trainer's, and the trainer started from
#   -e hf_00000010 prints the same val loss at step 0, bitwise.
#   vp-bench (several GPUs, not in the default list): dev/flce_vp_bench, vocab-parallel flce on
#   every GPU of the host against one GPU (ms per call, errors).
#   bench-ab: dev/flce_bench's flce rows under each setting of AB_ARGS (default "--pingpong=0
#   --pingpong=1"; a setting is flce_bench's options joined by commas (--lt-backward=1,--dw-scaled=0),
#   a flce_bench binary's path (another build's), or path+options), AB_ROUNDS (2) alternated rounds; train-ab: train_gpt builds (TRAIN_AB, paths)
#   alternated, AB_ROUNDS rounds of -b TRAIN_AB_B (64) -x 40: median and mean of steps 11-40,
#   memory, step 40's loss; att-ab: dev/attention_bench builds (ATT_AB) alternated, their Hopper
#   rows (forward | backward ms) and backward checks; train-f: the trainer at B = 64 with each
#   flce budget of TRAIN_F (default "1024 4096" MiB): median step, tok/s, memory.
#   train-scale (several GPUs): the scaling table on MG_NP GPUs (SCALE_MODELS="d12 d24" for both):
#   one GPU, then -z 0|1 x -ov 0|1 at B = 64, tok/s, efficiency, memory (mg_scale says how).
#   (default: all but the multi-GPU steps, which need 2 GPUs (MG_NP=N runs the mpirun ones on N: train-mpi,
#   train-fault, train-zero, train-overlap, train-tp; the pairs below are 2 ranks and compare with a
#   2-rank train-mpi): train-mpi (mpirun -np 2); train-fs, train-tcp:
#   ranks 0 and 1 started with & (-pn 2 -pr 0|1, -pi fs -pf DIR | -pi tcp -ps 127.0.0.1), both must exit 0
#   and print train-mpi's losses (run train-mpi first, or they run their own mpirun reference);
#   train-nompi: the same tcp pair with a build without MPI (make NO_USE_MPI=1, into build/train_gpt_nompi);
#   train-fault: mpirun -np 2 with TRAIN_FAULT=1:3 (rank 1 exits at step 3): mpirun must exit non-zero
#   within 30 s (timeout 60); train-fault-tcp, train-fault-fs: the pair with a fault on rank 1 (tcp: a
#   CUDA error, then a SIGKILL; fs: an exit), both ranks non-zero within 30 s, rank 0 with rank 1's message;
#   train-zero: mpirun -np 2 with -z 0 and -z 1: the same losses bitwise, both memory reports; a -z 1
#   checkpoint of step 10 resumed gives steps 11-20 bitwise, and -z 0 refuses to resume it;
#   train-overlap: -z 0|1 x -ov 0|1 at -b 16 (TRAIN_PROFILE=1): the same losses bitwise, tok/s and the
#   time left to the gradient reduction after the backward for each;
#   train-tp: mpirun -np 2 with -tp 0 (data-parallel head) and -tp 1 (vocab-parallel head), otherwise the
#   same run: every step's and val loss within 1e-3, both exit 0; tok/s and memory of each reported)
#   ncu-flce (not in the default list): Nsight Compute on flce's three Hopper GEMMs of one chunk
#   at NCU_SHAPE (default 65536x768x50304, the trainer's head): time, clock, and the sections
#   that say where their cycles go (pipe utilization, warp stalls, shared memory), CSV in
#   $OUT/ncu_flce.csv, a short table of the kernels' durations and clocks;
#   ncu-src (not in the default list): the same chunk's kernels matching NCU_KERNELS (default
#   flce_sm90_(logits|dh|dw)) with Nsight Compute's source counters: stall reasons, shared-memory
#   wavefronts by opcode and the most-stalled SASS instructions (scripts/ncu_source.py), CSV in
#   $OUT/ncu_src.csv; NCU_ARGS more options of the benchmark (flce_bench's switches, --pingpong=0:
#   the cooperative logits kernel; ncu-flce too); NCU_CMD another program (NCU_KERNELS=att90 NCU_SKIP=0
#   NCU_CMD=build/attention_bench: the trainer's attention kernels), NCU_SKIP / NCU_COUNT the
#   matching launches skipped (3) and profiled (3);
#   bench-timing: the library's per-phase times (flce_bench --timing); bench-noat: the flce rows
#   with autotuning off (flce_bench --autotune=0); gemm-sm90: our Hopper GEMM against cuBLASLt;
#   attention: dev/attention_bench (the trainer's attention, Hopper kernels against mma.sync);
#   matmul-bench: dev/matmul_bench (the trainer's linear layers, cuBLASLt against our Hopper GEMM);
#   pytest: the Python binding's GPU tests; train-profile: a B=64 run with TRAIN_PROFILE=1;
#   train: ./train_gpt as a user runs it; train-lt: the same on the cuBLASLt path (-fh 0);
#   train-b64: GPT-2 124M at B=64 (llm.c's comparison point), train-b64-lt the same on the
#   cuBLASLt path; train-bmax: B=256; train-llama: the published Qwen2.5 and Llama 3.2 shapes from random
#   init, 12 steps each; bench-flce: the flce rows of the benchmark only.
#   bench-peers (not in the default list): scripts/bench_peers.py, flce through its binding against
#   the Python peers in one process (the carried .whl/ wheels installed into /tmp/peers/site-packages, the split one
#   reassembled first: the script's header says how), $OUT/peers.md and $OUT/peers.png;
#   BENCH_PEERS_SECONDS (default 420) bounds the run.
set -uo pipefail
cd "$(dirname "$0")/.."
# cJSON (the Hugging Face readers) on a machine that cannot install libcjson-dev: the .debs that
# scripts/gpu_deps.sh unpacked into .deps/cjson here, carried along
if [ ! -f /usr/include/cjson/cJSON.h ] && [ -d .deps/cjson/usr/include/cjson ]; then
    export CJSON_DIR="$PWD/.deps/cjson"
    export LD_LIBRARY_PATH="$CJSON_DIR/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
OUT=${OUT:-gpu_logs}
mkdir -p "$OUT"
steps="${*:-build test fixtures tokens gemm-sm90 attention matmul-bench pytest bench-check bench bench-timing train train-b64 train-profile train-bmax train-vocab train-llama train-flags}"
declare -A result
# the multi-GPU runs: one configuration, so that their losses compare ($MG_ARGS to change it), on
# $MG_NP processes under mpirun (default 2; the -pn pairs of train-fs/tcp/nompi/fault-* are 2)
MG_ARGS=${MG_ARGS:-"-b 16 -x 20 -v 10 -s 0"}
MG_NP=${MG_NP:-2}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mg_losses() {  # a log: its step and val loss lines, without times
    grep -oE "^step +[0-9]+/[0-9]+ \| loss [-0-9.naif]+|^val loss [-0-9.naif]+" "$1"
}
# mpirun's losses for the pair runs: train-mpi's log, else a run of its own
mg_reference() {
    [ -s "$OUT/train_mpi.log" ] && mg_losses "$OUT/train_mpi.log" | grep -q "^step" && { echo "$OUT/train_mpi.log"; return; }
    timeout 300 mpirun --allow-run-as-root -np $MG_NP ./train_gpt $MG_ARGS > "$OUT/train_mpi_ref.log" 2>&1
    echo "$OUT/train_mpi_ref.log"
}
# Ranks 0 and 1 of a 2-process run on this host, started as a launcher would (rank 1 in the
# background): NAME BIN -pi-flags... Their outputs in $OUT/NAME_r0.log and NAME_r1.log; both must
# exit 0 and rank 0 must print mpirun's losses, bitwise.
mg_pair() {
    local name=$1 bin=$2; shift 2
    local ref log0="$OUT/${name}_r0.log" log1="$OUT/${name}_r1.log"
    ref=$(mg_reference)
    timeout 300 "$bin" $MG_ARGS -pn 2 -pr 1 "$@" > "$log1" 2>&1 &
    local p1=$!
    timeout 300 "$bin" $MG_ARGS -pn 2 -pr 0 "$@" > "$log0" 2>&1
    local rc0=$?
    wait $p1
    local rc1=$?
    echo "== $name: exit codes: rank 0 $rc0, rank 1 $rc1 ($log0, $log1); reference $ref"
    tail -4 "$log0"
    if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then echo "FAIL: $name: exit codes $rc0 $rc1"; tail -5 "$log1"; return 1; fi
    if [ "$(mg_losses "$ref" | grep -c "^step")" -lt 20 ]; then echo "FAIL: no reference losses in $ref"; return 1; fi
    if diff <(mg_losses "$ref") <(mg_losses "$log0") > "$OUT/$name.diff"; then
        echo "OK: $name printed mpirun's losses, bitwise ($(mg_losses "$log0" | wc -l) lines)"
    else
        echo "MISMATCH: $name's losses differ from mpirun's ($OUT/$name.diff)"; return 1
    fi
}
# The trainer built without MPI (make NO_USE_MPI=1's own command, into build/train_gpt_nompi)
mg_build_nompi() {
    make -s BUILD=build build/libflce.a || return 1
    local cmd; cmd=$(make -n -B NO_USE_MPI=1 train_gpt | tail -1 | sed 's| -o train_gpt | -o build/train_gpt_nompi |')
    echo "$cmd"
    case "$cmd" in *USE_MPI*|*-lmpi*) echo "FAIL: the NO_USE_MPI=1 command still has MPI"; return 1 ;; esac
    eval "$cmd" || return 1
    if ldd build/train_gpt_nompi | grep -q libmpi; then echo "FAIL: build/train_gpt_nompi links MPI"; return 1; fi
    build/train_gpt_nompi -h | grep "This build"
    echo "OK: build/train_gpt_nompi (NCCL, no MPI)"
}
# -tp 0 and -tp 1 under mpirun -np $MG_NP, otherwise the same run ($MG_ARGS): both exit 0, the same
# step and val lines, every loss within 1e-3 of the other's; tok/s (the last step's average) and
# memory (the trainer's report and what rank 0 holds at the end) of each
mg_tp() {
    local tp log rc
    for tp in 0 1; do
        log="$OUT/train_tp${tp}.log"
        timeout 300 mpirun --allow-run-as-root -np $MG_NP ./train_gpt $MG_ARGS -tp $tp > "$log" 2>&1
        rc=$?
        echo "== -tp $tp: exit code $rc ($log)"
        grep -E "^\| LM head|^\| ZeRO|^\| gradient red|^memory|^ +activations|device memory in use" "$log"
        grep -E "^step +[0-9]+/" "$log" | tail -1
        if [ $rc -ne 0 ]; then echo "FAIL: -tp $tp exited $rc"; tail -5 "$log"; return 1; fi
    done
    local a="$OUT/train_tp0.log" b="$OUT/train_tp1.log"
    if [ "$(mg_losses "$a" | grep -c "^step")" -lt 20 ]; then echo "FAIL: fewer than 20 steps in $a"; return 1; fi
    if ! diff <(mg_losses "$a" | sed -E 's/[-0-9.naif]+$//') <(mg_losses "$b" | sed -E 's/[-0-9.naif]+$//') \
            > "$OUT/train_tp.diff"; then
        echo "FAIL: -tp 0 and -tp 1 print different step / val lines ($OUT/train_tp.diff)"; return 1
    fi
    local tok0 tok1 mem0 mem1 cmp
    tok0=$(grep -E "^step +[0-9]+/" "$a" | tail -1 | grep -oE "[0-9]+ tok/s")
    tok1=$(grep -E "^step +[0-9]+/" "$b" | tail -1 | grep -oE "[0-9]+ tok/s")
    mem0=$(grep -oE "in use at the end \(rank 0\): [0-9]+ MiB" "$a" | grep -oE "[0-9]+ MiB")
    mem1=$(grep -oE "in use at the end \(rank 0\): [0-9]+ MiB" "$b" | grep -oE "[0-9]+ MiB")
    cmp=$(paste <(mg_losses "$a" | awk '{print $NF}') <(mg_losses "$b" | awk '{print $NF}') |
          awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (!(d <= 1e-3) || $1 !~ /^[0-9]/ || $2 !~ /^[0-9]/) bad++; n++}
               END {printf "%d %d %.2e", n, bad + 0, m}')
    read -r n bad maxd <<< "$cmp"
    local perf="tok/s: -tp 0 $tok0, -tp 1 $tok1; rank 0 at the end: -tp 0 $mem0, -tp 1 $mem1"
    if [ "$bad" -eq 0 ]; then
        echo "OK: -tp 1's losses within 1e-3 of -tp 0's ($n lines, max |diff| $maxd); $perf"
    else
        echo "FAIL: $bad of $n losses of -tp 1 differ from -tp 0's by more than 1e-3 (max $maxd); $perf"
        paste <(mg_losses "$a") <(mg_losses "$b") | head -30; return 1
    fi
}
# Seconds from the first time FILE shows PATTERN (polled every 0.1 s) until now; "?" if never.
mg_since() {
    local t; t=$(cat "$1.t" 2>/dev/null) || { echo "?"; return; }
    echo "$(date +%s.%N) $t" | awk '{printf "%.1f", $1 - $2}'
}
mg_mark() {  # FILE PATTERN: in the background, writes FILE.t when PATTERN appears in FILE
    rm -f "$1.t"
    ( while ! grep -q "$2" "$1" 2>/dev/null; do sleep 0.1; done; date +%s.%N > "$1.t" ) &
    MG_MARKER=$!
}
# mpirun -np $MG_NP with TRAIN_FAULT on rank 1: non-zero within 30 s (timeout 60), rank 1's message shown
mg_fault_mpi() {
    local log="$OUT/train_fault_run.log" t0 rc secs after
    t0=$(date +%s.%N)
    mg_mark "$log" "TRAIN_FAULT: rank 1 stops"
    TRAIN_FAULT=1:3 timeout 60 mpirun --allow-run-as-root -x TRAIN_FAULT -x NCCL_NVLS_ENABLE -np $MG_NP ./train_gpt $MG_ARGS \
        > "$log" 2>&1
    rc=$?
    secs=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')
    sleep 0.3; kill $MG_MARKER 2>/dev/null
    after=$(mg_since "$log")
    cat "$log"
    echo "== mpirun exit code $rc after $secs s in all, $after s after rank 1's fault message"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && awk "BEGIN {exit !($secs < 30)}" &&
       grep -q "TRAIN_FAULT: rank 1 stops at step 3" "$log"; then
        echo "OK: the run stopped (exit $rc) in $secs s, $after s after the fault"
    else
        echo "FAIL: exit $rc after $secs s (want non-zero, not 124/137, under 30 s, with rank 1's message)"; return 1
    fi
}
# The pair with TRAIN_FAULT (the 3rd argument) on rank 1 only: both non-zero within 30 s, rank 0
# with rank 1's message (the 4th argument; "stopped the run" for a kill)
mg_fault_pair() {  # name, -pi flags (one word each, quoted together), fault, rank 0 must show
    local name=$1 flags=$2 fault=$3 want=$4 log0="$OUT/$1_r0.log" log1="$OUT/$1_r1.log" t0 rc0 rc1 secs after
    t0=$(date +%s.%N)
    mg_mark "$log1" "stops at step 3\|CUDA ERROR"
    TRAIN_FAULT=$fault timeout 60 ./train_gpt $MG_ARGS -pn 2 -pr 1 $flags > "$log1" 2>&1 &
    local p1=$!
    timeout 60 ./train_gpt $MG_ARGS -pn 2 -pr 0 $flags > "$log0" 2>&1
    rc0=$?
    wait $p1
    rc1=$?
    secs=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')
    sleep 0.3; kill $MG_MARKER 2>/dev/null
    after=$(mg_since "$log1")
    echo "== $name: TRAIN_FAULT=$fault on rank 1; exit codes: rank 0 $rc0, rank 1 $rc1, $secs s in all," \
         "$after s after rank 1's message (a kill prints none)"
    echo "-- rank 0:"; tail -8 "$log0"; echo "-- rank 1:"; tail -4 "$log1"
    if [ $rc0 -ne 0 ] && [ $rc0 -ne 124 ] && [ $rc1 -ne 0 ] && [ $rc1 -ne 124 ] && awk "BEGIN {exit !($secs < 30)}" &&
       grep -q "rank 1 of 2 stopped the run" "$log0" && grep -q -- "$want" "$log0"; then
        echo "OK: $name: both stopped (exits $rc0 $rc1) in $secs s; rank 0 shows rank 1's message"
    else
        echo "FAIL: $name: exits $rc0 $rc1 after $secs s (want both non-zero, not 124, under 30 s, rank 0 showing '$want')"
        return 1
    fi
}
# mpirun -np $MG_NP with the arguments given; its output into the file $1 (TRAIN_PROFILE=1 passed on
# when set here)
mg_mpirun() {
    local log=$1; shift
    timeout 300 mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE -x TRAIN_PROFILE="${TRAIN_PROFILE:-0}" -np $MG_NP \
        ./train_gpt "$@" > "$log" 2>&1
}
# -z 0 and -z 1 on 2 GPUs: both exit 0 with bitwise the same losses; both memory reports; then a
# -z 1 checkpoint resumed mid-run continues bitwise, and a -z 0 run refuses it naming both stages
mg_zero() {
    local z0="$OUT/train_zero0_run.log" z1="$OUT/train_zero1_run.log" rc0 rc1 dir=/tmp/train_zero_ckpt
    mg_mpirun "$z0" $MG_ARGS -z 0; rc0=$?
    rm -rf "$dir"
    mg_mpirun "$z1" $MG_ARGS -z 1 -o "$dir" -n 10; rc1=$?
    echo "== -z 0 (exit $rc0):"; grep -A1 "^memory per GPU" "$z0"; grep -E "ZeRO stage|gradient reduction" "$z0"
    echo "== -z 1 (exit $rc1):"; grep -A1 "^memory per GPU" "$z1"; grep -E "ZeRO stage|gradient reduction" "$z1"
    mg_losses "$z1" | tail -3
    if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then echo "FAIL: train-zero: exit codes $rc0 $rc1"; tail -5 "$z0" "$z1"; return 1; fi
    if [ "$(mg_losses "$z0" | grep -c "^step")" -lt 20 ]; then echo "FAIL: no losses in $z0"; return 1; fi
    if ! diff <(mg_losses "$z0") <(mg_losses "$z1") > "$OUT/train_zero.diff"; then
        echo "MISMATCH: -z 1's losses differ from -z 0's ($OUT/train_zero.diff)"; return 1
    fi
    echo "ok: -z 1 printed -z 0's losses, bitwise ($(mg_losses "$z1" | wc -l) lines)"
    ls "$dir"
    # resume from step 10: the marker of step 20 goes, so that step 10 is the latest
    rm -f "$dir/DONE_00000020"
    local zr="$OUT/train_zero1_resume.log" zbad="$OUT/train_zero0_refuse.log" rcr rcb
    mg_mpirun "$zbad" $MG_ARGS -z 0 -o "$dir" -y 1; rcb=$?
    mg_mpirun "$zr" $MG_ARGS -z 1 -o "$dir" -y 1; rcr=$?
    echo "== -z 0 -y 1 on the -z 1 checkpoint (exit $rcb):"; grep -m1 "cannot resume" "$zbad"
    echo "== -z 1 -y 1 (exit $rcr):"; grep -E "^resumed" "$zr"; mg_losses "$zr" | tail -2
    if [ $rcb -eq 0 ] || ! grep -q "written with -z 1 (ZeRO stage 1), this run has -z 0" "$zbad"; then
        echo "FAIL: -z 0 did not refuse the -z 1 checkpoint with both stages named"; return 1
    fi
    local steps="^step +(1[1-9]|20)/20 "
    if [ $rcr -ne 0 ] || [ "$(mg_losses "$zr" | grep -cE "$steps")" -ne 10 ] ||
       ! diff <(mg_losses "$z1" | grep -E "$steps") <(mg_losses "$zr" | grep -E "$steps") > "$OUT/train_zero_resume.diff"; then
        echo "MISMATCH: the resumed -z 1 run's steps 11-20 differ (exit $rcr; $OUT/train_zero_resume.diff)"; return 1
    fi
    echo "OK: -z 0 and -z 1 bitwise the same losses; -z 1 resumed from step 10 bitwise; -z 0 refuses a -z 1 checkpoint"
}
# -z 0|1 x -ov 0|1 on 2 GPUs at -b 16: every run exits 0 with bitwise the same losses; tok/s (the
# last step's average) and the step profile's time for the reduction left after the backward
mg_overlap() {
    local args="-b 16 -x 30 -v 0 -s 0" ref="" bad=0
    for zs in 0 1; do for ov in 0 1; do
        local log="$OUT/train_overlap_z${zs}_ov${ov}.log" rc
        TRAIN_PROFILE=1 mg_mpirun "$log" $args -z $zs -ov $ov; rc=$?
        printf "== -z %s -ov %s: exit %s, %s tok/s; reduction after the backward: %s\n" $zs $ov $rc \
            "$(grep -oE "[0-9]+ tok/s" "$log" | tail -1 | cut -d' ' -f1)" \
            "$(grep -m1 "gradient reduction (what the backward left)" "$log" | sed 's/  */ /g')"
        [ $rc -ne 0 ] && { echo "FAIL: -z $zs -ov $ov exited $rc"; tail -5 "$log"; bad=1; continue; }
        if [ -z "$ref" ]; then ref=$log
        elif ! diff <(mg_losses "$ref") <(mg_losses "$log") > "$OUT/train_overlap_z${zs}_ov${ov}.diff"; then
            echo "MISMATCH: -z $zs -ov $ov's losses differ from $ref's"; bad=1
        fi
    done; done
    [ "$(mg_losses "$ref" | grep -c "^step")" -ge 30 ] || { echo "FAIL: no losses in $ref"; return 1; }
    [ $bad -eq 0 ] && echo "OK: -z 0|1 x -ov 0|1: bitwise the same 30 losses" || return 1
}
# Median ms of a log's steps 11 and on (the trainer's step lines)
mg_median_ms() {
    grep -E "^step +[0-9]+/" "$1" | awk -F'|' 'NR > 10 {gsub(/ ms/, "", $5); print $5 + 0}' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
# MiB in use on rank 0 at the end of a log's run (the trainer's last report)
mg_mib() { grep -oE "at the end \(rank 0\): [0-9]+" "$1" | grep -oE "[0-9]+$"; }
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
# A/B of library settings in one call: dev/flce_bench's flce rows under each setting of
# $AB_ARGS (default "--pingpong=0 --pingpong=1"; "-" for none), $AB_ROUNDS rounds (default 2)
# alternated so that the GPU's warm-up and clock drift fall on both; the summary's flce row of
# each run (x the same run's floor).
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
# Trainer builds alternated in one call ($TRAIN_AB: train_gpt binaries, default ./train_gpt, or
# path+VAR=value for a binary under a setting; $AB_ROUNDS rounds, default 2), each
# `-b $TRAIN_AB_B (64) -x 40 -v 0 -s 0`: the median and mean step of steps 11-40, MiB in use at
# the end, step 40's loss. A step's time moves 2-3% between calls on one GPU (clocks under its
# power limit), so builds compare only within a call.
train_ab() {
    local set bin r log bad=0
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do for set in ${TRAIN_AB:-./train_gpt}; do
        local envs=()
        bin=${set%%+*}
        case $set in *+*) envs=("${set#*+}") ;; esac
        log="$OUT/train_ab_${set//[^A-Za-z0-9_]/_}_$r.log"
        env "${envs[@]}" timeout 200 "$bin" -b "${TRAIN_AB_B:-64}" -x 40 -v 0 -s 0 > "$log" 2>&1 ||
            { echo "FAIL: $set (round $r)"; bad=1; continue; }
        echo "| $set | $r | $(grep -E '^step +[0-9]+/' "$log" | sed -n '11,40p' | awk -F'|' '{gsub(/ ms/, "", $5); print $5 + 0}' |
            sort -g | awk '{v[NR] = $1; s += $1} END {printf "%.2f | %.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, s / NR}') ms | $(mg_mib "$log") MiB | $(grep -E '^step +40/' "$log" | grep -oE 'loss [0-9.]+') |"
    done; done
    [ $bad -eq 0 ] && echo "OK: train-ab of ${TRAIN_AB:-./train_gpt}, ${AB_ROUNDS:-2} rounds" || return 1
}
# dev/attention_bench builds alternated in one call ($ATT_AB: binaries, default
# build/attention_bench; $AB_ROUNDS rounds): their Hopper rows and the checks against mma.sync
att_ab() {
    local bin r log bad=0
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do for bin in ${ATT_AB:-build/attention_bench}; do
        log="$OUT/att_ab_${bin//[^A-Za-z0-9_]/_}_$r.log"
        timeout 200 "$bin" -r 30 > "$log" 2>&1 || { echo "FAIL: $bin (round $r)"; bad=1; continue; }
        echo "| $bin | $r | $(grep -E '^\| (forward|backward), Hopper' "$log" | cut -d'|' -f3 | tr -d ' ' | paste -sd'|') ms | $(grep -E '^Hopper backward vs' "$log" | cut -d: -f2) |"
    done; done
    [ $bad -eq 0 ] && echo "OK: att-ab of ${ATT_AB:-build/attention_bench}, ${AB_ROUNDS:-2} rounds" || return 1
}
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
# Nsight Compute on one chunk's logits, d_h and d_W GEMMs of flce's default row (the first call
# is flce_bench's warm-up; its first chunk's three GEMMs are skipped, the second's profiled).
ncu_flce() {
    local shape=${NCU_SHAPE:-65536x768x50304} csv="$OUT/ncu_flce.csv"
    command -v ncu > /dev/null || { echo "FAIL: no ncu on this machine"; return 1; }
    timeout 400 ncu --clock-control none -k regex:sm90_gemm_kernel --launch-skip 3 --launch-count 3 --csv \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section InstructionStats \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
        build/flce_bench -v flce -s "$shape" -r 1 -w 1 ${NCU_ARGS:-} > "$csv" 2> "$OUT/ncu_flce.err" ||
        { echo "FAIL: ncu (see $OUT/ncu_flce.err)"; tail -5 "$OUT/ncu_flce.err"; return 1; }
    # the kernels' duration and SM clock: "ID","Kernel Name",...,"Metric Name","Metric Unit","Metric Value"
    python3 - "$csv" <<'PY'
import csv, sys
# (the benchmark's own output comes first: the table starts at ncu's header row)
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
if start is None: sys.exit("FAIL: no ncu rows")
rows = [r for r in rows[start:] if len(r) > 5]
head = rows[0]
k, n, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
seen = {}
for r in rows[1:]:
    if r[n] in ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"):
        seen.setdefault((r[0], r[k][:60]), {})[r[n]] = r[v]
# shared-memory wavefronts (wgmma's operand reads included, TMA's writes not: dev/RESULTS.md)
for (i, name), m in seen.items():
    print(f"| {i} | {name} | {m.get('gpu__time_duration.sum', '?')} | {m.get('sm__cycles_elapsed.avg.per_second', '?')} "
          f"| {m.get('l1tex__data_pipe_lsu_wavefronts_mem_shared.sum', '?')} |")
print(f"OK: ncu on {len(seen)} kernels")
PY
}
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
# hf: see the top of this file
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
run_step() {  # name, command...
    local name=$1; shift
    local t0=$(date +%s)
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    result[$name]="rc=$rc $(( $(date +%s) - t0 ))s | $(grep -E 'passed, [0-9]+ failed|OK|MISMATCH|FAIL' "$OUT/$name.log" | tail -1)"
    return $rc
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
git log -1 --format='%H %cd' > "$OUT/commit.txt" 2>/dev/null || echo "no git" > "$OUT/commit.txt"
for s in $steps; do
    case $s in
    build) run_step build make -j"$(nproc)" lib tests train_gpt || { tail -30 "$OUT/build.log"; break; }
           run_step build_dev make -j"$(nproc)" dev || tail -30 "$OUT/build_dev.log" ;;
    test) run_step test_cpu make test; run_step test_gpu make test-gpu ;;
    fixtures) run_step fixtures bash -c 'python3 scripts/export_fixtures.py /tmp/fixtures_again && python3 scripts/compare_fixtures.py test/fixtures /tmp/fixtures_again' ;;
    tokens) run_step tokens python3 scripts/check_tokens_tiktoken.py ;;
    bench-check) run_step bench_check timeout 300 build/flce_bench -c ;;
    bench) run_step bench timeout 480 build/flce_bench -o "$OUT/bench.md" ;;
    bench-flce) run_step bench timeout 300 build/flce_bench -v flce -o "$OUT/bench.md" ;;
    bench-noat) run_step bench_noat timeout 240 build/flce_bench -v flce --autotune=0 -o "$OUT/bench_noat.md" ;;
    gemm-algos) run_step gemm_algos timeout 240 build/gemm_algos ;;
    ncu-flce) run_step ncu_flce ncu_flce ;;
    ncu-src) run_step ncu_src ncu_src ;;
    bench-peers) { [ -f build/libflce.so ] && [ -x build/flce_bench ]; } ||
                     run_step build_peers make -j"$(nproc)" lib build/flce_bench
                 run_step bench_peers_wheels bash -c 'python3 scripts/bench_peers.py --assemble /tmp/flce_whl
                     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/peers/site-packages \
                         .whl/*.whl $(ls /tmp/flce_whl/*.whl 2>/dev/null) &&
                     echo "OK: wheels installed in /tmp/peers/site-packages ($(ls /tmp/flce_whl/*.whl 2>/dev/null | wc -l) reassembled)" ||
                     { echo "FAIL: pip install into /tmp/peers/site-packages"; exit 1; }'
                 PYTHONPATH=/tmp/peers/site-packages${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 run_step bench_peers \
                     timeout $(( ${BENCH_PEERS_SECONDS:-420} + 120 )) python3 scripts/bench_peers.py --budget 1 \
                     --time-limit "${BENCH_PEERS_SECONDS:-420}" --c-bench build/flce_bench -o "$OUT/peers.md" --png "$OUT/peers.png" ;;
    gemm-sm90) run_step gemm_sm90 timeout 240 build/gemm_sm90 ;;
    matmul-bench) run_step matmul_bench timeout 240 build/matmul_bench; grep -E "^\|" "$OUT/matmul_bench.log" ;;
    attention) run_step attention timeout 240 build/attention_bench ;;
    vp-bench) run_step vp_bench timeout 400 build/flce_vp_bench ;;
    pytest) run_step pytest env FLCE_LIBRARY=build/libflce.so timeout 300 python3 -m pytest -q flce/python/tests/test_gpu.py ;;
    train-profile) TRAIN_PROFILE=1 run_step train_profile timeout 300 ./train_gpt -b 64 -x 25 -v 0 -s 0 ;;
    train-lt) run_step train_lt timeout 400 ./train_gpt -fh 0 ;;
    bench-timing) run_step bench_timing timeout 240 build/flce_bench -v flce --timing -o "$OUT/bench_timing.md" ;;
    train) run_step train timeout 400 ./train_gpt ;;
    train-b64) run_step train_b64 timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 ;;
    train-b64-lt) run_step train_b64_lt timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fh 0 ;;
    train-fa) run_step train_b64_fa timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fa 1 ;;
    train-bmax) run_step train_bmax timeout 300 ./train_gpt -b 256 -x 6 -v 0 -s 0 ;;
    train-vocab) run_step train_vocab timeout 300 ./train_gpt -V 176256 -b 32 -x 8 -v 0 -s 0 ;;
    train-llama) for m in qwen2.5-0.5b:32:1024 qwen2.5-1.5b:16:1024 llama3.2-1b:8:2048 llama3.2-3b:4:2048; do
                     IFS=: read -r name b t <<< "$m"
                     run_step "train_$name" timeout 300 ./train_gpt -e "$name" -b "$b" -t "$t" -x 12 -v 0 -s 0
                 done ;;
    train-mpi) OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
                   run_step train_mpi timeout 300 mpirun --allow-run-as-root -np $MG_NP ./train_gpt $MG_ARGS -o /tmp/mpi_run -n 10 ;;
    train-fs) rm -rf /tmp/train_fs_dir && mkdir -p /tmp/train_fs_dir
              run_step train_fs mg_pair train_fs ./train_gpt -pi fs -pf /tmp/train_fs_dir ;;
    train-tcp) run_step train_tcp mg_pair train_tcp ./train_gpt -pi tcp -ps 127.0.0.1 ;;
    train-nompi) run_step build_nompi mg_build_nompi &&
                 run_step train_nompi mg_pair train_nompi build/train_gpt_nompi -pi tcp -ps 127.0.0.1:12346 ;;
    train-fault) run_step train_fault mg_fault_mpi ;;
    train-fault-tcp) run_step train_fault_tcp mg_fault_pair fault_tcp_cuda "-pi tcp -ps 127.0.0.1" 1:3:cuda "CUDA ERROR"
                     run_step train_fault_tcp_kill mg_fault_pair fault_tcp_kill "-pi tcp -ps 127.0.0.1" 1:3:kill \
                         "without a message" ;;
    train-fault-fs) rm -rf /tmp/train_fs_dir && mkdir -p /tmp/train_fs_dir
                    run_step train_fault_fs mg_fault_pair fault_fs "-pi fs -pf /tmp/train_fs_dir" 1:3 \
                        "TRAIN_FAULT: rank 1 stops at step 3" ;;
    train-tp) run_step train_tp mg_tp ;;
    hf) run_step hf hf_check ;;
    train-zero) run_step train_zero mg_zero ;;
    train-overlap) run_step train_overlap mg_overlap ;;
    train-scale) run_step train_scale mg_scale; grep -E "^\|" "$OUT/train_scale.log" ;;
    bench-ab) run_step bench_ab bench_ab; grep -E "^\|" "$OUT/bench_ab.log" ;;
    train-f) run_step train_f train_f; grep -E "^\|" "$OUT/train_f.log" ;;
    train-ab) run_step train_ab train_ab; grep -E "^\|" "$OUT/train_ab.log" ;;
    att-ab) run_step att_ab att_ab; grep -E "^\|" "$OUT/att_ab.log" ;;
    train-flags) for fl in 0 1; do for f in 1024 4096; do
                     run_step "train_b64_fl${fl}_f${f}" timeout 200 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fl $fl -f $f; done; done ;;
    esac
done
echo "== failures in the GPU test log =="
grep -E '^FAIL' "$OUT/test_gpu.log" 2>/dev/null | head -40
echo "== benchmark summary =="
[ -f "$OUT/bench_check.log" ] && grep -E "PASS|FAIL" "$OUT/bench_check.log" | tail -20
[ -f "$OUT/bench.md" ] && tail -25 "$OUT/bench.md"
[ -f "$OUT/bench_noat.md" ] && { echo "== flce, autotune off =="; grep -A8 "Summary: median" "$OUT/bench_noat.md" | tail -7; }
[ -f "$OUT/gemm_algos.log" ] && { echo "== cuBLASLt candidates =="; cat "$OUT/gemm_algos.log"; }
[ -f "$OUT/ncu_flce.log" ] && { echo "== ncu: flce's GEMMs (id | kernel | ns | SM Hz | shared wavefronts) =="; grep -E "^\||OK|FAIL" "$OUT/ncu_flce.log"; }
[ -f "$OUT/ncu_src.log" ] && { echo "== ncu source counters =="; grep -E "^==|stalls:|OK|FAIL" "$OUT/ncu_src.log"; }
[ -f "$OUT/gemm_sm90.log" ] && { echo "== our Hopper GEMM vs cuBLASLt =="; grep -E "^checks|^\|" "$OUT/gemm_sm90.log"; }
[ -f "$OUT/attention.log" ] && { echo "== attention: Hopper kernels vs mma.sync =="; grep -E "^\||vs mma" "$OUT/attention.log"; }
[ -f "$OUT/train_profile.log" ] && { echo "== a B=64 step, TRAIN_PROFILE=1 =="; sed -n '/^step profile/,$p' "$OUT/train_profile.log"; }
[ -f "$OUT/pytest.log" ] && { echo "== Python binding (pytest) =="; tail -1 "$OUT/pytest.log"; }
[ -f "$OUT/hf.log" ] && { echo "== Hugging Face checkpoints =="; grep -E "^FAIL|passed, [0-9]+ failed|^val loss|^ok|^OK" "$OUT/hf.log"; }
for f in train_fs train_tcp train_nompi; do
    [ -f "$OUT/$f.log" ] && { echo "== $f =="; grep -E "^step +[0-9]+/|val loss" "$OUT/${f}_r0.log" | tail -3;
                              grep -E "^== |^OK|^MISMATCH|^FAIL" "$OUT/$f.log"; }
done
[ -f "$OUT/train_tp.log" ] && { echo "== train_tp =="; grep -E "^== |^\||^memory|^ +activations|device memory|^step|^OK|^FAIL" "$OUT/train_tp.log"; }
for f in train_zero train_overlap; do
    [ -f "$OUT/$f.log" ] && { echo "== $f =="; grep -E "^== |^memory per GPU|^ +activations|^OK|^ok|^MISMATCH|^FAIL" "$OUT/$f.log"; }
done
for f in train_fault train_fault_tcp train_fault_tcp_kill train_fault_fs; do
    [ -f "$OUT/$f.log" ] && { echo "== $f =="; grep -E "^== |^OK|^FAIL|stopped the run" "$OUT/$f.log" | tail -4; }
done
for f in train train_lt train_mpi train_b64 train_b64_lt train_b64_fa train_bmax train_vocab train_b64_fl0_f1024 train_b64_fl0_f4096 train_b64_fl1_f1024 train_b64_fl1_f4096; do
    [ -f "$OUT/$f.log" ] && { echo "== $f =="; grep -E "^memory|^step +[0-9]+/|val loss|Error|rror" "$OUT/$f.log" | tail -6; }
done
for f in bench_timing; do
    [ -f "$OUT/$f.log" ] && { echo "== $f: per-phase ms =="; grep -E "^flce (config|timing)" "$OUT/$f.log"; }
done
echo "== gpu =="; cat "$OUT/gpu.txt"
echo "== steps =="
for k in "${!result[@]}"; do echo "$k: ${result[$k]}"; done
