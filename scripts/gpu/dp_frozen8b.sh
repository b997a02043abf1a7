# data parallel on an 8B frozen base at 8192 tokens a rank against PyTorch DDP
# The 8B data-parallel scaling target on one host with 2 or 4 GPUs, in one command: an 8B frozen base (only the
# RMSNorm weights train, as tools/bench/hf_bench.py --mode frozen) at 8192 tokens a rank, keep plan, on 1, 2
# and 4 GPUs; then Hugging Face + PyTorch DDP on the same GPUs with the same tokens a rank.
#   scripts/gpu.sh dp_frozen8b DIR   (DIR/tools: strata-train, strata-make-tiny)   results in $OUT
# The checkpoint is a Llama-3-8B-shaped random one in bf16 (strata-make-tiny --dtype bf16, 16 GB on disk).
# tokens/s of a strata run: the median of its steps after the first 3 (--json lines), every rank's tokens.
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
gpus=(1); for g in 2 4; do (( g <= n )) && gpus+=("$g"); done
sum="$out/frozen8b_summary.txt"
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); $(date -u +%FT%TZ)" | tee "$sum"
m=${MODEL_DIR:-/tmp/dp-8b}
t0=$(date +%s)
make_tiny $m --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 \
  --max-pos 8192 --tokens 2000000 --dtype bf16 > "$out/make8b.log" 2>&1 || { cat "$out/make8b.log"; exit 1; }
echo "checkpoint written in $(( $(date +%s) - t0 )) s ($(du -sh $m | cut -f1))" | tee -a "$sum"
med() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows
tps = sorted(r["tokens_per_s"] for r in late); st = sorted(r["step_s"] for r in late)
print(f"{tps[len(tps)//2]:.0f} tok/s, step {st[len(st)//2]:.4f} s, peak {max(r['peak_device_bytes'] for r in rows)/2**30:.2f} GiB, "
      f"final loss {rows[-1]['loss']:.4f} ({len(rows)} steps)")
PY
}
for g in "${gpus[@]}"; do
  f="$out/frozen8b-$g.jsonl"; t0=$(date +%s)
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 8192 --batch 1 --steps 10 --gpus "$g" --freeze-base \
    --json > "$f" 2> "${f%.jsonl}.log"
  echo "strata 8B frozen, $g GPUs ($(( $(date +%s) - t0 )) s with loading): $(med "$f" 2>&1 | tail -1)" | tee -a "$sum"
done
for g in "${gpus[@]}"; do
  r=$(torchrun --standalone --nproc-per-node "$g" tools/bench/hf_bench.py --dp ddp --shape Llama-3-8B --mode frozen \
      --seq 8192 --steps 6 --warmup 3 2> "$out/hf-frozen8b-$g.log" | tail -1)
  echo "hf ddp 8B frozen, $g GPUs: $r" | tee -a "$sum"
done
