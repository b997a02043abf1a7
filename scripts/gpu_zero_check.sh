#!/usr/bin/env bash
# ZeRO-1 on 2 GPUs (issue 18): strata-train --gpus 2 with zero_stage 0 and 1 on the same data; the losses
# agree (the update is the same arithmetic on the owner, the weights broadcast exactly; bit for bit on
# cpu, within the cuda backend's run-to-run spread on GPUs: its first step tunes GEMM and attention
# plans, so two stage-0 runs differ by ~1e-5 too); peaks a rank drop; both saved models load.
#   scripts/gpu_zero_check.sh DIR      (DIR/tools: strata-train, strata-make-tiny)
set -u
d=${1:-.devbuild}; out=${OUT:-/tmp/strata-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
m=/tmp/zero-small
"$d/tools/strata-make-tiny" $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 200000 --max-pos 1024 > /dev/null
for z in 0 1; do
  "$d/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --gpus 2 \
    --zero-stage $z --json --save "$out/zero$z-model" > "$out/zero$z.jsonl" 2> "$out/zero$z.log"
  echo "zero_stage $z: exit $?"
done
python3 - "$out" <<'PY'
import json, sys, hashlib
out = sys.argv[1]
def rows(z):
    return [json.loads(l) for l in open(f"{out}/zero{z}.jsonl") if l.startswith('{"step"')]
a, b = rows(0), rows(1)
same = [x["loss"] == y["loss"] for x, y in zip(a, b)]
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
print(f"zero 0 vs 1: {len(a)}/{len(b)} steps, losses equal at {sum(same)} steps, worst relative difference {worst:.2e}, "
      f"final {a[-1]['loss']:.6f} / {b[-1]['loss']:.6f}, "
      f"peak a rank {a[-1]['peak_device_bytes']} / {b[-1]['peak_device_bytes']}")
h = [hashlib.sha256(open(f"{out}/zero{z}-model/model.safetensors", "rb").read()).hexdigest()[:16] for z in (0, 1)]
print("saved model.safetensors sha256:", h, "identical" if h[0] == h[1] else "DIFFERENT")
PY
