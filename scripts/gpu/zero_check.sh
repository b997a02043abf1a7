# ZeRO-1/2/3 on 2 GPUs: tests, losses, peaks vs forecast, sharded and resharded checkpoints
# ZeRO-1, ZeRO-2 and ZeRO-3 on 2 GPUs:
#   1. tests: comm_gpu_test (reduce and reduce_many against the cpu communicator) and zero_gpu_test (2 and 4
#      ranks: stages 1 and 2 against 0 with fp32/bf16 sums and bf16 gradients, every rank's weights the same
#      bits, each rank's peak the sim's forecast of that rank byte for byte);
#   2. strata-train --gpus 2 with zero_stage 0, 1, 2 and 3 on the same data; the losses agree (the update is the
#      same arithmetic on the owner, the weights broadcast exactly; bit for bit on cpu, within the cuda
#      backend's run-to-run spread on GPUs: its first step tunes GEMM and attention plans, so two stage-0
#      runs differ by ~1e-5 too, and ZeRO-2's reduce and norm parts sum in another order); peaks a rank drop
#      from stage to stage; rank 0's first-step peak against strata-plan --gpus 2 --zero-stage Z's forecast
#      (rank 0's); the saved models load and agree;
#   3. sharded checkpoints (ZeRO-1, then ZeRO-2 resumed from ZeRO-1's checkpoint, then ZeRO-1's resharded onto
#      1 GPU).
#   scripts/gpu.sh zero_check DIR      (DIR/tools: strata-train, strata-make-tiny, strata-plan; DIR/tests)
set -u
export NCCL_NVLS_ENABLE=0
for t in comm_gpu_test zero_gpu_test; do
  [[ -x $dir/tests/$t ]] || { echo "$t: not built" | tee -a "$out/gpu_tests.txt"; continue; }
  "$dir/tests/$t" > "$out/$t.log" 2>&1
  echo "$t: exit $? | $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tr '\n' ' ')" | tee -a "$out/gpu_tests.txt"
  grep -E "^\[  FAILED  \]|Failure" -A4 "$out/$t.log" | head -30 >> "$out/gpu_tests.txt"
  grep -E "zero_stage [0-9], rank" "$out/$t.log" | head -40 >> "$out/gpu_tests.txt"
done
pick_profile
m=/tmp/zero-small
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 200000 --max-pos 1024 > /dev/null
for z in 0 1 2 3; do
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --gpus 2 \
    --zero-stage $z --json --save "$out/zero$z-model" > "$out/zero$z.jsonl" 2> "$out/zero$z.log"
  echo "zero_stage $z: exit $?"
  "$dir/tools/strata-plan" --model $m --seq 512 --batch 1 --gpus 2 --zero-stage $z --profile "$prof" --json \
    > "$out/zero$z-plan.json" 2>> "$out/zero$z.log"
done
python3 - "$out" <<'PY'
import json, sys, hashlib
out = sys.argv[1]
def rows(z):
    return [json.loads(l) for l in open(f"{out}/zero{z}.jsonl") if l.startswith('{"step"')]
r = {z: rows(z) for z in (0, 1, 2, 3)}
for z in (1, 2, 3):
    a, b = r[0], r[z]
    same = [x["loss"] == y["loss"] for x, y in zip(a, b)]
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    print(f"zero 0 vs {z}: {len(a)}/{len(b)} steps, losses equal at {sum(same)} steps, worst relative difference "
          f"{worst:.2e}, final {a[-1]['loss']:.6f} / {b[-1]['loss']:.6f}, "
          f"peak a rank {a[-1]['peak_device_bytes']} / {b[-1]['peak_device_bytes']}")
for z in (0, 1, 2, 3):
    f = json.load(open(f"{out}/zero{z}-plan.json"))["forecast"]
    got = r[z][0]["peak_device_bytes"]
    print(f"zero {z}: rank 0's first-step peak {got}, forecast {f['peak_bytes']} "
          f"({'equal' if got == f['peak_bytes'] else 'DIFFERENT by %+d' % (got - f['peak_bytes'])}), "
          f"largest step peak {max(x['peak_device_bytes'] for x in r[z])}")
