#!/usr/bin/env bash
# run 6 (one H200, a fresh machine): strata-calibrate --host-fill --out on a copy of the H200 profile, so the
# machine's first-touch pinning rate goes into pinned_first_touch_gbps; the profile comes back under $OUT
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt; date -u; free -g | head -2
cp profiles/h200.calibrated.json $OUT/h200.calibrated.json
timeout 200 .devbuild/tools/strata-calibrate --host-fill --out $OUT/h200.calibrated.json > $OUT/host-fill.txt 2>&1
echo "host-fill rc=$?"; tail -6 $OUT/host-fill.txt; grep pinned_first_touch $OUT/h200.calibrated.json
date -u
