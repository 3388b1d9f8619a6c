#!/usr/bin/env bash
# Nsight Compute on flce's three Hopper GEMMs of one chunk at NCU_SHAPE (default 65536x768x50304,
# the trainer's head): time, SM clock, shared-memory wavefronts, L2 and DRAM bytes and the sections
# that say where their cycles go (pipe utilization, warp stalls, shared memory); CSV in
# $OUT/ncu_flce.csv (default gpu_logs/), a short table of the kernels last.
#   scripts/dev/ncu_flce.sh
# NCU_ARGS: more flce_bench options (e.g. --pingpong=0); NCU_CMD: another program instead (e.g.
# QuACK's chunk through scripts/bench_peers.py --peers quack), NCU_KERNELS the regex of the kernels
# it profiles (default sm90_gemm_kernel; names demangled), NCU_SKIP (3) launches of them skipped,
# NCU_COUNT (3) profiled: the same counters for any pipeline's kernels.
source "$(dirname "$0")/../gpu_common.sh"
# Nsight Compute on one chunk's logits, d_h and d_W GEMMs of flce's default row (the first call
# is flce_bench's warm-up; its first chunk's three GEMMs are skipped, the second's profiled).
ncu_flce() {
    local shape=${NCU_SHAPE:-65536x768x50304} csv="$OUT/ncu_flce.csv"
    local cmd=${NCU_CMD:-"build/flce_bench -v flce -s $shape -r 1 -w 1 ${NCU_ARGS:-}"}
    command -v ncu > /dev/null || { echo "FAIL: no ncu on this machine"; return 1; }
    timeout 400 ncu --clock-control none --kernel-name-base demangled -k "regex:${NCU_KERNELS:-sm90_gemm_kernel}" \
        --launch-skip "${NCU_SKIP:-3}" --launch-count "${NCU_COUNT:-3}" --csv \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section InstructionStats \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        $cmd > "$csv" 2> "$OUT/ncu_flce.err" ||
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
k, n, u, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
seen = {}
cols = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
        "lts__t_bytes.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
for r in rows[1:]:
    if r[n] in cols:
        seen.setdefault((r[0], r[k][:80]), {})[r[n]] = (r[v] + " " + r[u]).strip()
# shared-memory wavefronts (wgmma's operand reads included, TMA's writes not: dev/RESULTS.md)
for (i, name), m in seen.items():
    print(f"| {i} | {name} | " + " | ".join(m.get(c, "?") for c in cols) + " |")
print(f"OK: ncu on {len(seen)} kernels")
PY
}
step ncu_flce ncu_flce
echo "== ncu: the kernels (id | kernel | ns | SM Hz | shared wavefronts | L2 bytes | DRAM read | DRAM write) =="
grep -E "^\||OK|FAIL" "$OUT/ncu_flce.log"
finish ncu-flce
