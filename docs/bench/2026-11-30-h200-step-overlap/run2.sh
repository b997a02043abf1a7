#!/usr/bin/env bash
# run 2 (one H200): a step that returns once its loss and norm are read (its update still running; the batch uploaded
# after the graph is recorded) against the build before it (.basebuild), alternately in one command; the GPU tests
# of the trainer's paths; a kernel trace of the new build (its gaps); GEMMs separate against fused (gemm_fusion.py)
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
D=docs/bench/2026-11-30-h200-step-overlap; P=docs/bench/2026-11-29-h200-bf16-best-plans
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in model_gpu_test packing_gpu_test tiers_gpu_test paging_gpu_test sim_gpu_test; do
  timeout 240 .devbuild/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
done
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, build, args...
  local n=$1 b=$2; shift 2; local s=$(date +%s)
  timeout 150 $b/tools/strata-bench --backend cuda --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
}
for i in 1 2; do
  run 1b-gc-4096-base$i .basebuild --shape Llama-3.2-1B --seq 4096 --plan gc --steps 12 --warmup 3
  run 1b-gc-4096-new$i .devbuild --shape Llama-3.2-1B --seq 4096 --plan gc --steps 12 --warmup 3
done
run 8b-b76-4096-base .basebuild --shape Llama-3-8B --seq 4096 --config $P/b76-4096.yaml --steps 8 --warmup 2
run 8b-b76-4096-new .devbuild --shape Llama-3-8B --seq 4096 --config $P/b76-4096.yaml --steps 8 --warmup 2
STRATA_KERNEL_TRACE=1 run trace-1b-gc-4096-new .devbuild --shape Llama-3.2-1B --seq 4096 --plan gc --steps 3 --warmup 2
grep -E "timeline|gap " $OUT/trace-1b-gc-4096-new.txt | head -8
timeout 120 python3 docs/bench/2026-11-30-h200-overlap/gemm_fusion.py 2>&1 | tee $OUT/gemm_fusion.txt
date -u
