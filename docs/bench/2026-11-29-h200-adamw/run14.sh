#!/usr/bin/env bash
# run 14 (one H200): the AdamW kernel with bounded registers (5 or 6 blocks an SM) and an all-resident grid against
# the current one: its GPU tests (bit for bit against the cpu reference), its duration under Nsight Compute (1B shape,
# bf16 recipe, third launch) for each build, then the 8B bf16 step at 4096 (gc) with the per-op GPU times for the
# current build and the faster variant, one after the other
set -uo pipefail
rm -rf .devbuild .basebuild .varB; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 120 .devbuild/tests/kernels_gpu_test --gtest_color=no > $OUT/kernels_gpu_test.log 2>&1; echo "kernels_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/kernels_gpu_test.log | tr '\n' ' ')"
timeout 120 .devbuild/tests/grads_bf16_gpu_test --gtest_color=no > $OUT/grads_bf16_gpu_test.log 2>&1; echo "grads_bf16_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/grads_bf16_gpu_test.log | tr '\n' ' ')"
declare -A dur
for b in base:.basebuild min5:.devbuild min6:.varB; do
  n=${b%%:*}; d=${b#*:}
  timeout 120 ncu --kernel-name regex:adamw_any --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats $d/tools/strata-bench --backend cuda --shape Llama-3.2-1B --seq 4096 --mode full --plan gc --steps 2 \
    --warmup 1 --master-weights none --optimizer-state bf16 --gradients bf16 > $OUT/ncu-$n.txt 2>&1
  dur[$n]=$(grep -E "^\s+Duration" $OUT/ncu-$n.txt | awk '{print $3}' | head -1)
  echo "$n: $(grep -E '^\s+(Duration|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Grid Size)' $OUT/ncu-$n.txt | awk '{print $1"_"$2" "$NF}' | tr '\n' ' ')"
done
best=min5; [ "$(echo "${dur[min6]} < ${dur[min5]}" | bc -l)" = 1 ] && best=min6
bd=.devbuild; [ $best = min6 ] && bd=.varB
echo "best: $best"
for b in base:.basebuild $best:$bd; do
  n=${b%%:*}; d=${b#*:}
  s=$(date +%s)
  STRATA_PROFILE=1 timeout 150 $d/tools/strata-bench --backend cuda --shape Llama-3-8B --seq 4096 --mode full --plan gc --steps 5 \
    --warmup 2 --master-weights none --optimizer-state bf16 --gradients bf16 > $OUT/bench8b-$n.txt 2>&1
  echo "bench $n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/bench8b-$n.txt) | $(grep -iE '^\s*adamw' $OUT/bench8b-$n.txt | head -2 | tr -s ' ' | tr '\n' ' ')"
done
date -u
