# the state's precision: master weights and optimizer state (check | curves | same | 8b)
# On the GPU host: the state's precision (master_weights, optimizer_state; engine/state_recipe.h).
#   scripts/gpu.sh bench_recipe DIR PART   PART: check | curves | same | 8b
# Appends JSON lines to $OUT/recipe.jsonl (strata-bench, hf_bench.py) and $OUT/curves.jsonl
# (strata-train per step), stderr to $OUT/recipe.err.
set -uo pipefail
part=$1
gpu_line "$out/recipe.err"
bench() { echo "== strata-bench $*" >>"$out/recipe.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/recipe.err" | tee -a "$out/recipe.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/recipe.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/recipe.err" | tee -a "$out/recipe.jsonl"; }
same="--master-weights none --optimizer-state bf16"
case $part in
  check)
    for t in kernels_gpu_test optimizer_gpu_test sim_gpu_test; do
      "$dir/tests/$t" --gtest_brief=1 2>&1 | grep -v "^\[ *OK" | tail -25 | tee -a "$out/recipe.err"
    done
    for t in model_gpu_test tiers_gpu_test paging_gpu_test gemm_attention_gpu_test lm_head_grad_gpu_test transfer_gpu_test; do
      "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -3 | tee -a "$out/recipe.err"
    done ;;
  curves)
    # Loss curves of each precision on one learnable synthetic task (strata-make-tiny): 300 steps.
    m=/tmp/recipe-model
    "$dir/tools/strata-make-tiny" $m --layers 8 --hidden 1024 --heads 16 --kv-heads 4 --intermediate 2816 \
      --vocab 8192 --tokens 4000000 --max-pos 4096 >>"$out/recipe.err" 2>&1
    for r in "fp32 fp32" "fp32 bf16" "fp32 8bit" "none bf16" "none 8bit" "none fp32"; do
      set -- $r
      "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 1024 --batch 4 --steps 300 --lr 3e-4 \
        --warmup-steps 20 --backend cuda --json --master-weights "$1" --optimizer-state "$2" 2>>"$out/recipe.err" |
        sed "s/^{/{\"master_weights\": \"$1\", \"optimizer_state\": \"$2\", /" >>"$out/curves.jsonl"
      tail -1 "$out/curves.jsonl" | cut -c1-200
    done ;;
  same)
    for cfg in "Llama-3.2-1B 4096 keep" "Llama-3.2-1B 4096 gc" "Llama-3.2-3B 8192 keep" "Llama-3.2-3B 8192 gc"; do
      set -- $cfg
      hf --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2
      bench --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2 $same
      bench --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2 --master-weights none --optimizer-state 8bit
      bench --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2 $same --state-offloading optimizer
    done
    # The default recipe with the host tier, 3B at 8192 (against the gc baseline above).
    bench --shape Llama-3.2-3B --seq 8192 --mode full --plan gc --steps 4 --warmup 2 --state-offloading optimizer ;;
  8b)
    hf --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    bench --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state 8bit
    bench --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 $same --state-offloading optimizer
    bench --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state 8bit --state-offloading optimizer ;;
esac
