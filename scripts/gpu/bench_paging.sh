# weight paging on the 8B frozen base, and the 8B frozen 32768 presets beside Hugging Face gc
# On the GPU host: weight paging on the 8B frozen base, and the 8B frozen 32k presets with HF gc.
#   scripts/gpu.sh bench_paging [DIR]     appends to $OUT/bench.jsonl, stderr to $OUT/bench.err
export PYTHONUNBUFFERED=1
$dir/tests/paging_gpu_test --gtest_color=no 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
for p in keep gc hidden_states; do
  $dir/tools/strata-bench --shape Llama-3-8B --mode frozen --seq 8192 --plan $p --layer-offloading --steps 3 --warmup 1 \
    2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c150-420
done
for p in gc hidden_states; do
  $dir/tools/strata-bench --shape Llama-3-8B --mode frozen --seq 32768 --plan $p --steps 2 --warmup 1 \
    2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c150-330
done
python3 tools/bench/hf_bench.py --shape Llama-3-8B --mode frozen --seq 32768 --plan gc --steps 2 --warmup 1 \
  2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c1-250
