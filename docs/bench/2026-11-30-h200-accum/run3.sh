#!/usr/bin/env bash
# run 3 (one H200): after the partial micro-batches stopped forming the gradient norm: the optimizer's, the bf16
# gradients', the trainer's (micro-batches against one batch) and the sim's GPU tests, then the 8B at 4096 under
# 76 GiB with 1, 16 and 8 micro-batches a step in one command (the configs beside this script, as run1.sh's).
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
for t in optimizer_gpu_test grads_bf16_gpu_test model_gpu_test; do
  .devbuild/tests/$t > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.txt | tr '\n' ' ')"
  grep -E "^\[  FAILED" $OUT/$t.txt | head -5
done
.devbuild/tests/sim_gpu_test --gtest_filter=-*AttentionWorkspace* > $OUT/sim_gpu_test.txt 2>&1; echo "sim_gpu_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |x[23]" $OUT/sim_gpu_test.txt | head -12
D=docs/bench/2026-11-30-h200-accum
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 200 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^\{' $OUT/$n.txt | tail -1 | grep -oE '"(grad_accum|step_s|tokens_per_s|peak_arena_bytes|mfu)": [0-9.]+' | tr '\n' ' ')"
}
run run3-4096-k1 --seq 4096 --config $D/b76-4096-k1.yaml --steps 8 --warmup 2
run run3-4096-k16 --seq 4096 --config $D/b76-4096-k16.yaml --steps 3 --warmup 1
run run3-4096-k8 --seq 4096 --config $D/b76-4096-k8.yaml --steps 4 --warmup 1
date -u
