#!/usr/bin/env bash
# run 1: owed gpu tests + fp8/bf16 kernel profile at 8B 16384 gc
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in tiers_gpu_test transfer_gpu_test paging_gpu_test sim_gpu_test op_table_gpu_test fp8_gpu_test; do
  s=$(date +%s)
  timeout 200 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
export STRATA_CUPTI_LIB=$(ls "$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])')"/*/lib/libcupti.so* 2>/dev/null | head -1)
for p in fp8 bf16; do
  extra=(); [ $p = fp8 ] && extra=(--fp8)
  s=$(date +%s)
  STRATA_PROFILE=1 STRATA_KERNEL_TRACE=1 timeout 240 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state bf16 --gradients bf16 "${extra[@]}" > $OUT/prof-$p.txt 2>&1
  echo "prof $p rc=$? $(( $(date +%s)-s ))s"; tail -1 $OUT/prof-$p.txt | cut -c1-300
done
