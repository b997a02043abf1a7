#!/bin/bash
# Plan times on the 2-core development machine, before and after the sim run's cheaper bookkeeping, one build after
# the other for each case: BASE = strata-plan built at a598bf9, NEW = built at the merge after daaaa6d (build-cpu,
# Release). times2.txt: case, build, wall and user seconds, the answer, time-limit stops, sim runs.
cd /work/main
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"; r="--master-weights none --optimizer-state 8bit --gradients bf16"
H=profiles/h100_80gb.calibrated.json; P=profiles/h200.calibrated.json; M=docs/bench/2026-11-29-cpu-plan-times/llama-3-8b-1m.config.json
run() { name=$1; shift; for bin in "$BASE" "$NEW"; do tag=$([ "$bin" = "$BASE" ] && echo base || echo new); /usr/bin/time -f "%e %U" -o /tmp/t.txt $bin "$@" > /tmp/o.$name.$tag.out 2>&1; echo "$name $tag wall/user $(cat /tmp/t.txt) | $(grep -E '^fits:' /tmp/o.$name.$tag.out | cut -c1-80) | stops $(grep -c 'stopped at its time limit' /tmp/o.$name.$tag.out) | $(grep -oE '[0-9]+ sim runs' /tmp/o.$name.$tag.out | tail -1)"; done; }
run 262k --model Llama-3-8B --seq 262144 $b $r --profile $H --plan-time-limit 300
run 524k --model Llama-3-8B --seq 524288 $b $r --profile $H --plan-time-limit 300
run 4M8 --model Llama-3-8B --seq 4194304 --gpus 8 $b --profile $H --plan-time-limit 900
run 1m-4gpus --model $M --seq 1048576 --gpus 4 $b $r --profile $P --plan-time-limit 300
run 1m-sp4-z3 --model $M --seq 1048576 --gpus 4 --sequence-parallel 4 --zero-stage 3 $b $r --profile $P --plan-time-limit 300
