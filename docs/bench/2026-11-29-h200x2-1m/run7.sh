#!/usr/bin/env bash
# run 7 (one H200): attention's sustained rates up to 1,048,576 tokens (strata-calibrate --long-attention), the profile
# points the 1M forecasts need
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
timeout 560 scripts/gpu.sh long_rates .devbuild 1048576 2>&1 | tail -15 | cut -c1-600
echo "rc=$?"; date -u
