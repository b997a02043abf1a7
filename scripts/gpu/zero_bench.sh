# ZeRO stages 0-3 on every GPU of the host: tok/s, each rank's peak, the forecast
# ZeRO stages on the GPUs of one host: a Llama-3.2-1B-shaped random checkpoint, full
# fine-tune, 4096 tokens a rank, keep plan, strata's default fp32 recipe; 1 GPU, then every GPU at
# zero_stage 0, 1, 2 and 3. Each run's median tok/s (steps after the 3rd), every rank's peak, and
# strata-plan's forecast of each rank's peak and step (--rank R).
#   scripts/gpu.sh zero_bench DIR   (DIR/tools: strata-train, strata-make-tiny, strata-plan)
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
sum="$out/zero_bench.txt"
pick_profile
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); profile $prof; $(date -u +%FT%TZ)" | tee "$sum"
m=/tmp/zero-1b
make_tiny $m --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256 \
  --tied --max-pos 8192 --tokens 1000000 --dtype bf16 > /dev/null
run() {  # NAME GPUS ZERO
  local f="$out/zero-$1.jsonl"
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 4096 --batch 1 --steps 12 --gpus "$2" \
    --zero-stage "$3" --json > "$f" 2> "${f%.jsonl}.log" || echo "$1 failed: $(tail -3 "${f%.jsonl}.log")" | tee -a "$sum"
  local fc=""
  for ((r = 0; r < $2; r++)); do
    fc+=$("$dir/tools/strata-plan" --model $m --seq 4096 --batch 1 --gpus "$2" --zero-stage "$3" --rank $r \
      --profile "$prof" --json 2>/dev/null | python3 -c "import json,sys; f=json.load(sys.stdin)['forecast']; \
print(f\" rank $r forecast {f['peak_bytes']} B, {f['step_s']:.4f} s\", end='')")
  done
  python3 - "$f" "$1" "$fc" <<'PY' | tee -a "$sum"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows
tps = sorted(r["tokens_per_s"] for r in late); st = sorted(r["step_s"] for r in late)
print(f"{sys.argv[2]}: {tps[len(tps)//2]:.0f} tok/s, step {st[len(st)//2]:.4f} s, rank 0 peak "
      f"{max(r['peak_device_bytes'] for r in rows)} B, loss {rows[-1]['loss']:.4f};{sys.argv[3]}")
PY
}
run 1gpu 1 0
for z in 0 1 2 3; do run "${n}gpus-zero$z" "$n" $z; done
