# rows sized to the data against rows padded to sequence_len: step times, losses and forecasts of short chat rows
# One GPU-host command checking USER_GUIDE's "Batch length: sized to the data": short one-turn chat examples
# (about 50 tokens each with the Llama 3 template) at sequence_len 4096, micro_batch_size 8, trained
#   a. sized to the data (the default: each batch as long as its longest row, rounded up to 128), and
#   b. padded to sequence_len (pad_to_sequence_len: true, axolotl's key),
# from the same random init, with the step time of every step (strata-train --json), the losses (equal up to
# float rounding: the padding is never a trained target), and strata-plan's forecast of each config; plus
# strata-bench at --seq 4096 --batch 8 of the same model (a padded step measured by the bench, as a cross-check).
# Issue 30 saw 50-token examples at sequence_len 4096 take 40 s a step padded, about 2 s expected.
#   scripts/gpu.sh sized_rows DIR
# Settings (environment): SHAPE 1b (Llama-3.2-1B's widths: 16 layers, hidden 2048, heads 32/8, MLP 8192,
# vocab 128256 tied; default) or tiny (2 layers, hidden 32: for trying the script on cpu); BACKEND cuda
# (default) or cpu; STEPS 8; EXAMPLES 400; SEQ 4096; BATCH 8.
#   Try it on the build machine first: SHAPE=tiny BACKEND=cpu STEPS=2 OUT=/tmp/sr scripts/gpu.sh sized_rows build-cpu
# Output in $OUT (default /tmp/strata-out): sized_rows.jsonl (one JSON line per run, then a summary line),
# sized_rows.txt (the same in words), sized_rows.err (every command and its stderr).
set -uo pipefail
shape=${SHAPE:-1b}
backend=${BACKEND:-cuda}
steps=${STEPS:-8}
examples=${EXAMPLES:-400}
seq=${SEQ:-4096}
batch=${BATCH:-8}
work=/tmp/strata-sized-rows-$shape
jsonl=$out/sized_rows.jsonl
err=$out/sized_rows.err
: >"$jsonl"
: >"$err"
mkdir -p "$work"
if [[ $backend == cuda ]]; then
  export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
  gpu_line "$err" >/dev/null
  pick_profile
else
  prof=h200  # the sim's datasheet profile: the forecast is of an H200 step, not of this cpu
fi
for t in strata-make-tiny strata-train strata-plan strata-bench; do
  [[ -x $dir/tools/$t ]] || { echo "sized_rows: $dir/tools/$t is missing (build the tools)" | tee -a "$err" >&2; exit 3; }
done

case $shape in
  1b) dims=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256 --tied --dtype bf16) ;;
  tiny) dims=(--layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 3008) ;;
  *)
    echo "sized_rows: SHAPE must be 1b or tiny, got '$shape'" >&2
    exit 2
    ;;
esac
model=$work/model
echo "== strata-make-tiny $model ${dims[*]} --tokens 1000 --max-pos $seq" >>"$err"
make_tiny_once "$model" "${dims[@]}" --tokens 1000 --max-pos "$seq" >>"$err" 2>&1 || {
  echo "sized_rows: strata-make-tiny failed (see $err)" >&2
  exit 3
}
cp tests/tokenizer/llama3/tokenizer.json tests/tokenizer/llama3/tokenizer_config.json "$model/"

# One-turn conversations of about 50 tokens with the template (its headers are about 15 of them).
python3 - "$work/chat.jsonl" "$examples" <<'PY'
import json, random, sys
r = random.Random(0)
words = ("the model reads a short question and gives a brief answer about data rows batches tokens "
         "training steps memory kernels time speed cost what why how when which is are was it this").split()
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        q = " ".join(r.choice(words) for _ in range(r.randint(4, 7))).capitalize() + "?"
        a = " ".join(r.choice(words) for _ in range(r.randint(10, 16))).capitalize() + "."
        f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n")
PY

