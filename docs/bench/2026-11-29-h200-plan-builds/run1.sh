#!/usr/bin/env bash
# run 1 (one H200): cuDNN's attention plan builds, per shape (strata-calibrate --quick, STRATA_ATTN_VERBOSE=1), then
# the first step of one 8B-shaped layer at 262,144 and at 1,048,576 tokens against the forecast with the measured
# attention_plan_build_s in the H200 profile
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
STRATA_ATTN_VERBOSE=1 timeout 200 .devbuild/tools/strata-calibrate --quick --out $OUT/cal.json > $OUT/cal.log 2> $OUT/cal.err
echo "calibrate rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "attention|plans built" $OUT/cal.log | cut -c1-200
grep -E "plans built" $OUT/cal.err | cut -c1-200
python3 - profiles/h200.calibrated.json $OUT/cal.json $OUT/h200-build.json <<'PY'
import json, sys
base, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
base["attention_plan_build_s"] = new.get("attention_plan_build_s", 0)
json.dump(base, open(sys.argv[3], "w"), indent=2)
print("attention_plan_build_s", base["attention_plan_build_s"])
PY
r="--master-weights none --optimizer-state bf16 --gradients bf16"
for seq in 262144 1048576; do
  m=/tmp/l1-$seq
  .devbuild/tools/strata-make-tiny $m --layers 1 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 \
    --max-pos $seq --dtype bf16 --tokens $((seq + 4096)) --seed 1 > $OUT/make$seq.log 2>&1 || tail -3 $OUT/make$seq.log
  .devbuild/tools/strata-plan --model $m --seq $seq --budget 130GiB $r --profile $OUT/h200-build.json --plan-time-limit 30 \
    --write-config $OUT/l1-$seq.yaml > $OUT/plan$seq.txt 2>&1
  grep -E "^planner|step time|first step|setup|tuning" $OUT/plan$seq.txt | cut -c1-300
  echo "planned $seq at $(( $(date +%s) - t0 )) s"
  STRATA_ATTN_VERBOSE=1 timeout 300 .devbuild/tools/strata-train --config $OUT/l1-$seq.yaml --model $m --data $m/tokens.bin \
    --steps 2 --json > $OUT/train$seq.jsonl 2> $OUT/train$seq.err
  echo "train $seq rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "plans built|tuned at" $OUT/train$seq.err | cut -c1-200
  python3 -c "
import json
for l in open('$OUT/train$seq.jsonl'):
  if l.startswith('{'):
    s=json.loads(l); print({k:s.get(k) for k in ('step','step_s','setup_s','forward_s','backward_s','peak_device_bytes')})"
done
date -u
