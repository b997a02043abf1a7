# the gpu-labelled tests, the sanitizer and the cuda training smoke test (tests | train | sanitize | all)
# On the GPU host: run the gpu-labelled tests and the cuda training smoke test from a build
# directory carried from a build machine (scripts/pack_gpu_build.sh). Logs go to $OUT.
#   scripts/gpu.sh suite DIR [tests|train|sanitize|all]
set -uo pipefail
what=${1:-all}
# (the preamble made the /work/main link the test binaries need)
gpu_line "" name,memory.total,driver_version
if [[ $what == tests || $what == all ]]; then
  for t in "$dir"/tests/*gpu_test; do
    echo "== $t"
    "$t" --gtest_color=no 2>&1 | tee -a "$out/gpu_tests.log" | grep -E "^\[  (PASSED|FAILED)|FAILED|SKIPPED|golden|path|Failure" | head -40
  done
fi
if [[ $what == sanitize || $what == all ]]; then
  # memcheck over every gpu test binary, racecheck/synccheck over the kernel ones (8 minutes at most).
  "$GPU_SH" sanitize "$dir/tests" "$out/sanitize"
  echo "gpu.sh sanitize rc=$?"
fi
if [[ $what == train || $what == all ]]; then
  make_tiny /tmp/tiny >/dev/null
  "$dir/tools/strata-train" --model /tmp/tiny --data /tmp/tiny/tokens.bin --seq 128 --batch 8 --steps 100 \
    --lr 3e-3 --backend cuda 2>&1 | tee "$out/train_tiny_cuda.log" | awk 'NR<4 || /done|error|device/ || /step +(1|50|100)\//'
fi