h = [hashlib.sha256(open(f"{out}/zero{z}-model/model.safetensors", "rb").read()).hexdigest()[:16] for z in (0, 1, 2, 3)]
print("saved model.safetensors sha256 (zero 0, 1, 2, 3):", h, "identical" if len(set(h)) == 1 else "DIFFERENT")
PY

# Sharded checkpoints (ZeRO-1): save every 5 steps, resume from step 5 and compare steps 6-10 with the
# uninterrupted run (within the cuda backend's run-to-run spread); checkpoint-10's model.safetensors
# (rank 0 joins the masters other ranks own from their shards' low halves) must equal the final model
# saved the other way (every owner's low halves broadcast to rank 0) byte for byte, and its weights must
# carry low halves (not bf16 values widened).
"$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --gpus 2 \
  --zero-stage 1 --json --save "$out/zck" --save-steps 5 > "$out/zck.jsonl" 2> "$out/zck.log"
echo "zero 1 with checkpoints: exit $?"
"$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --gpus 2 \
  --zero-stage 1 --json --save "$out/zck-resumed" --resume "$out/zck/checkpoint-5" > "$out/zck-resumed.jsonl" \
  2> "$out/zck-resumed.log"
echo "zero 1 resumed from checkpoint-5: exit $?"
python3 - "$out" <<'PY'
import json, sys, struct
out = sys.argv[1]
def rows(f):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{out}/{f}") if l.startswith('{"step"'))}
a, b = rows("zck.jsonl"), rows("zck-resumed.jsonl")
common = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / abs(a[s]) for s in common), default=float("nan"))
print(f"resumed steps {common}: worst relative loss difference from the uninterrupted run {worst:.2e}")
def tensors(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return raw, n, {k: v for k, v in h.items() if k != "__metadata__"}
ck, final = f"{out}/zck/checkpoint-10/model.safetensors", f"{out}/zck/model.safetensors"
print("checkpoint-10 model.safetensors == final saved model:", open(ck, "rb").read() == open(final, "rb").read())
raw, n, h = tensors(ck)
lo = tot = 0
for k, v in h.items():
    if v["dtype"] != "F32" or "norm" in k: continue
    b0, b1 = v["data_offsets"]; data = raw[8 + n + b0: 8 + n + b1]
    words = struct.unpack(f"<{len(data)//4}I", data)
    lo += sum(1 for w in words if w & 0xffff); tot += len(words)
print(f"checkpoint-10 weights with nonzero low 16 bits: {lo}/{tot} ({100*lo/max(tot,1):.1f}%)")
PY

# ZeRO-2 resumes ZeRO-1's checkpoint (the same shards; gradients are never saved): steps 6-10 against the
# uninterrupted ZeRO-1 run (within the run-to-run spread and ZeRO-2's other summation order).
"$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --gpus 2 \
  --zero-stage 2 --json --save "$out/zck2-resumed" --resume "$out/zck/checkpoint-5" > "$out/zck2-resumed.jsonl" \
  2> "$out/zck2-resumed.log"
echo "zero 2 resumed from zero 1's checkpoint-5: exit $?"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rows(f):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{out}/{f}") if l.startswith('{"step"'))}
a, b = rows("zck.jsonl"), rows("zck2-resumed.jsonl")
common = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / abs(a[s]) for s in common), default=float("nan"))
print(f"zero 2 resumed from zero 1, steps {common}: worst relative loss difference {worst:.2e}")
PY

# Resharding: ZeRO-1's 2-GPU checkpoint-5 resumed on 1 GPU with --batch 2 (the same global batch; one rank is
# unsharded, so every parameter's state comes from both shards): steps 6-10 against the uninterrupted 2-GPU run
# (within the run-to-run spread and one rank's summation order).
"$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 2 --steps 10 --lr 1e-4 --gpus 1 \
  --zero-stage 1 --json --save "$out/zck1-resumed" --resume "$out/zck/checkpoint-5" > "$out/zck1-resumed.jsonl" \
  2> "$out/zck1-resumed.log"
echo "zero 1 resumed on 1 GPU from the 2-GPU checkpoint-5: exit $?"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def rows(f):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{out}/{f}") if l.startswith('{"step"'))}
a, b = rows("zck.jsonl"), rows("zck1-resumed.jsonl")
common = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / abs(a[s]) for s in common), default=float("nan"))
print(f"resharded onto 1 GPU, steps {common}: worst relative loss difference {worst:.2e}")
PY
