#!/usr/bin/env bash
# run 3 (one H200): sim_gpu_test with cuDNN's attention workspaces at head dims 80, 96, 160 and 256 against the
# sim's model, and the tiny model with 96- and 256-wide heads under yarn's and dynamic's rope: the sim's schedule
# and peak against the cuda backend's.
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/simt.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
timeout 500 .devbuild/tests/sim_gpu_test > $OUT/sim_gpu_test.log 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/sim_gpu_test.log | tr '\n' ' ')"
grep -E "FAILED|head dim|Failure|Expected|Which is" $OUT/sim_gpu_test.log | head -30
date -u
