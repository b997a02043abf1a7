# run-to-run spread of strata-train's losses on the cuda backend (the same 10 steps twice)
# On the GPU host: the run-to-run spread of strata-train's losses on the cuda backend (the yardstick
# for scripts/gpu.sh resume_check): the same 10 steps twice.
#   scripts/gpu.sh run_spread DIR [EXTRA strata-train flags]
set -u
m=/tmp/resume-model
[[ -d $m ]] || make_tiny $m --layers 4 --hidden 256 --heads 4 --kv-heads 2 --intermediate 512 \
  --vocab 1000 --tokens 200000 >/dev/null
for i in 1 2; do
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --backend cuda --seq 256 --batch 4 --lr 3e-3 --json \
    --steps 10 "$@" 2>/dev/null > /tmp/spread$i.jsonl
done
python3 - <<'PY'
import json
a, b = ([json.loads(l)["loss"] for l in open(f"/tmp/spread{i}.jsonl")] for i in (1, 2))
print("run-to-run relative loss difference per step:", " ".join("%.1e" % (abs(x - y) / abs(x)) for x, y in zip(a, b)))
PY
