#!/usr/bin/env bash
# run 12 (one H200): the GPU tests of the sim's repeated tiles and the arena's node reuse (mlp_tiled runs every tile
# on cuda; the sim's schedule against cuda's), and the AdamW kernel's profile under Nsight Compute (1B shape, the
# bf16 recipe) for the optimizer's bandwidth
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in mlp_tiles_gpu_test sim_gpu_test tiers_gpu_test paging_gpu_test; do
  s=$(date +%s)
  timeout 240 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${N:-none}"
if [ -n "$N" ]; then
  s=$(date +%s)
  timeout 200 $N --kernel-name regex:adamw_any --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis .devbuild/tools/strata-bench --backend cuda --shape Llama-3.2-1B \
    --seq 4096 --mode full --plan gc --steps 2 --warmup 1 --master-weights none --optimizer-state bf16 --gradients bf16 \
    > $OUT/ncu-adamw.txt 2>&1
  echo "ncu rc=$? $(( $(date +%s)-s ))s"
  grep -E "adamw_any|DRAM Throughput|Memory Throughput|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Waves Per|Elapsed Cycles|L2 Hit|Mem Busy|Max Bandwidth" $OUT/ncu-adamw.txt | head -40
fi
date -u
