# the 8B full fine-tune through strata-train --budget on a random Llama-3-8B-shaped checkpoint
# On the GPU host: the 8B full fine-tune through strata-train --budget itself
# (every tensor under the plan): a random Llama-3-8B-shaped checkpoint from strata-make-tiny (made once
# under $CKPT, default /tmp/ck8b: 16 GB of bf16 weights and 600,000 synthetic tokens), then STEPS
# steps of SEQ tokens planned by strata-train's own budget planner under the given budgets.
#   scripts/gpu.sh 8b_train DIR SEQ STEPS [strata-train flags: --budget 76GiB --host-budget 110GiB ...]
# Appends strata-train's JSON lines to $OUT/train8b.jsonl, its stderr (plan, progress) to $OUT/train8b.err.
set -uo pipefail
seq=$1; steps=$2; shift 2
ck=${CKPT:-/tmp/ck8b}
off=${OFFLOAD:-/tmp/strata-offload}; mkdir -p "$off"
{ nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader; free -g | head -2; df -h /tmp | tail -1; } |
  tee -a "$out/train8b.err"
if [ ! -f "$ck/model.safetensors" ]; then
  start=$(date +%s)
  "$dir/tools/strata-make-tiny" "$ck" --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 \
    --vocab 128256 --max-pos 1048576 --dtype bf16 --tokens 600000 --seed 1 2>&1 | tee -a "$out/train8b.err" || exit 1
  echo "checkpoint made in $(($(date +%s) - start)) s" | tee -a "$out/train8b.err"
fi
echo "== strata-train --seq $seq --steps $steps $*" >>"$out/train8b.err"
start=$(date +%s)
"$dir/tools/strata-train" --model "$ck" --data "$ck/tokens.bin" --seq "$seq" --steps "$steps" --loss-chunk 1024 \
  --offload-dir "$off" --json "$@" 2>>"$out/train8b.err" | tee -a "$out/train8b.jsonl"
echo "rc ${PIPESTATUS[0]} after $(($(date +%s) - start)) s" | tee -a "$out/train8b.err"
tail -5 "$out/train8b.err"
