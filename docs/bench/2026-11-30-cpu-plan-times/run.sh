#!/bin/bash
# One 8B plan at 1,048,576 tokens on 4 GPUs with the layout given (sequence parallel 4, ZeRO-3: the layout the whole
# search answers), on the 2-core development machine while a full build and test ran beside it:
# 16.60 s wall, 15.52 s user, 2,009 tokens/s at 62.70 GiB (1m-4gpus-sp4-zero3.plan.txt), the whole search's answer.
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"; r="--master-weights none --optimizer-state 8bit --gradients bf16"
/usr/bin/time -f "%e s wall %U s user" build-cpu/tools/strata-plan \
  --model docs/bench/2026-11-29-cpu-plan-times/llama-3-8b-1m.config.json --seq 1048576 --gpus 4 \
  --sequence-parallel 4 --zero-stage 3 $b $r --profile profiles/h200.calibrated.json --plan-time-limit 300
