#!/usr/bin/env bash
# run 1 (one H200): the 8B at Hugging Face's bf16 recipe under an 80 GB H100's 76 GiB arena, planned by
# `strata-plan --budget 76GiB --grad-accum K ... --write-config b76-N-kK.yaml` (the configs beside this script): one
# micro-batch a step against K micro-batches summed on the device before one update, alternately per length.
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
D=docs/bench/2026-11-30-h200-accum
R="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name, args...
  local n=$1; shift; local s=$(date +%s)
  timeout 200 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^\{' $OUT/$n.txt | tail -1 | grep -oE '"(grad_accum|step_s|tokens_per_s|peak_arena_bytes|mfu)": [0-9.]+' | tr '\n' ' ')"
  grep -E "^strata-bench" $OUT/$n.txt | tail -2
}
run b76-4096-k1 --seq 4096 --config $D/b76-4096-k1.yaml --steps 8 --warmup 2
run b76-4096-k8 --seq 4096 --config $D/b76-4096-k8.yaml --steps 4 --warmup 1
run b76-8192-k1 --seq 8192 --config $D/b76-8192-k1.yaml --steps 6 --warmup 2
run b76-8192-k4 --seq 8192 --config $D/b76-8192-k4.yaml --steps 3 --warmup 1
run b76-16384-k1 --seq 16384 --config $D/b76-16384-k1.yaml --steps 4 --warmup 1
run b76-16384-k2 --seq 16384 --config $D/b76-16384-k2.yaml --steps 3 --warmup 1
date -u
