#!/usr/bin/env bash
# run 2 (one H200): the AdamW kernel at 8 elements a thread (fp32 and bf16 moments) and the bf16 gradients' sum of
# squares at 16-byte loads with the blocks' sums added by the last block's threads (new, .devbuild) against the
# build before (base, .basebuild): GPU tests, per-op times (STRATA_PROFILE) on the 1B and 8B shapes, and the 8B step
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in kernels_gpu_test grads_bf16_gpu_test; do
  timeout 120 .devbuild/tests/$t > $OUT/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.txt | tr '\n' ' ')"
done
R="--master-weights none --optimizer-state bf16 --gradients bf16"
bench() {  # name, build dir, args...
  local n=$1 d=$2; shift 2; local s=$(date +%s)
  timeout 150 $d/tools/strata-bench --backend cuda --mode full "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
  grep -iE "adamw|grad_norm" $OUT/$n.txt | head -4
}
for b in base:.basebuild new:.devbuild; do
  STRATA_PROFILE=1 bench prof1b-${b%%:*} ${b#*:} --shape Llama-3.2-1B --seq 4096 --plan gc --steps 6 --warmup 2 $R
done
for b in base:.basebuild new:.devbuild; do
  bench gc8b-${b%%:*} ${b#*:} --shape Llama-3-8B --seq 4096 --plan gc --steps 10 --warmup 2 $R
done
bench b76-4096-new .devbuild --shape Llama-3-8B --seq 4096 --config docs/bench/2026-11-29-h200-bf16-best-plans/b76-4096.yaml --steps 10 --warmup 2 $R
date -u
