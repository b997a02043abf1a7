#!/usr/bin/env bash
# run 7 (one H200): 8-bit moments' encode from the ratio's bits and one reciprocal a block: kernels_gpu_test (bit
# for bit against the cpu reference), then the lean recipe at 1B 4096 gc, the build before (.basebuild: run 4's new)
# and this one alternately, STRATA_PROFILE's AdamW time first
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 120 .devbuild/tests/kernels_gpu_test > $OUT/kernels_gpu_test.txt 2>&1
echo "kernels_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/kernels_gpu_test.txt | tr '\n' ' ')"
R="--master-weights none --optimizer-state 8bit --gradients bf16 --plan gc --shape Llama-3.2-1B --seq 4096"
bench() {  # name, build dir, args...
  local n=$1 d=$2; shift 2; local s=$(date +%s)
  timeout 60 $d/tools/strata-bench --backend cuda --mode full $R "$@" > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s)-s ))s: $(grep -E '^strata-bench: [0-9]' $OUT/$n.txt | tail -1)"
  grep -E "^  (adamw_step) " $OUT/$n.txt
}
for b in base:.basebuild new:.devbuild; do STRATA_PROFILE=1 bench prof-${b%%:*} ${b#*:} --steps 6 --warmup 2; done
i=0
for b in base:.basebuild new:.devbuild base:.basebuild new:.devbuild; do
  i=$((i + 1)); bench lean1b-${b%%:*}-$i ${b#*:} --steps 10 --warmup 2
done
date -u
