#!/usr/bin/env bash
# run 10 (one H200): where the first step's extra goes at 1,048,576 tokens: one 8B-shaped layer, 2 steps, planned under
# 130 GiB, with attention's first-call tuning on (default) and off (STRATA_ATTN_TUNE=0)
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
m=/tmp/l1
.devbuild/tools/strata-make-tiny $m --layers 1 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 \
  --max-pos 1048576 --dtype bf16 --tokens 1052672 --seed 1 > $OUT/make.log 2>&1 || tail -3 $OUT/make.log
echo "made $(( $(date +%s) - t0 )) s"
r="--master-weights none --optimizer-state bf16 --gradients bf16"
.devbuild/tools/strata-plan --model $m --seq 1048576 --budget 130GiB $r --profile profiles/h200.calibrated.json --plan-time-limit 30 --write-config $OUT/l1.yaml --json > $OUT/plan.json 2> $OUT/plan.err
grep -E '^fits|^plan:|step time|first step' $OUT/plan.err | cut -c1-300
for tune in 1 0; do
  STRATA_ATTN_TUNE=$tune timeout 250 .devbuild/tools/strata-train --config $OUT/l1.yaml --model $m --data $m/tokens.bin --steps 2 --json > $OUT/train$tune.jsonl 2> $OUT/train$tune.err
  echo "tune=$tune rc=$? at $(( $(date +%s) - t0 )) s"
  python3 -c "
import json,sys
for l in open('$OUT/train$tune.jsonl'):
  if l.startswith('{'):
    s=json.loads(l); print({k:s.get(k) for k in ('step','step_s','setup_s','forward_s','backward_s','optimizer_s','peak_device_bytes')})"
done
date -u
