#!/usr/bin/env bash
# run 4 (one H200): the GPU tests that start from random weights, after init_random drew its normals in pairs
# (other weights for the same seed, the same distribution).
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
for t in model_gpu_test grads_bf16_gpu_test fp8_gpu_test mlp_tiles_gpu_test packing_gpu_test lm_head_grad_gpu_test tiers_gpu_test paging_gpu_test; do
  s=$(date +%s)
  timeout 90 .devbuild/tests/$t > $OUT/$t.log 2>&1
  echo "$t rc=$? $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure' $OUT/$t.log | head -4
done
date -u
