#!/usr/bin/env bash
# The trainer on several GPUs of one host (make test-multigpu runs every check): mpirun on $MG_NP
# processes (default 2), the -pi fs and tcp pairs (2 ranks), a build without MPI, failures
# (TRAIN_FAULT), -z 0|1, -ov 0|1 and -tp 0|1, all at $MG_ARGS (default "-b 16 -x 20 -v 10 -s 0") so
# that their losses compare; each check's function below says what it wants. Logs in $OUT (gpu_logs/).
#   scripts/test_multigpu.sh [CHECK...]      (the names in the case at the end; default all)
source "$(dirname "$0")/gpu_common.sh"
checks="${*:-train-mpi train-fs train-tcp train-nompi train-fault train-fault-tcp train-fault-fs train-zero train-overlap train-tp}"
MG_ARGS=${MG_ARGS:-"-b 16 -x 20 -v 10 -s 0"}
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
# build/train_gpt_nompi (make's rule: the trainer as NO_USE_MPI=1 builds it): no MPI in the
# Makefile's NO_USE_MPI=1 command, none linked into the binary
mg_check_nompi() {
    local cmd; cmd=$(make -n -B NO_USE_MPI=1 train_gpt | sed -n '/-o train_gpt /,$p')
    echo "$cmd"
    case "$cmd" in *USE_MPI*|*-lmpi*) echo "FAIL: the NO_USE_MPI=1 command still has MPI"; return 1 ;; esac
    [ -x build/train_gpt_nompi ] || { echo "FAIL: no build/train_gpt_nompi (make build/train_gpt_nompi)"; return 1; }
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
        mg_mpirun "$log" $args -sp 1 -z $zs -ov $ov; rc=$?
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
for c in $checks; do
    case $c in
    train-mpi) OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
                   step train_mpi timeout 300 mpirun --allow-run-as-root -np $MG_NP ./train_gpt $MG_ARGS -o /tmp/mpi_run -n 10 ;;
    train-fs) rm -rf /tmp/train_fs_dir && mkdir -p /tmp/train_fs_dir
              step train_fs mg_pair train_fs ./train_gpt -pi fs -pf /tmp/train_fs_dir ;;
    train-tcp) step train_tcp mg_pair train_tcp ./train_gpt -pi tcp -ps 127.0.0.1 ;;
    train-nompi) step check_nompi mg_check_nompi &&
                 step train_nompi mg_pair train_nompi build/train_gpt_nompi -pi tcp -ps 127.0.0.1:12346 ;;
    train-fault) step train_fault mg_fault_mpi ;;
    train-fault-tcp) step train_fault_tcp mg_fault_pair fault_tcp_cuda "-pi tcp -ps 127.0.0.1" 1:3:cuda "CUDA ERROR"
                     step train_fault_tcp_kill mg_fault_pair fault_tcp_kill "-pi tcp -ps 127.0.0.1" 1:3:kill \
                         "without a message" ;;
    train-fault-fs) rm -rf /tmp/train_fs_dir && mkdir -p /tmp/train_fs_dir
                    step train_fault_fs mg_fault_pair fault_fs "-pi fs -pf /tmp/train_fs_dir" 1:3 \
                        "TRAIN_FAULT: rank 1 stops at step 3" ;;
    train-tp) step train_tp mg_tp ;;
    train-zero) step train_zero mg_zero ;;
    train-overlap) step train_overlap mg_overlap ;;
    *) step_unknown "$c" ;;
    esac
done
for f in train_fs train_tcp train_nompi; do
    ran $f && { echo "== $f =="; grep -E "^step +[0-9]+/|val loss" "$OUT/${f}_r0.log" | tail -3;
                grep -E "^== |^OK|^MISMATCH|^FAIL" "$OUT/$f.log"; }
done
ran train_tp && { echo "== train_tp =="; grep -E "^== |^\||^memory|^ +activations|device memory|^step|^OK|^FAIL" "$OUT/train_tp.log"; }
for f in train_zero train_overlap; do
    ran $f && { echo "== $f =="; grep -E "^== |^memory per GPU|^ +activations|^OK|^ok|^MISMATCH|^FAIL" "$OUT/$f.log"; }
done
for f in train_fault train_fault_tcp train_fault_tcp_kill train_fault_fs; do
    ran $f && { echo "== $f =="; grep -E "^== |^OK|^FAIL|stopped the run" "$OUT/$f.log" | tail -4; }
done
ran train_mpi && { echo "== train_mpi =="; grep -E "^memory|^step +[0-9]+/|val loss|Error|rror" "$OUT/train_mpi.log" | tail -6; }
finish test-multigpu
