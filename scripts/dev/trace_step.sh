#!/usr/bin/env bash
# A training step's timeline, train_gpt's beside llm.q's, at the clocks the step runs at: each
# trainer run under build/libktrace.so (dev/ktrace.c: CUPTI, loaded with LD_PRELOAD), then
# scripts/ktrace_report.py: the step's GPU busy and idle time, the kernel families, the longest
# idle stretches. For each of $TRACE_MODELS (default "qwen2.5-0.5b:32:1024", our -e name:B:T):
# train_gpt -x 12 -bm 1 -r 0 (as scripts/dev/vs_llmq.sh runs it; $TRACE_ARGS added), then llm.q
# through scripts/bench_llmq.sh where .peers/llmq holds its build; last, every timeline's families
# side by side. Logs and traces in $OUT.
#   TRACE_MODELS="qwen2.5-0.5b:32:1024 qwen2.5-1.5b:32:1024" scripts/dev/trace_step.sh
source "$(dirname "$0")/../gpu_common.sh"
[ -f build/libktrace.so ] || make build/libktrace.so > /dev/null || exit 1
# CUPTI from the CUDA toolkit (the library's run path) or torch's nvidia-* wheels
for d in $(python3 -c "import nvidia; print(' '.join(nvidia.__path__))" 2> /dev/null); do
    for l in "$d"/cu13/lib "$d"/cuda_cupti/lib; do [ -d "$l" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$l; done
done
KT=$PWD/build/libktrace.so
trace() {
    local m name b t lq rc=0
    for m in ${TRACE_MODELS:-qwen2.5-0.5b:32:1024}; do
        IFS=: read -r name b t <<< "$m"
        echo "== train_gpt -e $name -b $b -t $t"
        KTRACE_OUT=$OUT/ktrace_${name}_ours.tsv KTRACE_EXE=train_gpt LD_PRELOAD=$KT timeout 300 \
            ./train_gpt -e "$name" -b "$b" -t "$t" -x 12 -v 0 -s 0 -bm 1 -r 0 ${TRACE_ARGS:-} \
            > "$OUT/ktrace_${name}_ours.log" 2>&1 || { rc=1; tail -5 "$OUT/ktrace_${name}_ours.log"; }
        grep -E "^step +12/" "$OUT/ktrace_${name}_ours.log"
        python3 scripts/ktrace_report.py "$OUT/ktrace_${name}_ours.tsv" --gaps 8 || rc=1
        [ -x .peers/llmq/bin/train ] || { echo "(no .peers/llmq: llm.q not traced)"; continue; }
        lq=${name/llama3/llama-3}
        echo "== llm.q $lq B=$b T=$t"
        KTRACE_OUT=$OUT/ktrace_${name}_llmq.tsv KTRACE_EXE=train LD_PRELOAD=$KT STEPS=12 WARMUP=3 TIMEOUT=240 \
            bash scripts/bench_llmq.sh "$lq" "$b" "$t" > "$OUT/ktrace_${name}_llmq.log" 2>&1 ||
            { rc=1; tail -5 "$OUT/ktrace_${name}_llmq.log"; }
        grep -E "^SUMMARY" "$OUT/ktrace_${name}_llmq.log"
        python3 scripts/ktrace_report.py "$OUT/ktrace_${name}_llmq.tsv" --gaps 8 || rc=1
    done
    echo "== side by side"
    python3 scripts/ktrace_report.py "$OUT"/ktrace_*.tsv || rc=1
    [ $rc -eq 0 ] && echo "OK: traced" || { echo "FAIL: a run or a report"; return 1; }
}
step trace trace
cat "$OUT/trace.log"
finish trace-step
