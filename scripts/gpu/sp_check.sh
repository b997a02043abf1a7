# sequence parallel on 2 and 4 GPUs: gpu test, equivalence, forecast, optional long-context bench
# Sequence parallelism (DeepSpeed-Ulysses style) on one host with 2 or 4 GPUs:
#   1. tests/seq_parallel_gpu_test: the block-copy kernel against the cpu reference; 2 and 4 ranks (NCCL) against
#      one GPU on the same rows: logits of each rank's tokens and 6 steps' losses (keep and gradient checkpointing).
#   2. equivalence through strata-train: a small random Llama (8 heads, 2 KV heads: replicated on 4 ranks), the
#      same rows of 4096 tokens, 20 steps, clipping on, on 1 GPU and on --gpus N --sequence-parallel N (N = 2, 4),
#      with the keep plan and with gradient checkpointing (its replays re-run the all-to-alls); every step's loss
#      and grad norm against one GPU's. Pass: loss within 5e-3 relative at every step (bf16: the GEMMs run on T/N
#      rows and attention on H/N heads, other roundings than one GPU's; on cpu the same runs agree to 2e-6).
#   3. data parallel x sequence parallel: --gpus 4 --sequence-parallel 2 (2 groups of 2) against --gpus 2 (2
#      data-parallel ranks) on the same rows; same tolerance.
#   4. the forecast: strata-plan --sequence-parallel N's peak against each run's measured arena peak (the sim
#      mirrors the cuda backend's allocations: expected equal), and its step time against the measured one.
#   5. SP_BENCH=1: long context, Llama-3-8B shape, LoRA r16, gradient checkpointing: seq 65536 on 1, 2, 4 GPUs and
#      131072 on 2 and 4 (SP_MODEL=DIR: an existing Llama-3-8B checkpoint; else a random one is written to
#      /tmp/sp-8b, 32 GB of fp32), 4 steps each, tok/s (median after the first step) and peak against the forecast.
#   scripts/gpu.sh sp_check DIR   (DIR/tools: strata-train, strata-plan, strata-make-tiny; DIR/tests:
#                                  seq_parallel_gpu_test)      results in $OUT (default /tmp/strata-out)
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
gpus=(); for g in 2 4; do (( g <= n )) && gpus+=("$g"); done
sum="$out/sp_summary.txt"
pick_profile
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); $(date -u +%FT%TZ)" | tee "$sum"

# 1. the gpu test
"$dir/tests/seq_parallel_gpu_test" > "$out/sp_gpu_test.log" 2>&1
echo "--- seq_parallel_gpu_test: exit $?" | tee -a "$sum"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|NMSE" "$out/sp_gpu_test.log" | head -20 | tee -a "$sum"

# 2-4. equivalence and the forecast
m=/tmp/sp-small
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 400000 --max-pos 8192 > /dev/null
train() {  # NAME GPUS FLAGS...
  local name=$1 g=$2; shift 2
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 4096 --batch 1 --steps 20 --lr 1e-4 \
    --max-grad-norm 1.0 --gpus "$g" --json "$@" > "$out/sp-$name.jsonl" 2> "$out/sp-$name.log" ||
    echo "$name failed: $(tail -3 "$out/sp-$name.log")" | tee -a "$sum"
}
gc=$(mktemp --suffix .yaml); echo "gradient_checkpointing: true" > "$gc"
train 1-keep 1
train 1-gc 1 --config "$gc"
for g in "${gpus[@]}"; do
  train "$g-keep" "$g" --sequence-parallel "$g"
  train "$g-gc" "$g" --sequence-parallel "$g" --config "$gc"
done
if (( n >= 4 )); then
  train dp2 2
  train dp2xsp2 4 --sequence-parallel 2
fi
for g in 1 "${gpus[@]}"; do
  "$dir/tools/strata-plan" --model $m --seq 4096 --sequence-parallel "$g" --profile $profile --json \
    > "$out/sp-plan-$g.json" 2> /dev/null
done
python3 - "$out" "$n" "${gpus[@]}" <<'EOF' | tee -a "$sum"
import json, os, sys
out, n, gpus = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def run(name):
    p = f"{out}/sp-{name}.jsonl"
    return [json.loads(l) for l in open(p) if l.startswith('{"step"')] if os.path.exists(p) else []
