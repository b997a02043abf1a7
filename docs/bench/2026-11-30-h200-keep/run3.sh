#!/usr/bin/env bash
# run 3 (one H200): strata-bench's setup for the 8B before and after drawing the random weights' normals in pairs
# (float Box-Muller, Rng::normal_pair): BEFORE = .devbuild's strata-bench (the build of run 1), AFTER = .newbench's.
set -uo pipefail
rm -rf .devbuild .newbench; tar -xJf .carry/devbuild.tar.xz; tar -xJf .carry/newbench.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; nproc; date -u
R="--master-weights none --optimizer-state bf16 --gradients bf16"
for bin in .devbuild/tools/strata-bench .newbench/strata-bench; do
  timeout 250 $bin --backend cuda --shape Llama-3-8B --mode full $R --seq 4096 --plan keep --steps 2 --warmup 1 2>&1 |
    grep -E "^strata-bench: (setup|[0-9])" | sed "s|^|$bin: |"
done
date -u
