# 8B full fine-tune with the persistent state on the host tier (check | h100-16k | h100-long | h200-ratio)
# On the GPU host: persistent state on the host tier (state_offloading), 8B full fine-tune.
#   scripts/gpu.sh bench_state DIR PART     PART: check | h100-16k | h100-long | h200-ratio
# Appends JSON lines to $OUT/state.jsonl (strata-bench and hf_bench.py), stderr to $OUT/state.err.
set -uo pipefail
part=$1
gpu_line "$out/state.err"
bench() { echo "== strata-bench $*" >>"$out/state.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/state.err" | tee -a "$out/state.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/state.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/state.err" | tee -a "$out/state.jsonl"; }
case $part in
  check)
    for t in model_gpu_test tiers_gpu_test sim_gpu_test paging_gpu_test kernels_gpu_test optimizer_gpu_test; do
      "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -4 | tee -a "$out/state.err"
    done
    # The same 1B steps with the state on the device and on the host: the losses must agree.
    for lvl in none optimizer master all; do
      bench --shape Llama-3.2-1B --seq 2048 --mode full --plan gc --steps 3 --warmup 1 --state-offloading $lvl
    done ;;
  h100-16k)
    bench --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 --state-offloading optimizer
    hf --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    bench --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --state-offloading optimizer ;;
  h100-long)
    bench --shape Llama-3-8B --seq 65536 --mode full --plan hidden_states --steps 1 --warmup 1 --state-offloading optimizer
    bench --shape Llama-3-8B --seq 131072 --mode full --plan gc --steps 1 --warmup 1 --state-offloading all ;;
  h200-ratio)
    bench --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 --state-offloading none
    bench --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 --state-offloading optimizer ;;
esac