def compare(name, base_name):
    a, b = run(name), run(base_name)
    if not a or len(a) != len(b):
        print(f"{name}: {len(a)} steps against {len(b)} of {base_name}: FAILED"); return
    wl = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
    wn = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(y["grad_norm"]) for x, y in zip(a, b))
    ok = "within" if wl <= 5e-3 else "OUTSIDE"
    print(f"{name} vs {base_name}: loss {a[0]['loss']:.5f} -> {a[-1]['loss']:.5f}; worst relative difference: loss "
          f"{wl:.2e} ({ok} 5e-3), grad norm {wn:.2e}; peak {a[-1]['peak_device_bytes']/2**30:.3f} GiB")
print("--- equivalence: 1 row x 4096 tokens a step, 20 steps, lr 1e-4; 1 GPU: loss "
      f"{run('1-keep')[0]['loss']:.5f} -> {run('1-keep')[-1]['loss']:.5f}" if run('1-keep') else "1 GPU run FAILED")
for g in gpus:
    compare(f"{g}-keep", "1-keep")
    compare(f"{g}-gc", "1-gc")
if n >= 4:
    compare("dp2xsp2", "dp2")
print("--- forecast (strata-plan --sequence-parallel N, keep) against the measured keep runs")
for g in ["1"] + gpus:
    p = f"{out}/sp-plan-{g}.json"
    r = run(f"{g}-keep")
    if not os.path.exists(p) or not r:
        print(f"{g}: missing"); continue
    f = json.load(open(p))["forecast"]
    late = sorted(x["step_s"] for x in r[3:]) or [r[-1]["step_s"]]
    peak = max(x["peak_device_bytes"] for x in r)
    print(f"{g} GPU(s): peak forecast {f['peak_bytes']} B, measured {peak} B "
          f"({'equal' if f['peak_bytes'] == peak else 'DIFFERENT'}); step forecast {f['step_s']:.4f} s, measured "
          f"{late[len(late)//2]:.4f} s (median); all-to-alls forecast {f.get('all_to_all_s', 0):.4f} s a step")
EOF

# 5. long context (optional)
if [[ "${SP_BENCH:-0}" == 1 ]]; then
  big=${SP_MODEL:-/tmp/sp-8b}
  if [[ ! -f "$big/config.json" ]]; then
    make_tiny "$big" --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 \
      --vocab 128256 --max-pos 1048576 --tokens 2000000 > /dev/null
  fi
  data=${SP_DATA:-$big/tokens.bin}
  gc_lora=$(mktemp --suffix .yaml); printf "gradient_checkpointing: true\nlora_r: 16\nlora_alpha: 16\n" > "$gc_lora"
  echo "--- long context: Llama-3-8B shape, LoRA r16, gradient checkpointing, 4 steps" | tee -a "$sum"
  for cfg in "1 65536" "2 65536" "4 65536" "2 131072" "4 131072"; do
    set -- $cfg; g=$1; s=$2
    (( g <= n )) || continue
    "$dir/tools/strata-plan" --model "$big" --mode lora --seq "$s" --sequence-parallel "$g" --profile $profile \
      --preset gradient_checkpointing --json > "$out/sp-8b-plan-$g-$s.json" 2> /dev/null
    "$dir/tools/strata-train" --model "$big" --data "$data" --seq "$s" --batch 1 --steps 4 --lr 1e-4 --gpus "$g" \
      --sequence-parallel "$g" --config "$gc_lora" --json > "$out/sp-8b-$g-$s.jsonl" 2> "$out/sp-8b-$g-$s.log" ||
      echo "8B $g GPUs seq $s failed: $(tail -3 "$out/sp-8b-$g-$s.log")" | tee -a "$sum"
    python3 - "$out/sp-8b-$g-$s.jsonl" "$out/sp-8b-plan-$g-$s.json" "$g" "$s" <<'EOF' | tee -a "$sum"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
f = json.load(open(sys.argv[2]))["forecast"]
if not rows:
    print(f"{sys.argv[3]} GPUs, seq {sys.argv[4]}: no steps"); sys.exit()
late = sorted(r["tokens_per_s"] for r in rows[1:]) or [rows[-1]["tokens_per_s"]]
print(f"{sys.argv[3]} GPUs, seq {sys.argv[4]}: {late[len(late)//2]:.0f} tok/s (forecast {f['tokens_per_s']:.0f}), "
      f"peak {max(r['peak_device_bytes'] for r in rows)/2**30:.2f} GiB (forecast {f['peak_bytes']/2**30:.2f}), "
      f"loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
EOF
  done
fi
