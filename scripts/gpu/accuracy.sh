# measured peak and step time of the forecast-accuracy configurations (base | tiers | all)
# On the GPU host: measured peak and step time for the forecast-accuracy study (strata-plan's
# forecasts are made on a machine without a GPU and compared in docs/BENCHMARKS.md by
# tools/bench/accuracy_table.py).
#   scripts/gpu.sh accuracy DIR [base|tiers|all]
# Each config line: SHAPE SEQ MODE PLAN [paging]
export PYTHONUNBUFFERED=1
which=${1:-base}
disk=${OFFLOAD_DIR:-/tmp/strata-disk}; mkdir -p "$disk"
measure() {
  while read -r shape seq mode plan paging; do
    [ -z "$shape" ] && continue
    extra=()
    [ "$paging" = paging ] && extra=(--layer-offloading)
    $dir/tools/strata-bench --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --lora-rank 16 --loss-chunk 1024 \
      --offload-dir "$disk" --steps 3 --warmup 1 "${extra[@]}" 2>>"$out/accuracy.err" | tee -a "$out/accuracy.jsonl" |
      cut -c170-260
  done
}
if [[ $which == base || $which == all ]]; then measure <<'CONFIGS'
Llama-3.2-1B 2048 full keep
Llama-3.2-1B 2048 full gc
Llama-3.2-1B 2048 full selective
Llama-3.2-1B 4096 full keep
Llama-3.2-1B 4096 full gc
Llama-3.2-1B 4096 full selective
Llama-3.2-1B 8192 full keep
Llama-3.2-1B 8192 full gc
Llama-3.2-1B 8192 full selective
Llama-3.2-1B 16384 full keep
Llama-3.2-1B 16384 full gc
Llama-3.2-1B 16384 full selective
Llama-3.2-1B 4096 lora keep
Llama-3.2-1B 4096 lora gc
Llama-3.2-1B 16384 lora keep
Llama-3.2-1B 16384 lora gc
Llama-3.2-3B 4096 full keep
Llama-3.2-3B 4096 full gc
Llama-3-8B 8192 frozen keep
Llama-3-8B 8192 frozen gc
Llama-3-8B 4096 lora gc
CONFIGS
fi
if [[ $which == tiers || $which == all ]]; then measure <<'CONFIGS'
Llama-3.2-1B 16384 full offload
Llama-3.2-1B 16384 full legacy
Llama-3.2-1B 16384 full hidden_states
Llama-3-8B 8192 frozen keep paging
Llama-3-8B 8192 frozen gc paging
Llama-3-8B 8192 frozen hidden_states paging
Llama-3-8B 4096 lora keep paging
Llama-3-8B 8192 frozen offload
CONFIGS
fi
