# where the data-parallel step goes: recipes x NCCL_MAX_CTAS on 1, 2, 4 GPUs
# Where the data-parallel step goes on 2 and 4 GPUs, in one command: strata-train
# --gpus N on a Llama-3.2-1B-shaped random checkpoint, 4096 tokens a rank, keep, for each recipe in RECIPES
# (';'-separated flag sets) and each NCCL_MAX_CTAS in CTAS (how many SMs NCCL's kernels may take: fewer slow the
# all-reduce but leave more of the GPU to the backward it overlaps; "" is NCCL's default).
#   RECIPES="...;..." CTAS="'' 16 8" scripts/gpu.sh dp_tune DIR        results in $OUT/dp_tune.txt
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
gpus=(1); for g in 2 4; do (( g <= n )) && gpus+=("$g"); done
IFS=';' read -r -a recipes <<< "${RECIPES:---grad-reduce bf16}"
read -r -a ctas <<< "${CTAS:-default 16 8}"
sum="$out/dp_tune.txt"
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); $(date -u +%FT%TZ)" | tee "$sum"
m=/tmp/dp-1b
make_tiny_once $m --layers 16 --hidden 2048 --heads 32 --kv-heads 8 \
  --intermediate 8192 --vocab 128256 --tied --max-pos 8192 --tokens 1000000 --dtype bf16 > /dev/null
med() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows
tps = sorted(r["tokens_per_s"] for r in late); st = sorted(r["step_s"] for r in late)
print(f"{tps[len(tps)//2]:.0f} tok/s, step {st[len(st)//2]:.4f} s, peak {max(r['peak_device_bytes'] for r in rows)/2**30:.2f} GiB")
PY
}
i=0
for rec in "${recipes[@]}"; do
  for g in "${gpus[@]}"; do
    for c in "${ctas[@]}"; do
      [[ $g == 1 && $c != default ]] && continue
      i=$((i + 1)); f="$out/tune-$i.jsonl"
      if [[ $c == default ]]; then unset NCCL_MAX_CTAS; else export NCCL_MAX_CTAS=$c; fi
      # shellcheck disable=SC2086
      "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 4096 --batch 1 --steps 12 --gpus "$g" --json \
        $rec > "$f" 2> "${f%.jsonl}.log"
      echo "[$rec] $g GPUs, NCCL_MAX_CTAS=$c: $(med "$f" 2>&1 | tail -1)" | tee -a "$sum"
    done
  done
done
unset NCCL_MAX_CTAS
