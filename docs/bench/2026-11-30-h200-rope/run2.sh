#!/usr/bin/env bash
# run 2 (one H200): gemm_attention_gpu_test with every head dim the cuda backend sends to cuDNN (8-256, D % 8 == 0),
# forward and backward against the cpu reference, and whether cuDNN 9 takes each (the sim assumes it does).
set -uo pipefail
rm -rf .devbuild; tar -xJf .carry/attn.tar.xz; export OUT
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader; date -u
timeout 500 .devbuild/tests/gemm_attention_gpu_test > $OUT/gemm_attention_gpu_test.log 2>&1
echo "rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/gemm_attention_gpu_test.log | tr '\n' ' ')"
grep -E "FAILED|\[attention\] .*D=|\[attention\] [^ ]+: " $OUT/gemm_attention_gpu_test.log | grep -v candidate | head -40
date -u
