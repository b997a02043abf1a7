#!/usr/bin/env bash
# run 3 (one H200): strata-calibrate --quick with the warm plan-build probe, gemm_attention_gpu_test, and first steps against
# the forecast with the calibrated attention_plan_build_s / attention_stand_in_build_s and first_step_tuning_s 0.6:
# one 8B-shaped layer at 262,144 tokens and a 1B-shaped model at 4096 (the driver's kernel cache warm)
set -uo pipefail
t0=$(date +%s)
rm -rf .devbuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
STRATA_ATTN_VERBOSE=1 timeout 200 .devbuild/tools/strata-calibrate --quick --out $OUT/cal.json > $OUT/cal.log 2> $OUT/cal.err
echo "calibrate rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "first call|plans built" $OUT/cal.log | cut -c1-200
grep -E "plans built" $OUT/cal.err | cut -c1-200
python3 - profiles/h200.calibrated.json $OUT/cal.json $OUT/h200-build.json <<'PY'
import json, sys
base, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("attention_plan_build_s", "attention_stand_in_build_s"):
    base[k] = new.get(k, 0)
    print(k, base[k])
base["first_step_tuning_s"] = 0.6
json.dump(base, open(sys.argv[3], "w"), indent=2)
PY
r="--master-weights none --optimizer-state bf16 --gradients bf16"
run() {  # name seq steps env... -- make-tiny args
  local name=$1 seq=$2 steps=$3; shift 3
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local m=/tmp/$name
  [ -d $m ] || .devbuild/tools/strata-make-tiny $m "$@" --max-pos $seq --dtype bf16 --tokens $((seq * (steps + 1))) --seed 1 > $OUT/make-$name.log 2>&1 || tail -3 $OUT/make-$name.log
  .devbuild/tools/strata-plan --model $m --seq $seq --budget 130GiB $r --profile $OUT/h200-build.json --plan-time-limit 30 \
    --write-config $OUT/$name.yaml > $OUT/plan-$name.txt 2>&1
  grep -E "^planner|step time|first step" $OUT/plan-$name.txt | cut -c1-330
  env "${envs[@]}" STRATA_ATTN_VERBOSE=1 timeout 200 .devbuild/tools/strata-train --config $OUT/$name.yaml --model $m --data $m/tokens.bin \
    --steps $steps --json > $OUT/train-$name-${envs[0]%%=*}.jsonl 2> $OUT/train-$name-${envs[0]%%=*}.err
  echo "train $name ${envs[*]} rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "plans built" $OUT/train-$name-${envs[0]%%=*}.err | cut -c1-200
  python3 -c "
import json
for l in open('$OUT/train-$name-${envs[0]%%=*}.jsonl'):
  if l.startswith('{'):
    s=json.loads(l); print({k:s.get(k) for k in ('step','step_s','setup_s','forward_s','backward_s','peak_device_bytes')})"
}
l8b="--layers 1 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256"
run l1-262k 262144 2 X=1 -- $l8b
run l1b-4096 4096 3 X=1 -- --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256
timeout 200 .devbuild/tests/gemm_attention_gpu_test > $OUT/gemm_attention_gpu_test.log 2>&1; echo "gemm_attention_gpu_test rc=$?"; tail -3 $OUT/gemm_attention_gpu_test.log
date -u
