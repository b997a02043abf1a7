#!/usr/bin/env bash
# run 5 (2 H200s): the multi-rank GPU tests on the final AdamW and sum-of-squares kernels (ZeRO's norm parts and
# every stage's updates against stage 0)
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
export NCCL_NVLS_ENABLE=0
for t in zero_gpu_test comm_gpu_test seq_parallel_gpu_test; do
  s=$(date +%s); timeout 90 .devbuild/tests/$t --gtest_color=no > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(( $(date +%s) - s )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.txt | tr '\n' ' ')"
done
date -u