run_one() {  # NAME PAD(true|false): strata-train, strata-plan of its config; one JSON line to $jsonl
  local name=$1 pad=$2 cfg=$work/$1.yaml
  cat >"$cfg" <<YAML
base_model: $model
datasets:
  - path: $work/chat.jsonl
    type: chat_template
    chat_template: llama3
sequence_len: $seq
micro_batch_size: $batch
max_steps: $steps
learning_rate: 1.0e-4
logging_steps: 1
seed: 0
pad_to_sequence_len: $pad
YAML
  echo "== $name: strata-train --config $cfg --backend $backend --json" >>"$err"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout 1200 "$dir/tools/strata-train" --config "$cfg" --backend "$backend" --json >"$work/$name.out" 2>"$work/$name.log"
  rc=$?
  t1=$(date +%s.%N)
  cat "$work/$name.log" >>"$err"
  echo "== $name: strata-plan --config $cfg --model $model --profile $prof --json" >>"$err"
  "$dir/tools/strata-plan" --config "$cfg" --model "$model" --profile "$prof" --json >"$work/$name.plan" 2>>"$err"
  python3 - "$name" "$pad" "$rc" "$t0" "$t1" "$work/$name.out" "$work/$name.log" "$work/$name.plan" \
    "$backend" "$shape" "$seq" "$batch" <<'PY' | tee -a "$jsonl"
import json, re, statistics, sys
name, pad, rc, t0, t1, out, log, plan, backend, shape, seq, batch = sys.argv[1:]
wall = float(t1) - float(t0)
steps = [json.loads(l) for l in open(out) if l.startswith('{"step"')]
text = open(log).read()
said = re.search(r"^batches: .*$", text, re.M)
data = re.search(r"^dataset: .*$", text, re.M)
row = {"row": name, "pad_to_sequence_len": pad == "true", "backend": backend, "shape": shape,
       "sequence_len": int(seq), "micro_batch_size": int(batch), "train_exit": int(rc), "wall_s": round(float(wall), 1),
       "dataset": data.group(0) if data else None, "batches": said.group(0) if said else None,
       "step_s": [round(s["step_s"], 4) for s in steps], "loss": [s["loss"] for s in steps],
       "tokens_per_s": [round(s["tokens_per_s"]) for s in steps]}
# The first step carries the kernels' autotuning and first-touch costs: the median of the rest is the step time.
rest = row["step_s"][1:] or row["step_s"]
row["median_step_s"] = round(statistics.median(rest), 4) if rest else None
try:
    t = open(plan).read()
    p = json.loads(t[t.index("{"):])
    f = p["forecast"]
    prof = p.get("profile") or {}
    prof = f'{prof.get("name")}{"" if prof.get("calibrated") else " (not calibrated)"}' if isinstance(prof, dict) else prof
    row["forecast"] = {"seq": p["seq"], "batch": p["batch"], "plan": p["plan"], "profile": prof,
                       "step_s": round(f["step_s"], 4), "peak_bytes": f["peak_bytes"], "fits": f["fits"]}
except Exception as e:  # noqa: BLE001 - the line says what went wrong instead
    row["forecast"] = {"error": f"strata-plan gave no forecast: {e}"}
if int(rc) != 0:
    row["error"] = "strata-train failed: " + " | ".join(text.strip().splitlines()[-3:])
print(json.dumps(row))
PY
}

run_one sized false
run_one padded true

echo "== strata-bench --model $model --backend $backend --seq $seq --batch $batch --steps 3 --warmup 1" >>"$err"
bench=$("$dir/tools/strata-bench" --model "$model" --backend "$backend" --seq "$seq" --batch "$batch" --steps 3 \
  --warmup 1 2>>"$err" | tail -1)
[[ $bench == \{* ]] || bench='{"error": "strata-bench gave no result (see sized_rows.err)"}'
echo "{\"row\": \"bench_padded\", \"what\": \"strata-bench --seq $seq --batch $batch: a padded step of the same model\", \"result\": $bench}" | tee -a "$jsonl" | cut -c1-300

python3 - "$jsonl" "$out/sized_rows.txt" <<'PY'
import json, sys
rows = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    rows[d["row"]] = d
s, p, b = rows.get("sized", {}), rows.get("padded", {}), rows.get("bench_padded", {}).get("result", {})
summary = {"row": "summary"}
lines = []
for name, d in (("sized to the data", s), ("padded to sequence_len", p)):
    f = d.get("forecast", {})
    lines.append(f"{name}: {d.get('batches')}\n  measured: median step {d.get('median_step_s')} s (steps 2..; all: "
                 f"{d.get('step_s')}), exit {d.get('train_exit')}\n  forecast: {f.get('step_s')} s a step at seq "
                 f"{f.get('seq')} x batch {f.get('batch')} ({f.get('plan')}, profile {f.get('profile')})"
                 + (f"\n  ERROR: {d['error']}" if "error" in d else ""))
if s.get("median_step_s") and p.get("median_step_s"):
    summary["padded_over_sized_measured"] = round(p["median_step_s"] / s["median_step_s"], 2)
fs, fp = s.get("forecast", {}).get("step_s"), p.get("forecast", {}).get("step_s")
if fs and fp:
    summary["padded_over_sized_forecast"] = round(fp / fs, 2)
for k, d in (("sized", s), ("padded", p)):
    f = d.get("forecast", {}).get("step_s")
    if f and d.get("median_step_s"):
        summary[f"{k}_measured_over_forecast"] = round(d["median_step_s"] / f, 2)
if s.get("loss") and p.get("loss"):
    diff = max(abs(a - c) for a, c in zip(s["loss"], p["loss"]))
    summary["max_loss_difference"] = diff
    summary["losses_agree"] = diff <= 1e-2 * max(abs(x) for x in p["loss"])
if b.get("step_s"):
    summary["bench_padded_step_s"] = b["step_s"]
summary["reading"] = ("sized should be many times faster than padded (the padded rows are ~30x longer than the data); "
                      "losses agree (the padding is never a target); measured_over_forecast near 1 means the plan's "
                      "forecast follows the data-sized batch. The issue's padded step took 40 s, about 2 s expected.")
lines.append("summary: " + json.dumps(summary))
print(json.dumps(summary))
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(summary) + "\n")
PY
cat "$out/sized_rows.txt"
