# the main benchmarks with two builds in one command (before and after a change), each pair back to back
# On the GPU host: 1B and 8B, keep and gradient checkpointing, one state-offload row, and (with 2+ GPUs)
# one data-parallel row through strata-train --gpus 2; each config's two builds run back to back on GPU 0.
#   [REPEAT=N] [PART=all|single|dp|fp8] scripts/gpu.sh before_after AFTER_DIR BEFORE_DIR
# PART=fp8: only the FP8 rows (Hugging Face's recipe with --fp8: 1B 4096 keep, 8B 4096 and 16384 gc) and the 8B 16384
# bf16 row they are measured against.
# (each DIR with tools/strata-bench, strata-train, strata-make-tiny). REPEAT=N runs each single-GPU pair N times,
# the order alternating (before-after, after-before, ...) so drift does not favour one build; the table
# gives each build's median. One JSON line per run in $OUT/before_after.jsonl; a table on stdout.
set -u
after=$dir before=${1:?BEFORE_DIR}
export NCCL_NVLS_ENABLE=0
log="$out/before_after.jsonl"; : >> "$log"
part=${PART:-all}
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l); $(date -u +%FT%TZ)"
hf_recipe=(--master-weights none --optimizer-state bf16 --gradients bf16)
bench() {  # NAME FLAGS...
  local name=$1; shift
  [ "$part" = dp ] && return
  local fp8_row=0  # the FP8 rows and their bf16 base run under PART=fp8 only
  [[ $name == *fp8* || $name == *"bf16 base"* ]] && fp8_row=1
  if [ "$part" = fp8 ]; then ((fp8_row)) || return; else ((fp8_row)) && return; fi
  local order i
  for ((i = 0; i < ${REPEAT:-1}; i++)); do
  order="before after"; ((i % 2)) && order="after before"
  for which in $order; do
    local d=$before; [ $which = after ] && d=$after
    local line
    line=$(CUDA_VISIBLE_DEVICES=0 "$d/tools/strata-bench" --backend cuda --steps 4 --warmup 2 "$@" 2>>"$out/bench.err" | tail -1)
    [ -n "$line" ] || line='{"error": "no output"}'
    echo "{\"row\": \"$name\", \"build\": \"$which\", \"result\": $line}" | tee -a "$log" >/dev/null
  done
  done
}
bench "1B full 4096 keep" --shape Llama-3.2-1B --seq 4096 --mode full --plan keep
bench "1B full 4096 gc" --shape Llama-3.2-1B --seq 4096 --mode full --plan gc
bench "1B full 4096 keep, optimizer state on the host" --shape Llama-3.2-1B --seq 4096 --mode full --plan keep \
  --state-offloading optimizer
bench "8B frozen 8192 gc" --shape Llama-3-8B --seq 8192 --mode frozen --plan gc
bench "8B full 4096 gc, HF recipe" --shape Llama-3-8B --seq 4096 --mode full --plan gc "${hf_recipe[@]}"
bench "8B full 16384 gc, HF recipe, bf16 base" --shape Llama-3-8B --seq 16384 --mode full --plan gc "${hf_recipe[@]}"
bench "1B full 4096 keep, HF recipe, fp8" --shape Llama-3.2-1B --seq 4096 --mode full --plan keep "${hf_recipe[@]}" --fp8
bench "8B full 4096 gc, HF recipe, fp8" --shape Llama-3-8B --seq 4096 --mode full --plan gc "${hf_recipe[@]}" --fp8
bench "8B full 16384 gc, HF recipe, fp8" --shape Llama-3-8B --seq 16384 --mode full --plan gc "${hf_recipe[@]}" --fp8
if [ "$part" != single ] && [ "$part" != fp8 ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  m=/tmp/ba-1b
  "$after/tools/strata-make-tiny" $m --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 \
    --vocab 128256 --tied --max-pos 8192 --tokens 400000 --dtype bf16 >/dev/null
  for which in before after; do
    d=$before; [ $which = after ] && d=$after
    f="$out/dp-$which.jsonl"
    CUDA_VISIBLE_DEVICES=0,1 "$d/tools/strata-train" --model $m --data $m/tokens.bin --seq 4096 --batch 1 --steps 12 \
      --gpus 2 --json "${hf_recipe[@]}" >"$f" 2>"$out/dp-$which.log"
    python3 - "$f" "$which" <<'PY' | tee -a "$log" >/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows or [{"tokens_per_s": 0, "peak_device_bytes": 0, "loss": 0}]
tps = sorted(r["tokens_per_s"] for r in late)
print(json.dumps({"row": "1B full 4096 a rank, 2 GPUs data parallel, HF recipe", "build": sys.argv[2],
                  "result": {"tokens_per_s": tps[len(tps) // 2], "peak_arena_bytes": max(r["peak_device_bytes"] for r in late),
                             "loss": rows[-1]["loss"] if rows else None, "steps": len(rows)}}))
PY
  done
fi
python3 - "$log" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows: by.setdefault(r["row"], {}).setdefault(r["build"], []).append(r["result"])
def med(runs):  # the run with the median tokens/s
    runs = sorted(runs, key=lambda x: x.get("tokens_per_s", 0))
    return runs[len(runs) // 2] if runs else {}
print(f"{'row':58} {'before tok/s':>12} {'after tok/s':>12} {'ratio':>6} {'before peak':>14} {'after peak':>14}")
for name, b in by.items():
    x, y = med(b.get("before", [])), med(b.get("after", []))
    tx, ty = x.get("tokens_per_s", 0), y.get("tokens_per_s", 0)
    print(f"{name:58} {tx:>12.0f} {ty:>12.0f} {ty / tx if tx else 0:>6.3f} {x.get('peak_arena_bytes', 0):>14} {y.get('peak_arena_bytes', 0):>14}")
PY
