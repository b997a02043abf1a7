# one sequence-parallel ZeRO-3 step of 8B-shaped layers at long context on every GPU
# Sequence parallel at long context: one step of an 8B-shaped layer stack (hidden 4096,
# 32/8 heads, MLP 14336, vocabulary 128256) with LAYERS layers at SEQ tokens on every GPU of the host as one
# sequence-parallel group, ZeRO-3, bf16 gradients, the plan strata-plan --max-seq chose for the full 8B (layer
# inputs on the host, every layer recomputed, the MLP in 4 tiles), the arena capped at 76 GiB (an 80 GB H100's).
# A full 8B step at such lengths takes longer than a benchmark call, so fewer layers run the same shapes.
#   scripts/gpu.sh sp_long DIR SEQ [LAYERS=4]     results in $OUT/sp_long.{jsonl,log}
set -u
seq=$1; layers=${2:-4}
export NCCL_NVLS_ENABLE=0 STRATA_ATTN_TUNE=${STRATA_ATTN_TUNE:-0}
n=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1; echo "GPUs: $n"; free -g | head -2; } |
  tee "$out/sp_long.log"
m=/tmp/sp-8b-$layers
make_tiny_once $m --layers "$layers" --hidden 4096 --heads 32 --kv-heads 8 \
  --intermediate 14336 --vocab 128256 --max-pos 4194304 --dtype bf16 --tokens $((seq + 4096)) --seed 1 >> "$out/sp_long.log" 2>&1
printf 'mlp_tiles: 4\nplan:\n  "L*.input": host\n  "L*": recompute\n' > "$out/sp_long_plan.yaml"
start=$(date +%s)
"$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq "$seq" --batch 1 --steps 1 --lr 1e-4 --gpus "$n" \
  --sequence-parallel "$n" --zero-stage 3 --gradients bf16 --device-memory 76GiB --config "$out/sp_long_plan.yaml" \
  --json > "$out/sp_long.jsonl" 2>> "$out/sp_long.log"
echo "strata-train: exit $? after $(($(date +%s) - start)) s" | tee -a "$out/sp_long.log"
cat "$out/sp_long.jsonl"; grep -E "done:|host tier|error|rank" "$out/sp_long.log" | tail -8
