#!/bin/bash
# Plan times on this 2-core machine, the build before and after the sim's repeated tiles, one after the other in one
# session: BASE=strata-plan built at e98f1e4, NEW=strata-plan built at 6b24aa0 (build-cpu, Release).
# times.txt: name, build, wall and user seconds, the answer, whether the time limit stopped it, sim runs.
# The full 8B at 1,048,576 on 4 GPUs: BASE 211.20 s wall, 360.24 s user, 2,009 tokens/s, 41,939 sim runs; NEW 178.61 s,
# 305.33 s, the same; with the layouts' new order (6b24aa0's successor, 1m-4gpus-full-8b.plan.txt) 147.88 s, 254.23 s,
# the same answer, 35,258 sim runs; under the default 60 s limit BASE answered 1,611 tokens/s, NEW 1,733, and the new
# order 2,009 (1m-4gpus-full-8b.limit60.plan.txt). 4M8: the new order 40.63 s, 51.40 s; then without the sim's state-file
# bounce buffer (4M8.plan.txt) 39.72 s, 49.51 s; 782 tokens/s and 7,563 sim runs each time.
#   $BIN --model llama-3-8b-1m.config.json --seq 1048576 --gpus 4 $b $r --profile profiles/h200.calibrated.json \
#     --plan-time-limit 300
cd /work/main
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"; r="--master-weights none --optimizer-state 8bit --gradients bf16"; P=profiles/h100_80gb.calibrated.json
run() { name=$1; shift; for bin in "$BASE" "$NEW"; do tag=$(basename $(dirname $bin)); /usr/bin/time -f "%e %U" -o /tmp/t.txt $bin "$@" > /tmp/o.$name.$tag.out 2>&1; echo "$name $tag wall/user $(cat /tmp/t.txt) | $(grep -E '^fits:' /tmp/o.$name.$tag.out | cut -c1-80) | stops $(grep -c 'stopped at its time limit' /tmp/o.$name.$tag.out) | $(grep -oE '[0-9]+ sim runs' /tmp/o.$name.$tag.out | tail -1)"; done; }
run 262k --model Llama-3-8B --seq 262144 $b $r --profile $P --plan-time-limit 300
run 524k --model Llama-3-8B --seq 524288 $b $r --profile $P --plan-time-limit 300
run 4M8 --model Llama-3-8B --seq 4194304 --gpus 8 $b --profile $P --plan-time-limit 900
