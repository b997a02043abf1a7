# checkpoint and resume through strata-train on the cuda backend against a straight run
# On the GPU host: checkpoints and resume through strata-train on the cuda backend (split fp32
# masters, device moments): 10 steps straight against 5 steps, a checkpoint, and a resumed run to 10.
#   scripts/gpu.sh resume_check DIR [EXTRA strata-train flags, e.g. --optimizer-state 8bit]
set -u
m=/tmp/resume-model
make_tiny $m --layers 4 --hidden 256 --heads 4 --kv-heads 2 --intermediate 512 --vocab 1000 \
  --tokens 200000 >/dev/null
train() { "$dir/tools/strata-train" --model $m --data $m/tokens.bin --backend cuda --seq 256 --batch 4 --lr 3e-3 --json "$@"; }
rm -rf /tmp/r1 /tmp/r2
train --steps 10 --save /tmp/r1 "$@" > "$out/straight.jsonl" 2> "$out/straight.err"; echo "straight exit $?"
train --steps 5 --save-steps 5 --save /tmp/r2 "$@" > "$out/first.jsonl" 2> "$out/first.err"; echo "first exit $?"
ls /tmp/r2
train --steps 10 --save /tmp/r2 --resume auto "$@" > "$out/resumed.jsonl" 2> "$out/resumed.err"; echo "resumed exit $?"
python3 - "$out" <<'PY'
import json, sys
o = sys.argv[1]
def losses(f): return [(json.loads(l)["step"], json.loads(l)["loss"]) for l in open(f"{o}/{f}") if l.strip()]
s, r = dict(losses("straight.jsonl")), dict(losses("resumed.jsonl"))
worst = max(abs(s[k] - r[k]) / abs(s[k]) for k in r)
print("steps resumed:", sorted(r), "| worst relative loss difference against the straight run: %.2e" % worst)
for k in sorted(r): print(k, s[k], r[k])
PY
