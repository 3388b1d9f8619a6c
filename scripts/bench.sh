#!/usr/bin/env bash
# The benchmarks' standard rows on one GPU (make bench runs it): dev/flce_bench's correctness
# mode and its report (every version at the four shapes, $OUT/bench.md), our Hopper GEMM against
# cuBLASLt (dev/gemm_sm90), the trainer's attention (dev/attention_bench) and linear layers
# (dev/matmul_bench); logs in $OUT (default gpu_logs/), the tables, a last line "bench: N passed, M failed".
source "$(dirname "$0")/gpu_common.sh"
step gemm_sm90 timeout 240 build/gemm_sm90
step attention timeout 240 build/attention_bench
step matmul_bench timeout 240 build/matmul_bench
step bench_check timeout 300 build/flce_bench -c
step bench timeout 480 build/flce_bench -o "$OUT/bench.md"
echo "== our Hopper GEMM vs cuBLASLt =="; grep -E "^checks|^\|" "$OUT/gemm_sm90.log"
echo "== attention: Hopper kernels vs mma.sync =="; grep -E "^\||vs mma" "$OUT/attention.log"
echo "== linear layers: cuBLASLt vs our Hopper GEMM =="; grep -E "^\|" "$OUT/matmul_bench.log"
echo "== flce_bench -c =="; grep -E "PASS|FAIL" "$OUT/bench_check.log" | tail -20
[ -f "$OUT/bench.md" ] && { echo "== flce_bench =="; tail -25 "$OUT/bench.md"; }
finish bench
