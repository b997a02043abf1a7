# bf16 gradients: tests, same recipe as Hugging Face, loss curves, 2 ranks (check | same | curves | dp)
# On the GPU host: gradients: bf16 (engine/state_recipe.h).
#   scripts/gpu.sh grads_bf16 DIR PART   PART: check | same | curves | dp
# check: the gpu tests of bf16 gradients (and the ones their kernels touch); same: Hugging Face's bf16
# recipe against strata's with fp32 and bf16 gradients (peak and step); curves: 300-step loss curves of
# fp32 and bf16 gradients; dp: two ranks with bf16 gradients (all-reduced in bf16) against fp32 ones.
# Appends JSON lines to $OUT/grads_bf16.jsonl and $OUT/grads_bf16_curves.jsonl, stderr to $OUT/grads_bf16.err.
set -uo pipefail
part=$1
gpu_line "$out/grads_bf16.err"
bench() { echo "== strata-bench $*" >>"$out/grads_bf16.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/grads_bf16.err" | tee -a "$out/grads_bf16.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/grads_bf16.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/grads_bf16.err" | tee -a "$out/grads_bf16.jsonl"; }
same="--master-weights none --optimizer-state bf16"
case $part in
  check)
    "$dir/tests/grads_bf16_gpu_test" 2>&1 | tail -25 | tee -a "$out/grads_bf16.err"
    "$dir/tests/sim_gpu_test" --gtest_filter='SimVsCuda.Bf16Gradients*:SimVsCuda.Tiny*' 2>&1 | tail -25 | tee -a "$out/grads_bf16.err"
    for t in kernels_gpu_test optimizer_gpu_test gemm_attention_gpu_test lm_head_grad_gpu_test mlp_tiles_gpu_test model_gpu_test tiers_gpu_test; do
      "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -3 | tee -a "$out/grads_bf16.err"
    done ;;
  same)
    for cfg in "Llama-3.2-1B 4096 keep" "Llama-3.2-1B 4096 gc" "Llama-3.2-3B 8192 keep" "Llama-3.2-3B 8192 gc"; do
      set -- $cfg
      hf --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2
      bench --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2 $same
      bench --shape "$1" --seq "$2" --mode full --plan "$3" --steps 4 --warmup 2 $same --gradients bf16
    done ;;
  curves)
    m=/tmp/grads-bf16-model
    "$dir/tools/strata-make-tiny" $m --layers 8 --hidden 1024 --heads 16 --kv-heads 4 --intermediate 2816 \
      --vocab 8192 --tokens 4000000 --max-pos 4096 >>"$out/grads_bf16.err" 2>&1
    for r in "fp32 fp32 fp32" "fp32 fp32 bf16" "none bf16 fp32" "none bf16 bf16"; do
      set -- $r
      "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 1024 --batch 4 --steps 300 --lr 3e-4 \
        --warmup-steps 20 --backend cuda --json --master-weights "$1" --optimizer-state "$2" --gradients "$3" \
        2>>"$out/grads_bf16.err" |
        sed "s/^{/{\"master_weights\": \"$1\", \"optimizer_state\": \"$2\", \"gradients\": \"$3\", /" \
          >>"$out/grads_bf16_curves.jsonl"
      tail -1 "$out/grads_bf16_curves.jsonl" | cut -c1-200
    done ;;
  dp)
    m=/tmp/grads-bf16-model
    [ -d $m ] || "$dir/tools/strata-make-tiny" $m --layers 8 --hidden 1024 --heads 16 --kv-heads 4 \
      --intermediate 2816 --vocab 8192 --tokens 4000000 --max-pos 4096 >>"$out/grads_bf16.err" 2>&1
    for g in fp32 bf16; do
      "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 1024 --batch 4 --steps 50 --lr 3e-4 \
        --backend cuda --gpus 2 --json --gradients $g 2>>"$out/grads_bf16.err" |
        sed "s/^{/{\"gpus\": 2, \"gradients\": \"$g\", /" >>"$out/grads_bf16_curves.jsonl"
      tail -1 "$out/grads_bf16_curves.jsonl" | cut -c1-200
    done ;;
esac
