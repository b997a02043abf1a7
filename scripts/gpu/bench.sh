# strata-bench and the Hugging Face baseline on the same configurations, same command
# On the GPU host: strata-bench and the Hugging Face baseline on the same configs, same run.
#   [REPEAT=N] scripts/gpu.sh bench DIR "SHAPE SEQ MODE PLAN [CONFIG]" ...   (PLAN: keep | gc)
# CONFIG (optional): a strata-train YAML (strata-plan --budget --write-config) that strata runs
# instead of PLAN (its plan, arena budget and loss chunk); Hugging Face still runs PLAN.
# Appends one JSON line per run to $OUT/bench.jsonl. REPEAT=N (default 1) runs each config's
# strata/Hugging Face pair N times in a row, for configurations that sit near a target.
set -uo pipefail
for cfg in "$@"; do
  read -r shape seq mode plan config <<<"$cfg"
  strata_plan=(--plan "$plan")
  [ -n "${config:-}" ] && strata_plan=(--config "$config")
  for _ in $(seq "${REPEAT:-1}"); do
    "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" "${strata_plan[@]}" --steps 4 --warmup 2 \
      2>>"$out/bench.err" | tee -a "$out/bench.jsonl"
    python3 tools/bench/hf_bench.py --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --steps 4 --warmup 2 \
      2>>"$out/bench.err" | tee -a "$out/bench.jsonl"
  done
done
