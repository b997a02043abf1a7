# 8B frozen base at 8192 and 32768 tokens: every preset beside Hugging Face gc and gc+offload
#   scripts/gpu.sh bench_8b_tiers [DIR]     appends to $OUT/bench.jsonl, stderr to $OUT/bench.err
export PYTHONUNBUFFERED=1
for p in keep gc selective hidden_states offload disk; do "$dir"/tools/strata-bench --shape Llama-3-8B --mode frozen --seq 8192 --plan $p --steps 3 --warmup 1 --offload-dir /tmp/strata-disk 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c150-330; done
for p in gc gc+offload; do python3 tools/bench/hf_bench.py --shape Llama-3-8B --mode frozen --seq 8192 --plan $p --steps 3 --warmup 1 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c1-250; done
for p in keep gc hidden_states offload; do "$dir"/tools/strata-bench --shape Llama-3-8B --mode frozen --seq 32768 --plan $p --steps 2 --warmup 1 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c150-330; done
python3 tools/bench/hf_bench.py --shape Llama-3-8B --mode frozen --seq 32768 --plan gc --steps 2 --warmup 1 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | cut -c1-250
