# strata-plan's acceptance run: the 1B at 32768 under 30% of keep's activations
# On the GPU host: strata-plan's acceptance run. The 1B full finetune at 32768 tokens under a
# device budget of 30% of keep-everything's activation memory: the budget is keep's peak less 70%
# of the activations at that peak (from the forecast breakdown; the arena peak forecast is exact).
# The planner picks a plan (device only, then with a host budget), then strata-bench measures
# keep-everything, every preset and the planner's plans in one command on the same GPU.
#   scripts/gpu.sh plan_acceptance DIR PROFILE [HOST_BUDGET]
set -uo pipefail
profile=${1:-profiles/h200.calibrated.json}
host=${2:-64GiB}
shape=Llama-3.2-1B seq=32768 chunk=1024
common=(--model $shape --seq $seq --loss-chunk $chunk --profile "$profile")
"$dir/tools/strata-plan" "${common[@]}" --preset keep --json >"$out/accept_keep_forecast.json" 2>/dev/null
budget=$(python3 -c "
import json; f=json.load(open('$out/accept_keep_forecast.json'))['forecast']
act=[b['bytes'] for b in f['breakdown'] if b['name']=='activations'][0]
print(int(f['peak_bytes']-0.7*act))")
echo "budget $budget bytes (keep peak less 70% of its activations)"
"$dir/tools/strata-plan" "${common[@]}" --budget "$budget" --write-config "$out/accept_auto_device.yaml" \
  >"$out/accept_auto_device.txt" 2>&1
"$dir/tools/strata-plan" "${common[@]}" --budget "$budget" --host-budget "$host" \
  --write-config "$out/accept_auto_host.yaml" >"$out/accept_auto_host.txt" 2>&1
grep -h "^planner:\|^step time" "$out"/accept_auto_*.txt
run() {  # label, then strata-bench arguments
  local label=$1; shift
  "$dir/tools/strata-bench" --shape $shape --seq $seq --loss-chunk $chunk --steps 3 --warmup 1 "$@" \
    2>>"$out/accept.err" | sed "s/^{/{\"label\": \"$label\", \"budget\": $budget, /" | tee -a "$out/accept.jsonl" |
    cut -c1-40,200-330
}
for p in keep gc selective hidden_states offload; do run "$p" --plan $p; done
run auto_device --config "$out/accept_auto_device.yaml" --device-memory "$budget"
run auto_host --config "$out/accept_auto_host.yaml" --device-memory "$budget"
