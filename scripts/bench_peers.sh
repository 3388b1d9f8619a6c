#!/usr/bin/env bash
# flce through its PyTorch binding against the Python peers on one GPU (make bench-peers runs it):
# the carried .whl/ wheels installed into /tmp/peers/site-packages (the split one reassembled
# first: scripts/bench_peers.py's header says how), then scripts/bench_peers.py, its report in
# $OUT/peers.md and $OUT/peers.png (default gpu_logs/); BENCH_PEERS_SECONDS (default 420) bounds the run,
# BENCH_PEERS_ARGS adds options (e.g. "--shapes llama", "--peers flce,quack --quack-chunk 2816").
source "$(dirname "$0")/gpu_common.sh"
step bench_peers_wheels bash -c 'python3 scripts/bench_peers.py --assemble /tmp/flce_whl
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/peers/site-packages \
        .whl/*.whl $(ls /tmp/flce_whl/*.whl 2>/dev/null) &&
    echo "OK: wheels installed in /tmp/peers/site-packages ($(ls /tmp/flce_whl/*.whl 2>/dev/null | wc -l) reassembled)" ||
    { echo "FAIL: pip install into /tmp/peers/site-packages"; exit 1; }'
PYTHONPATH=/tmp/peers/site-packages${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 step bench_peers \
    timeout $(( ${BENCH_PEERS_SECONDS:-420} + 120 )) python3 scripts/bench_peers.py --budget 1 \
    --time-limit "${BENCH_PEERS_SECONDS:-420}" --c-bench build/flce_bench -o "$OUT/peers.md" --png "$OUT/peers.png" ${BENCH_PEERS_ARGS:-}
finish bench-peers
