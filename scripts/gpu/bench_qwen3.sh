# Qwen3-8B full fine-tune at 16384-65536 tokens beside Hugging Face (check | 16k | long | long2 | hf8k)
# On the GPU host: the seed documents' Qwen3-8B table — full fine-tune, default fp32
# recipe, at 16384, 32768 and 65536 tokens with checkpointing, with hidden-state offloading, and
# with strata-plan --budget 76GiB --host-budget 100GiB's own plan (docs/bench/*qwen3-8b-plan-*.yaml),
# beside Hugging Face's bf16 recipe with checkpointing.
#   scripts/gpu.sh bench_qwen3 DIR PART     PART: check | 16k | long | long2 | hf8k
# (long runs past the device tool's 10 minutes on an H100: long2 is its 65536 tail.)
# Appends JSON lines to $OUT/qwen3.jsonl (strata-bench and hf_bench.py), stderr to $OUT/qwen3.err.
set -uo pipefail
part=$1
gpu_line "$out/qwen3.err"
bench() { echo "== strata-bench $*" >>"$out/qwen3.err"; "$dir/tools/strata-bench" "$@" 2>>"$out/qwen3.err" | tee -a "$out/qwen3.jsonl"; }
hf() { echo "== hf_bench $*" >>"$out/qwen3.err"; python3 tools/bench/hf_bench.py "$@" 2>>"$out/qwen3.err" | tee -a "$out/qwen3.jsonl" || echo "hf_bench $* failed (see qwen3.err)" | tee -a "$out/qwen3.err"; }
q=(--shape Qwen3-8B --mode full --loss-chunk 1024)
plan() { echo "docs/bench/2026-11-26-qwen3-8b-plan-$1.yaml"; }
case $part in
  check)
    for t in kernels_gpu_test optimizer_gpu_test model_gpu_test sim_gpu_test; do
      "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -6 | tee -a "$out/qwen3.err"
    done
    "$dir/tests/model_gpu_test" --gtest_filter='Hf/GoldenGpu*' 2>&1 | grep "golden gpu" | tee -a "$out/qwen3.err" ;;
  16k)
    hf --shape Qwen3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1
    hf --shape Qwen3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1
    bench "${q[@]}" --seq 16384 --plan gc --steps 3 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 16384 --plan hidden_states --steps 3 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 16384 --steps 3 --warmup 1 --config "$(plan 16384)" ;;
  long)
    bench "${q[@]}" --seq 32768 --plan gc --steps 2 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 32768 --plan hidden_states --steps 2 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 32768 --steps 2 --warmup 1 --config "$(plan 32768)"
    bench "${q[@]}" --seq 65536 --plan gc --steps 1 --warmup 1 --state-offloading master
    bench "${q[@]}" --seq 65536 --plan hidden_states --steps 1 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 65536 --steps 1 --warmup 1 --config "$(plan 65536)" ;;
  long2)
    bench "${q[@]}" --seq 65536 --plan hidden_states --steps 1 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 65536 --steps 1 --warmup 1 --config "$(plan 65536)" ;;
  hf8k)  # where Hugging Face's bf16 recipe still fits the H100 (it runs out of memory at 12288)
    hf --shape Qwen3-8B --seq 8192 --mode full --plan gc --steps 3 --warmup 1
    bench "${q[@]}" --seq 8192 --plan gc --steps 3 --warmup 1 --state-offloading optimizer
    bench "${q[@]}" --seq 8192 --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state 8bit \
      --state-offloading none ;;
esac
