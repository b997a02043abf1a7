# the deferred optimizer update against the eager one, state on the host (check | h200-ratio | h100-8b)
# On the GPU host: the deferred optimizer update (model/train/optimizer.h) against the eager one, with the
# state on the host tier, and the all-device plan and Hugging Face as baselines in the same command.
#   scripts/gpu.sh bench_defer DIR PART     PART: check | h200-ratio | h100-8b
# Appends JSON lines to $OUT/defer.jsonl (strata-bench and hf_bench.py), stderr to $OUT/defer.err.
set -uo pipefail
part=$1
gpu_line "$out/defer.err"
bench() { echo "== strata-bench $*" >>"$out/defer.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/defer.err" | tee -a "$out/defer.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/defer.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/defer.err" | tee -a "$out/defer.jsonl"; }
b8=(--shape Llama-3-8B --mode full --plan gc --steps 3 --warmup 1)
case $part in
  check)
    # The same 1B steps, state on the device, on the host deferred, on the host eager: losses agree.
    for lvl in none optimizer all; do
      bench --shape Llama-3.2-1B --seq 2048 --mode full --plan gc --steps 4 --warmup 0 --state-offloading $lvl
    done
    bench --shape Llama-3.2-1B --seq 2048 --mode full --plan gc --steps 4 --warmup 0 --state-offloading all --eager-update ;;
  h200-ratio)
    bench "${b8[@]}" --seq 16384 --state-offloading none
    bench "${b8[@]}" --seq 16384 --state-offloading optimizer
    bench "${b8[@]}" --seq 16384 --state-offloading optimizer --eager-update ;;
  h100-8b)
    hf --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    bench "${b8[@]}" --seq 12288 --state-offloading optimizer
    bench "${b8[@]}" --seq 12288 --state-offloading optimizer --eager-update
    bench "${b8[@]}" --seq 12288 --state-offloading optimizer --master-weights none --optimizer-state bf16
    bench "${b8[@]}" --seq 12288 --state-offloading optimizer --master-weights none --optimizer-state 8bit
    bench "${b8[@]}" --seq 16384 --state-offloading optimizer ;;
esac
