#!/usr/bin/env bash
# run 4 (one H200): the build with STRATA_PROFILE keeping each step's synchronisation and the kernel trace counting
# only finished kernels: model_gpu_test, the trace of the 1B and 8B 4096 steps (their gaps), a profiled 1B step
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
P=docs/bench/2026-11-29-h200-bf16-best-plans
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 120 .devbuild/tests/model_gpu_test > $OUT/model_gpu_test.log 2>&1
echo "model_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/model_gpu_test.log | tr '\n' ' ')"
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 110 .devbuild/tools/strata-bench --backend cuda --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
}
STRATA_KERNEL_TRACE=1 run trace-1b-gc-4096 --shape Llama-3.2-1B --seq 4096 --plan gc --steps 3 --warmup 2
grep -E "timeline|gap |not counted" $OUT/trace-1b-gc-4096.txt | head -8
STRATA_PROFILE=1 run profile-1b-gc-4096 --shape Llama-3.2-1B --seq 4096 --plan gc --steps 4 --warmup 2
grep -iE "adamw|grad_norm|linear" $OUT/profile-1b-gc-4096.txt | head -6
STRATA_KERNEL_TRACE=1 run trace-8b-b76-4096 --shape Llama-3-8B --seq 4096 --config $P/b76-4096.yaml --steps 3 --warmup 2
grep -E "timeline|gap |not counted" $OUT/trace-8b-b76-4096.txt | head -8
date -u
