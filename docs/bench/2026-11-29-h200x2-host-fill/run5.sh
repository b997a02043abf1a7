#!/usr/bin/env bash
# run 5 (2 H200s): how pinning slows as the host fills (strata-calibrate --host-fill: 8 GiB pinned reservations, each
# held, until the host runs low): one process alone; two at once (one a GPU, as two ranks); one alone again with
# 40 GB of a file in the page cache
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
grep -E "MemTotal|MemAvailable|^Cached" /proc/meminfo; nproc
f=.devbuild/tools/strata-calibrate
CUDA_VISIBLE_DEVICES=0 timeout 150 $f --host-fill > $OUT/alone.txt 2>&1; echo "alone rc=$? at $(( $(date +%s) - t0 )) s"
tail -4 $OUT/alone.txt
sleep 3
CUDA_VISIBLE_DEVICES=0 timeout 150 $f --host-fill > $OUT/two0.txt 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 150 $f --host-fill > $OUT/two1.txt 2>&1 &
wait; echo "two at $(( $(date +%s) - t0 )) s"
tail -2 $OUT/two0.txt; tail -2 $OUT/two1.txt
dd if=/dev/zero of=/tmp/cachefill bs=16M count=2400 status=none; echo "cache filled at $(( $(date +%s) - t0 )) s"
grep -E "MemAvailable|^Cached" /proc/meminfo
CUDA_VISIBLE_DEVICES=0 timeout 150 $f --host-fill > $OUT/cached.txt 2>&1; echo "cached rc=$? at $(( $(date +%s) - t0 )) s"
tail -4 $OUT/cached.txt
rm -f /tmp/cachefill
date -u
