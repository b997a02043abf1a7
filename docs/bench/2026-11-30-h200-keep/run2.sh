#!/usr/bin/env bash
# run 2 (one H200): the 8B at Hugging Face's bf16 recipe, nothing recomputed, 16,384 tokens a step as rows of 4096
# (batch 4) and of 8192 (batch 2): the same GEMMs as one row of 16384, a quarter and a half of its attention.
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 280 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
}
run keep-4096x4 --seq 4096 --batch 4 --plan keep --steps 6 --warmup 2
run keep-8192x2 --seq 8192 --batch 2 --plan keep --steps 6 --warmup 2
date -u
