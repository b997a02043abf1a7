#!/usr/bin/env bash
# On the GPU host: run the gpu-labelled tests and the cuda training smoke test from a build
# directory carried from a build machine (scripts/pack_gpu_build.sh). Logs go to $OUT.
#   scripts/gpu_session.sh DIR [tests|train|sanitize|all]
set -uo pipefail
dir=${1:-.devbuild}
what=${2:-all}
out=${OUT:-/tmp/strata-out}
mkdir -p "$out"
# Test binaries have the build machine's tests/ path compiled in; make it resolve here.
mkdir -p /work && [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [[ $what == tests || $what == all ]]; then
  for t in "$dir"/tests/*gpu_test; do
    echo "== $t"
    "$t" --gtest_color=no 2>&1 | tee -a "$out/gpu_tests.log" | grep -E "^\[  (PASSED|FAILED)|FAILED|SKIPPED|golden|path|Failure" | head -40
  done
fi
if [[ $what == sanitize || $what == all ]]; then
  # memcheck over every gpu test binary, racecheck/synccheck over the kernel ones (8 minutes at most).
  "$(dirname "$0")/gpu_sanitize.sh" "$dir/tests" "$out/sanitize"
  echo "gpu_sanitize rc=$?"
fi
if [[ $what == train || $what == all ]]; then
  "$dir/tools/strata-make-tiny" /tmp/tiny >/dev/null
  "$dir/tools/strata-train" --model /tmp/tiny --data /tmp/tiny/tokens.bin --seq 128 --batch 8 --steps 100 \
    --lr 3e-3 --backend cuda 2>&1 | tee "$out/train_tiny_cuda.log" | awk 'NR<4 || /done|error|device/ || /step +(1|50|100)\//'
fi
