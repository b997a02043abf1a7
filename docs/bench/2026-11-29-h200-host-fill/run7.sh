#!/usr/bin/env bash
# run 7 (one H200): the final strata-calibrate build: --quick --adamw (the host-side measurements now in
# tools/calibrate_host.cpp) and --host-fill
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 240 .devbuild/tools/strata-calibrate --quick --adamw --out $OUT/cal.json > $OUT/cal.log 2>&1; echo "calibrate rc=$?"
grep -E "plans built|pinned|AdamW|host AdamW|streamed|faster" $OUT/cal.log | cut -c1-160
timeout 100 .devbuild/tools/strata-calibrate --host-fill > $OUT/fill.txt 2>&1; echo "host-fill rc=$?"; tail -3 $OUT/fill.txt
date -u
