#!/usr/bin/env bash
# run 5: the 8B bf16 step at 65536 tokens, gc, profiled per op and per kernel
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
export STRATA_CUPTI_LIB=$(ls "$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])')"/*/lib/libcupti.so* 2>/dev/null | head -1)
STRATA_PROFILE=1 STRATA_KERNEL_TRACE=1 timeout 200 .devbuild/tools/strata-bench --backend cuda --shape Llama-3-8B --seq 65536 --mode full --plan gc --steps 1 --warmup 1 --master-weights none --optimizer-state bf16 --gradients bf16 > $OUT/trace-bf16-65536.txt 2>&1
echo "rc=$?"; grep -E "setup|kernel trace:|timeline|tok/s" $OUT/trace-bf16-65536.txt | cut -c1-200; date -u
