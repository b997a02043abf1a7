# copy-lane tests and the 8B/3B state-on-host configurations at 12288/8192 tokens
#   scripts/gpu.sh lanes_check [DIR]     appends to $OUT/lanes.jsonl, stderr to $OUT/lanes.err
set -u
for t in transfer_gpu_test tiers_gpu_test paging_gpu_test; do $dir/tests/$t --gtest_brief=1 2>&1 | tail -3; done
$dir/tests/sim_gpu_test --gtest_filter='SimVsCuda.Tiny*' 2>&1 | grep -E "peak sim|PASSED|FAILED|Failure" | cut -c1-200
$dir/tests/optimizer_gpu_test --gtest_filter='*AdamW*' --gtest_brief=1 2>&1 | tail -2
b() { echo "== $*" >&2; $dir/tools/strata-bench "$@" 2>>$out/lanes.err | tee -a $out/lanes.jsonl | python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print(j['shape'],j['seq'],j['plan'],j['state_offloading'],j['master_weights'],j['optimizer_state'],j['tokens_per_s'],round(j['peak_arena_bytes']/2**30,2),'GiB')"; }
b --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state 8bit --state-offloading optimizer
b --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --master-weights none --optimizer-state bf16 --state-offloading optimizer
b --shape Llama-3-8B --seq 12288 --mode full --plan gc --steps 3 --warmup 1 --state-offloading optimizer
b --shape Llama-3.2-3B --seq 8192 --mode full --plan gc --steps 4 --warmup 2 --state-offloading optimizer
b --shape Llama-3.2-3B --seq 8192 --mode full --plan gc --steps 4 --warmup 2 --master-weights none --optimizer-state 8bit --state-offloading optimizer
