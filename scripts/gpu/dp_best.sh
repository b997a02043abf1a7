# data parallel at each ZeRO stage in Hugging Face's recipe against DDP and FSDP2 (2 and 4 GPUs)
# Data parallel against PyTorch in one command: strata's data parallel at each ZeRO stage against
# Hugging Face + DDP and FSDP2 on the same GPUs, 2 of them (CUDA_VISIBLE_DEVICES=0,1) and every GPU of the
# host. A Llama-3.2-1B-shaped random checkpoint, full fine-tune, 4096 tokens a rank, keep plan. strata runs
# Hugging Face's precision recipe (bf16 weights updated in place, bf16 AdamW state, bf16 gradients summed in
# bf16: --master-weights none --optimizer-state bf16 --gradients bf16), the recipe tools/bench/hf_bench.py
# runs (bf16 parameters, fused AdamW, sdpa). tok/s counts every rank's tokens: strata's median step after
# the 3rd of 12, Hugging Face's slowest rank's median of 8 after 3 warm-up steps.
#   scripts/gpu.sh dp_best DIR   (DIR/tools: strata-train, strata-make-tiny, strata-plan)   results in $OUT
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
sum="$out/dp_best.txt"
pick_profile
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); profile $prof; $(date -u +%FT%TZ)" | tee "$sum"
m=/tmp/dp-best-1b
make_tiny $m --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256 \
  --tied --max-pos 8192 --tokens 1000000 --dtype bf16 > /dev/null
recipe=(--master-weights none --optimizer-state bf16 --gradients bf16)
devs() { local s=0; for ((i = 1; i < $1; i++)); do s+=",$i"; done; echo "$s"; }
strata() {  # NAME GPUS ZERO [FLAGS...]
  local name=$1 g=$2 z=$3; shift 3
  local f="$out/strata-$name.jsonl"
  CUDA_VISIBLE_DEVICES=$(devs "$g") "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 4096 --batch 1 \
    --steps 12 --gpus "$g" --zero-stage "$z" --json "$@" > "$f" 2> "${f%.jsonl}.log" ||
    { echo "strata $name failed: $(tail -3 "${f%.jsonl}.log")" | tee -a "$sum"; return; }
  local fc
  fc=$("$dir/tools/strata-plan" --model $m --seq 4096 --batch 1 --gpus "$g" --zero-stage "$z" "$@" --profile "$prof" \
    --json 2>/dev/null | python3 -c "import json,sys; f=json.load(sys.stdin)['forecast']; \
print(f\"forecast rank 0 {f['peak_bytes']} B, {f['step_s']:.4f} s\")")
  python3 - "$f" "$name" "$fc" <<'PY' | tee -a "$sum"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows
tps = sorted(r["tokens_per_s"] for r in late); st = sorted(r["step_s"] for r in late)
print(f"strata {sys.argv[2]}: {tps[len(tps)//2]:.0f} tok/s, step {st[len(st)//2]:.4f} s, rank 0 peak "
      f"{max(r['peak_device_bytes'] for r in rows)} B, loss {rows[-1]['loss']:.4f}; {sys.argv[3]}")
PY
}
hf() {  # DP GPUS
  local r
  r=$(CUDA_VISIBLE_DEVICES=$(devs "$2") torchrun --standalone --nproc-per-node "$2" tools/bench/hf_bench.py --dp "$1" \
    --shape Llama-3.2-1B --seq 4096 --steps 8 --warmup 3 2> "$out/hf-$1-$2.log" | tail -1)
  echo "hf $1, $2 GPUs: $r" | tee -a "$sum"
}
gl=(2); ((n >= 4)) && gl+=(4)
strata 1gpu 1 0 "${recipe[@]}"
hf ddp 1
for g in "${gl[@]}"; do
  for z in 0 2 3; do strata "${g}gpus-zero$z" "$g" "$z" "${recipe[@]}"; done
  hf ddp "$g"
  hf fsdp2 "$g"
done
