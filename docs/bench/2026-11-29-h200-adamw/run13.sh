#!/usr/bin/env bash
# run 13 (one H200): where the AdamW kernel's warps wait (Nsight Compute's warp state, scheduler and instruction
# statistics), 1B shape, the bf16 recipe, the third launch
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 240 ncu --kernel-name regex:adamw_any --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy \
  .devbuild/tools/strata-bench --backend cuda --shape Llama-3.2-1B --seq 4096 --mode full --plan gc --steps 2 --warmup 1 \
  --master-weights none --optimizer-state bf16 --gradients bf16 > $OUT/ncu-adamw-stalls.txt 2>&1
echo "ncu rc=$?"
sed -n '/adamw_any_kernel/,$p' $OUT/ncu-adamw-stalls.txt | grep -vE "^\s*$|----" | cut -c1-150 | head -90
date -u
