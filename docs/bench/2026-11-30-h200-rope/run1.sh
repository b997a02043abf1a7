#!/usr/bin/env bash
# run 1 (one H200): the GPU tests of the rope types' kernels (the attention factor on cos and sin, forward and
# backward, against the cpu reference; the golden checkpoints of every rope type against transformers' fp32
# references), the rope kernel under compute-sanitizer, and the tier, paging, packing and sim tests after the sim's
# and the slot store's allocation changes.
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in kernels_gpu_test op_table_gpu_test model_gpu_test tiers_gpu_test paging_gpu_test packing_gpu_test sim_gpu_test; do
  s=$(date +%s)
  timeout 240 .devbuild/tests/$t > $OUT/$t.log 2>&1
  echo "$t rc=$? $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' $OUT/$t.log | head -5
done
grep -E "golden gpu" $OUT/model_gpu_test.log
timeout 120 compute-sanitizer --tool memcheck .devbuild/tests/kernels_gpu_test --gtest_filter='*Rope*' > $OUT/sanitize-rope.log 2>&1
echo "sanitizer rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/sanitize-rope.log | tr '\n' ' ')"
date -u
