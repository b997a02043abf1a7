#!/usr/bin/env bash
# run 16 (one H200): the final build's GPU tests of the tiers and the sim against cuda, after the state file's
# requests stopped using a bounce buffer on the sim (the real file's path unchanged)
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in tiers_gpu_test mlp_tiles_gpu_test sim_gpu_test; do
  s=$(date +%s)
  timeout 150 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
date -u
