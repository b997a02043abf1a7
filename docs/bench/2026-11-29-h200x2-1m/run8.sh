#!/usr/bin/env bash
# run 8 (2 H200s): 4 of the 8B's layers at 1,048,576 tokens laid out over both GPUs by the planner under each rank's H100
# budgets, lean recipe, 2 steps (the first with its setup, then a warm one), the SM clocks beside
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv,noheader -lms 5000 > $OUT/clocks.csv &
GPUS=2 LAYERS=4 STEPS=2 SEQ=1048576 RECIPE="--master-weights none --optimizer-state 8bit --gradients bf16" TRAIN_TIMEOUT=500 \
  timeout $((590 - ($(date +%s) - t0))) scripts/gpu.sh long_ctx .devbuild a 2>&1 | tail -3 | cut -c1-2000
echo "long_ctx rc=$?"; date -u
kill %1
