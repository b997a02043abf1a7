#!/usr/bin/env bash
# run 4: the fp8 cast test with the given-scale replay, the op table, sim vs cuda, on the final build
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in fp8_gpu_test op_table_gpu_test sim_gpu_test; do
  s=$(date +%s); timeout 200 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
grep -E "Failure|given scale|first at" $OUT/fp8_gpu_test.log | head -5
date -u
