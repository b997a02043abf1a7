#!/usr/bin/env bash
# On the GPU host: measured peak and step time for the forecast-accuracy study (strata-plan's
# forecasts are made on a machine without a GPU and compared in docs/BENCHMARKS.md).
# Each line: SHAPE SEQ MODE PLAN
export PYTHONUNBUFFERED=1
d=${1:-.devbuild}
while read -r shape seq mode plan; do
  [ -z "$shape" ] && continue
  $d/tools/strata-bench --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --lora-rank 16 --loss-chunk 1024 \
    --steps 3 --warmup 1 2>>"$OUT/accuracy.err" | tee -a "$OUT/accuracy.jsonl" | cut -c170-260
done <<'CONFIGS'
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
