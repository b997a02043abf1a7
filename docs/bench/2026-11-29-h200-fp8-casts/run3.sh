#!/usr/bin/env bash
# run 3: cast v2 + no transposed codes in the first forward under recompute + replays from the kept scale (.devbuild)
# against HEAD (.basebuild); Hugging Face at 8B 16384 gc; the kernel trace of the new fp8 step
set -uo pipefail
rm -rf .devbuild .basebuild; tar -xJf .carry/devbuild.tar.xz; export OUT; mkdir -p /work; [ -e /work/main ] || ln -s "$PWD" /work/main
nvidia-smi --query-gpu=name,memory.total,power.limit,driver_version --format=csv,noheader | tee $OUT/gpu.txt; date -u
for t in fp8_gpu_test op_table_gpu_test; do
  timeout 120 .devbuild/tests/$t --gtest_color=no > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"
done
grep -E "Failure|first at|scale block" $OUT/fp8_gpu_test.log | head -5
hf=(--master-weights none --optimizer-state bf16 --gradients bf16)
b8=(--shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 "${hf[@]}")
b1=(--shape Llama-3.2-1B --seq 4096 --mode full --plan keep --steps 4 --warmup 2 "${hf[@]}")
run() {  # ROW BUILD FLAGS...
  local row=$1 d=$2; shift 2
  local line; line=$(timeout 200 $d/tools/strata-bench --backend cuda "$@" 2>>$OUT/bench.err | tail -1)
  [ -n "$line" ] || line='{"error": "no output"}'
  echo "{\"row\": \"$row\", \"build\": \"$d\", \"result\": $line}" >> $OUT/r3.jsonl
  echo "$row $d $(echo "$line" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r.get("tokens_per_s"), r.get("step_s"), r.get("peak_arena_bytes"), r.get("mfu"))' 2>&1)"
}
run "8B 16384 gc fp8" .basebuild "${b8[@]}" --fp8
run "8B 16384 gc fp8" .devbuild "${b8[@]}" --fp8
run "8B 16384 gc bf16" .devbuild "${b8[@]}"
run "8B 16384 gc fp8" .devbuild "${b8[@]}" --fp8
run "1B 4096 keep fp8" .devbuild "${b1[@]}" --fp8
run "1B 4096 keep bf16" .devbuild "${b1[@]}"
export STRATA_CUPTI_LIB=$(ls "$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])')"/*/lib/libcupti.so* 2>/dev/null | head -1)
STRATA_KERNEL_TRACE=1 timeout 150 .devbuild/tools/strata-bench --backend cuda "${b8[@]}" --fp8 > $OUT/trace-fp8-new.txt 2>&1
grep -E "fp8_cast|kernel trace:|timeline" $OUT/trace-fp8-new.txt | cut -c1-160
date -u
timeout 200 python3 tools/bench/hf_bench.py --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 > $OUT/hf.txt 2> $OUT/hf.err; echo "hf rc=$?"; tail -1 $OUT/hf.txt | cut -c1-400
date -u
