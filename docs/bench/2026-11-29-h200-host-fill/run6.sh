#!/usr/bin/env bash
# run 6 (one H200): the final strata-calibrate: --quick (the plan-build probe) and --host-fill on a 1-GPU machine
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 200 .devbuild/tools/strata-calibrate --quick --out $OUT/cal.json > $OUT/cal.log 2>&1; echo "calibrate rc=$?"
grep -E "first call|plans built|pinned" $OUT/cal.log | cut -c1-160
timeout 120 .devbuild/tools/strata-calibrate --host-fill > $OUT/fill.txt 2>&1; echo "host-fill rc=$?"; cat $OUT/fill.txt
date -u
