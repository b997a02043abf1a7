#!/usr/bin/env bash
# run 6 (2 H200s): the multi-rank GPU tests, then 8 of the 8B's layers at 1,048,576 tokens laid out over both GPUs by the
# planner under each rank's H100 budgets (76 / 110 / 55 GiB), lean recipe, forecast beside
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u; free -g | head -2; df -h /tmp | tail -1; nproc
export NCCL_NVLS_ENABLE=0
for t in comm_gpu_test zero_gpu_test seq_parallel_gpu_test; do
  s=$(date +%s); timeout 75 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; echo "$t rc=$? $(( $(date +%s) - s )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
date -u
GPUS=2 LAYERS=8 SEQ=1048576 RECIPE="--master-weights none --optimizer-state 8bit --gradients bf16" TRAIN_TIMEOUT=420 \
  timeout $((590 - ($(date +%s) - t0))) scripts/gpu.sh long_ctx .devbuild a 2>&1 | tail -4 | cut -c1-3000
echo "long_ctx rc=$?"; date -u
ls $OUT
