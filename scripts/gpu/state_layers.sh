# persistent state per layer and the planner's 8B configurations (check | h200 | ... | long CFG)
# On the GPU host: persistent state per layer (state_offloading_layers) and the planner's configs
# for the 8B full fine-tune.
#   scripts/gpu.sh state_layers DIR PART
#   PART: check     the GPU tests of the per-layer state and bf16 gradients
#         h200      8B 16384 gc: state on the device, on the host in every layer only, on the host
#                   everywhere; the H100 planner's config and the best all-device config
#         h200best  8B 16384: the planner's best plan under 136 GiB with every state on the device
#                   against its best with AdamW's moments on the host (strata-plan --budget 136GiB
#                   --host-budget 110GiB --state-offloading optimizer), then the gc pair again
#         noclip    8B 16384 gc without clipping (--max-grad-norm 0: the streamed update during backward):
#                   all state on the device, then AdamW's moments on the host; noclip32: in 32 layers
#         h100noclip 8B 16384 on the H100: the planner's 76 GiB config with clipping, then its config
#                   planned without clipping (--max-grad-norm 0: the update during backward)
#         h100s15   8B 12288: Hugging Face gc, then the planner's -s15 configs (same recipe
#                   under 0.75x its peak, fp32 recipe under 76 GiB), and the 16384 fp32 config
#         h100      8B 12288: Hugging Face gc, then strata's planned configs (same recipe under 0.75x
#                   its peak, fp32 recipe under 76 GiB), and the 16384 fp32 config
#         long CFG  one step of a planned long-context config (the disk tier under $OFFLOAD or /tmp)
# Appends JSON lines to $OUT/layers.jsonl (strata-bench and hf_bench.py), stderr to $OUT/layers.err.
set -uo pipefail
part=$1
cfgs=docs/bench/configs
gpu_line "$out/layers.err"
bench() { echo "== strata-bench $*" >>"$out/layers.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/layers.err" | tee -a "$out/layers.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/layers.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/layers.err" | tee -a "$out/layers.jsonl"; }
b8=(--shape Llama-3-8B --mode full --loss-chunk 1024)
case $part in
  check)
    for t in grads_bf16_gpu_test kernels_gpu_test optimizer_gpu_test model_gpu_test tiers_gpu_test sim_gpu_test; do
      [ -x "$dir/tests/$t" ] || { echo "$t: not built" | tee -a "$out/layers.err"; continue; }
      "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -4 | sed "s/^/$t: /" | tee -a "$out/layers.err"
    done ;;
  h200)
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading none
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading-layers optimizer:32
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading optimizer
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-h200-all-device-budget-136GiB.yaml
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-budget-76GiB-host-110GiB.yaml ;;
  h200best)
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-h200-all-device-budget-136GiB.yaml
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-h200-moments-on-host-budget-136GiB.yaml
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading none
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading optimizer ;;
  noclip)
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --max-grad-norm 0 --state-offloading none
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --max-grad-norm 0 --state-offloading optimizer ;;
  noclip32)
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --max-grad-norm 0 --state-offloading-layers optimizer:32
    bench "${b8[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --max-grad-norm 0 --state-offloading optimizer --eager-update ;;
  h100noclip)
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-budget-76GiB-host-110GiB-s15.yaml
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --max-grad-norm 0 --config $cfgs/8b-16384-fp32-noclip-budget-76GiB-host-110GiB-s15.yaml ;;
  h100s15)
    hf --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    bench "${b8[@]}" --seq 12288 --steps 3 --warmup 1 --config $cfgs/8b-12288-samerecipe-budget-53.8GiB-host-110GiB-s15.yaml
    bench "${b8[@]}" --seq 12288 --steps 3 --warmup 1 --config $cfgs/8b-12288-fp32-budget-76GiB-host-110GiB-s15.yaml
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-budget-76GiB-host-110GiB-s15.yaml ;;
  h100)
    hf --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    bench "${b8[@]}" --seq 12288 --steps 3 --warmup 1 --config $cfgs/8b-12288-samerecipe-budget-53.8GiB-host-110GiB.yaml
    bench "${b8[@]}" --seq 12288 --steps 3 --warmup 1 --config $cfgs/8b-12288-fp32-budget-76GiB-host-110GiB.yaml
    bench "${b8[@]}" --seq 16384 --steps 3 --warmup 1 --config $cfgs/8b-16384-fp32-budget-76GiB-host-110GiB.yaml ;;
  long)
    cfg=$2
    off=${OFFLOAD:-/tmp/strata-offload}; mkdir -p "$off"
    df -h "$off" /dev/shm | tee -a "$out/layers.err"
    free -g | tee -a "$out/layers.err"
    seq=$(sed -n 's/^sequence_len: *\([0-9]*\).*/\1/p' "$cfg")
    bench "${b8[@]}" --seq "$seq" --steps 1 --warmup 0 --config "$cfg" --offload-dir "$off"
    rm -rf "$off" ;;
esac
