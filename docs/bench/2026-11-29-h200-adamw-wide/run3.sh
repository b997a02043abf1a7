#!/usr/bin/env bash
# run 3 (one H200): every recipe's AdamW through the list kernels (fp32 masters with f32 moments now at 8 elements a
# thread too; 8-bit moments at 64 registers): GPU tests (kernels under compute-sanitizer), then per-op times
# (STRATA_PROFILE) of the 1B at 4096 with the default fp32 recipe and the lean one (none / 8bit / bf16), base and new
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in kernels_gpu_test grads_bf16_gpu_test model_gpu_test tiers_gpu_test op_table_gpu_test sim_gpu_test; do
  s=$(date +%s); timeout 150 .devbuild/tests/$t > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.txt | tr '\n' ' ')"
done
s=$(date +%s); timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck .devbuild/tests/kernels_gpu_test \
  --gtest_filter='*AdamW*:*SumSquares*' > $OUT/sanitize-kernels.txt 2>&1
echo "memcheck rc=$? $(( $(date +%s)-s ))s $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/sanitize-kernels.txt | tr '\n' ' ')"
bench() {  # name, build dir, args...
  local n=$1 d=$2; shift 2; local s=$(date +%s)
  STRATA_PROFILE=1 timeout 100 $d/tools/strata-bench --backend cuda --mode full --shape Llama-3.2-1B --seq 4096 \
    --plan gc --steps 6 --warmup 2 "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
  grep -E "^  (adamw_step|grad_norm_sq) " $OUT/$n.txt
}
for b in base:.basebuild new:.devbuild; do bench fp32-${b%%:*} ${b#*:}; done
for b in base:.basebuild new:.devbuild; do
  bench lean-${b%%:*} ${b#*:} --master-weights none --optimizer-state 8bit --gradients bf16
done
date -u
