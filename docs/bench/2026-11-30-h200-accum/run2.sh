#!/usr/bin/env bash
# run 2 (one H200): sim_gpu_test (its micro-batch cases: every arena event of K micro-batches and one update equal to
# the sim's), then the 8B at 4096 under 76 GiB with 1, 8 and 16 micro-batches a step, alternately, in one command
# (the configs beside this script, as run1.sh's).
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
.devbuild/tests/sim_gpu_test > $OUT/sim_gpu_test.txt 2>&1; echo "sim_gpu_test rc=$?"
grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |x[23]" $OUT/sim_gpu_test.txt | head -40
D=docs/bench/2026-11-30-h200-accum
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 200 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^\{' $OUT/$n.txt | tail -1 | grep -oE '"(grad_accum|step_s|tokens_per_s|peak_arena_bytes|mfu)": [0-9.]+' | tr '\n' ' ')"
}
run run2-4096-k1 --seq 4096 --config $D/b76-4096-k1.yaml --steps 8 --warmup 2
run run2-4096-k8 --seq 4096 --config $D/b76-4096-k8.yaml --steps 4 --warmup 1
run run2-4096-k16 --seq 4096 --config $D/b76-4096-k16.yaml --steps 3 --warmup 1
date -u
