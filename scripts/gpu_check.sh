#!/usr/bin/env bash
# One call on a GPU machine: build everything for sm_90, run the CPU and GPU test suites,
# re-run the fixture exporter and compare with the committed fixtures, check the shipped
# tokens against tiktoken, and run the dev/ benchmark. Logs go to $OUT (default gpu_logs/);
# a short table is printed last.
#   scripts/gpu_check.sh [build] [test] [fixtures] [tokens] [gemm-sm90] [bench-check] [bench] [bench-flce] [bench-timing] [bench-noat] [gemm-algos]
#                        [train] [train-lt] [train-b64] [train-b64-lt] [train-fa] [train-bmax] [train-vocab] [train-flags] [train-mpi]
#   (default: all but train-mpi, which needs 2 GPUs: mpirun -np 2)
#   bench-timing: the library's per-phase times (FLCE_TIMING=1); bench-noat: the flce rows
#   with autotuning off (FLCE_AUTOTUNE=0); gemm-sm90: our Hopper GEMM against cuBLASLt;
#   train: ./train_gpt as a user runs it; train-lt: the same on the cuBLASLt path (FLCE_HOPPER=0);
#   train-b64: GPT-2 124M at B=64 (llm.c's comparison point), train-b64-lt the same on the
#   cuBLASLt path; train-bmax: B=256; bench-flce: the flce rows of the benchmark only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_logs}
mkdir -p "$OUT"
steps="${*:-build test fixtures tokens gemm-sm90 bench-check bench bench-timing train train-b64 train-bmax train-vocab train-flags}"
declare -A result
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
    bench-noat) FLCE_AUTOTUNE=0 run_step bench_noat timeout 240 build/flce_bench -v flce -o "$OUT/bench_noat.md" ;;
    gemm-algos) run_step gemm_algos timeout 240 build/gemm_algos ;;
    gemm-sm90) run_step gemm_sm90 timeout 240 build/gemm_sm90 ;;
    train-lt) FLCE_HOPPER=0 run_step train_lt timeout 400 ./train_gpt ;;
    bench-timing) FLCE_TIMING=1 run_step bench_timing timeout 240 build/flce_bench -v flce -o "$OUT/bench_timing.md" ;;
    train) run_step train timeout 400 ./train_gpt ;;
    train-b64) run_step train_b64 timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 ;;
    train-b64-lt) FLCE_HOPPER=0 run_step train_b64_lt timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 ;;
    train-fa) run_step train_b64_fa timeout 300 ./train_gpt -b 64 -x 12 -v 0 -s 0 -fa 1 ;;
    train-bmax) run_step train_bmax timeout 300 ./train_gpt -b 256 -x 6 -v 0 -s 0 ;;
    train-vocab) run_step train_vocab timeout 300 ./train_gpt -V 176256 -b 32 -x 8 -v 0 -s 0 ;;
    train-mpi) OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
                   run_step train_mpi timeout 300 mpirun --allow-run-as-root -np 2 ./train_gpt -b 16 -x 20 -v 10 -s 0 -o /tmp/mpi_run -n 10 ;;
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
[ -f "$OUT/gemm_sm90.log" ] && { echo "== our Hopper GEMM vs cuBLASLt =="; grep -E "^checks|^\|" "$OUT/gemm_sm90.log"; }
for f in train train_lt train_mpi train_b64 train_b64_lt train_b64_fa train_bmax train_vocab train_b64_fl0_f1024 train_b64_fl0_f4096 train_b64_fl1_f1024 train_b64_fl1_f4096; do
    [ -f "$OUT/$f.log" ] && { echo "== $f =="; grep -E "^memory|^step +[0-9]+/|val loss|Error|rror" "$OUT/$f.log" | tail -6; }
done
for f in bench_timing; do
    [ -f "$OUT/$f.log" ] && { echo "== $f: per-phase ms =="; grep -E "^flce (config|timing)" "$OUT/$f.log"; }
done
echo "== gpu =="; cat "$OUT/gpu.txt"
echo "== steps =="
for k in "${!result[@]}"; do echo "$k: ${result[$k]}"; done
