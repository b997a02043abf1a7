#!/usr/bin/env bash
# run 11 (4 H200s): strata-train --gpus 4 --budget alone (every rank plans; the layout chosen by the planner in
# strata-train itself) on 8 of the 8B's layers at 1,048,576 tokens, each rank under an H100's budgets, lean recipe,
# beside strata-plan's answer to the same question (attention plan builds printed: a fresh machine compiles)
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
free -g | head -2
export NCCL_NVLS_ENABLE=0
m=/tmp/long-ctx-8L
.devbuild/tools/strata-make-tiny $m --layers 8 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 \
  --max-pos 1048576 --dtype bf16 --tokens 2105344 --seed 1 > $OUT/make.log 2>&1 || { echo "make-tiny failed"; tail -3 $OUT/make.log; }
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"
r="--master-weights none --optimizer-state 8bit --gradients bf16"
.devbuild/tools/strata-plan --model $m --seq 1048576 --gpus 4 $b $r --profile profiles/h200.calibrated.json --json > $OUT/plan.json 2> $OUT/plan.err
echo "strata-plan rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^layout|^fits|^plan:|step time|first step' $OUT/plan.err | cut -c1-300
mkdir -p /tmp/off
STRATA_ATTN_VERBOSE=1 timeout $((585 - ($(date +%s) - t0))) .devbuild/tools/strata-train --model $m --data $m/tokens.bin --seq 1048576 --batch 1 --steps 2 --lr 1e-4 \
  --gpus 4 $b $r --offload-dir /tmp/off --profile profiles/h200.calibrated.json --json > $OUT/train.jsonl 2> $OUT/train.err
echo "strata-train rc=$? $(( $(date +%s) - t0 )) s"
grep -E 'layout|planner:|done:|host tier|error|plans built' $OUT/train.err | cut -c1-300 | head -24; cat $OUT/train.jsonl | cut -c1-600
date -u
