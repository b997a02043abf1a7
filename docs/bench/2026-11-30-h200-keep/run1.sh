#!/usr/bin/env bash
# run 1 (one H200): the 8B at Hugging Face's bf16 recipe with nothing recomputed (keep everything, which the H200's
# 137 GiB arena holds up to 16384 tokens): the MFU strata's step reaches when no plan costs it anything.
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 280 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
  grep -E "MFU|mfu|peak" $OUT/$n.txt | tail -3
}
run keep-8192 --seq 8192 --plan keep --steps 6 --warmup 2
run keep-16384 --seq 16384 --plan keep --steps 4 --warmup 1
date -u
