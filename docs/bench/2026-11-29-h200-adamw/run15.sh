#!/usr/bin/env bash
# run 15 (one H200): the 8B bf16 step at 4096 (gc) without the per-op profiler, the current AdamW kernel (base)
# against bounded registers and an all-resident grid (min5), alternated: base, min5, base, min5
set -uo pipefail
rm -rf .devbuild .basebuild .varB; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for b in base:.basebuild min5:.devbuild base:.basebuild min5:.devbuild; do
  n=${b%%:*}; d=${b#*:}
  s=$(date +%s)
  timeout 130 $d/tools/strata-bench --backend cuda --shape Llama-3-8B --seq 4096 --mode full --plan gc --steps 10 \
    --warmup 2 --master-weights none --optimizer-state bf16 --gradients bf16 >> $OUT/bench8b-$n.txt 2>&1
  echo "bench $n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/bench8b-$n.txt | tail -1)"
done
date -u
