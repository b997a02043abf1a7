# vocabulary padding, sample packing and the deferred update's copy-lane wait, with forecasts
# One GPU-host command for sample packing, vocabulary padding and the deferred
# update (the copy-lane wait), on GPU 0:
#   1. GPU tests: packing_gpu_test, model_gpu_test (PadVocabGpu among them), gemm_attention_gpu_test
#      (the flash kernel changed), kernels_gpu_test and lm_head_grad_gpu_test (the CE kernel changed);
#   2. vocabulary padding: strata-bench on a Llama-3.2-1B shape with a 50257-token vocabulary, padded
#      (64) and not (1), and with 50304 tokens, 4096 tokens, keep; with the forecast of each;
#   3. sample packing's cost: 1B at 8192, one sequence a row against 8 packed examples (strata-bench --pack);
#   4. the deferred update: 1B 8192 gc, state on the device, moments on the host deferred and eager.
#   scripts/gpu.sh pack_pad_defer DIR     results in $OUT (default /tmp/strata-out): gpu_tests.txt, bench.jsonl
set -u
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
: >"$out/gpu_tests.txt"; gpu_line "$out/gpu_tests.txt" | head -1
for t in packing_gpu_test model_gpu_test gemm_attention_gpu_test kernels_gpu_test optimizer_gpu_test lm_head_grad_gpu_test; do
  [[ -x $dir/tests/$t ]] || { echo "$t: not built" | tee -a "$out/gpu_tests.txt"; continue; }
  "$dir/tests/$t" > "$out/$t.log" 2>&1
  echo "$t: exit $? | $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tr '\n' ' ')" | tee -a "$out/gpu_tests.txt"
  grep -E "^\[  FAILED  \]|Failure" -A4 "$out/$t.log" | head -30 >> "$out/gpu_tests.txt"
done
mk() {  # DIR VOCAB: a Llama-3.2-1B-shaped config.json with that vocabulary (strata-bench --model: random init)
  mkdir -p "$1"
  printf '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": %d, "tie_word_embeddings": true, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "max_position_embeddings": 131072, "hidden_act": "silu", "torch_dtype": "bfloat16"}\n' "$2" > "$1/config.json"
}
mk /tmp/v50257 50257; mk /tmp/v50304 50304
bench() { echo "== strata-bench $*" >> "$out/bench.err"; "$dir/tools/strata-bench" "$@" 2>> "$out/bench.err" | tee -a "$out/bench.jsonl"; }
pick_profile
plan() {
  echo "== strata-plan $*" >> "$out/bench.err"
  "$dir/tools/strata-plan" "$@" --profile "$prof" --json 2>> "$out/bench.err" | python3 -c '
import json, sys; d = json.load(sys.stdin); f = d["forecast"]
print(json.dumps({"forecast": sys.argv[1:], "step_s": f["step_s"], "peak_bytes": f["peak_bytes"]}))' "$@" | tee -a "$out/bench.jsonl"
}
for spec in "/tmp/v50257 1" "/tmp/v50257 64" "/tmp/v50304 1"; do
  read -r m pv <<<"$spec"
  bench --model "$m" --seq 4096 --mode full --plan keep --steps 6 --warmup 2 --pad-vocab "$pv"
  plan --model "$m" --seq 4096 --mode full --preset keep --pad-vocab "$pv"
done
for n in 1 8; do  # sample packing: 8 examples of 1024 tokens a row (our flash kernel) against one sequence (cuDNN)
  bench --shape Llama-3.2-1B --seq 8192 --mode full --plan keep --steps 4 --warmup 2 --pack $n
done
b1=(--shape Llama-3.2-1B --seq 8192 --mode full --plan gc --steps 4 --warmup 2)
bench "${b1[@]}" --state-offloading none
bench "${b1[@]}" --state-offloading optimizer
bench "${b1[@]}" --state-offloading optimizer --eager-update
