#!/usr/bin/env bash
# run 1 (one H200): the 8B bf16 recipe at the plans strata-plan --budget 76GiB chooses (an 80 GB H100's arena) at
# 4096, 8192 and 16384 tokens, beside gradient checkpointing at 4096, in one command
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
D=docs/bench/2026-11-29-h200-bf16-best-plans
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 140 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
}
run gc-4096 --seq 4096 --plan gc --steps 8 --warmup 2
run b76-4096 --seq 4096 --config $D/b76-4096.yaml --steps 8 --warmup 2
run b76-8192 --seq 8192 --config $D/b76-8192.yaml --steps 6 --warmup 2
run b76-16384 --seq 16384 --config $D/b76-16384.yaml --steps 4 --warmup 1
date -u
