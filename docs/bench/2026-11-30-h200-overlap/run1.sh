#!/usr/bin/env bash
# run 1 (one H200): the GPU tests of the optimizer's split files; GEMMs and a fused AdamW on two streams (torch,
# overlap.py); the 8B bf16 recipe at the plans strata-plan --budget 76GiB chooses, with the current kernels;
# a kernel trace of the 4096 plan (its idle gaps)
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
D=docs/bench/2026-11-30-h200-overlap; P=docs/bench/2026-11-29-h200-bf16-best-plans
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in optimizer_gpu_test kernels_gpu_test grads_bf16_gpu_test; do
  timeout 200 .devbuild/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
done
timeout 150 python3 $D/overlap.py 2>&1 | tee $OUT/overlap.txt
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 140 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
}
run b76-4096 --seq 4096 --config $P/b76-4096.yaml --steps 8 --warmup 2
run b76-8192 --seq 8192 --config $P/b76-8192.yaml --steps 6 --warmup 2
run b76-16384 --seq 16384 --config $P/b76-16384.yaml --steps 4 --warmup 1
STRATA_KERNEL_TRACE=1 run trace-b76-4096 --seq 4096 --config $P/b76-4096.yaml --steps 3 --warmup 2
grep -iE "idle|gap|busy" $OUT/trace-b76-4096.txt | head -30
date -u
