#!/bin/bash
# The planner's times on the 2-core development machine with nothing else running, NEW = strata-plan built at the
# commit that reuses a candidate's unbounded forecast under another budget (build-cpu, Release): PLANNER.md's "How
# long an 8B takes". times2.txt: case, wall and user seconds, the answer, sim runs; *.run2.out: each answer.
cd /work/main
O=docs/bench/2026-11-30-layout-dominance
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"; r="--master-weights none --optimizer-state 8bit --gradients bf16"
H=profiles/h100_80gb.calibrated.json; P=profiles/h200.calibrated.json; M=docs/bench/2026-11-29-cpu-plan-times/llama-3-8b-1m.config.json
run() { name=$1; shift; /usr/bin/time -f "%e %U" -o /tmp/t.txt $NEW "$@" > $O/$name.run2.out 2>&1; echo "$name wall/user $(cat /tmp/t.txt) | $(grep -E '^(fits:|max-seq:)' $O/$name.run2.out | head -1 | cut -c1-110) | $(grep -oE '[0-9]+ sim runs' $O/$name.run2.out | tail -1)"; }
run 262k --model Llama-3-8B --seq 262144 $b $r --profile $H --plan-time-limit 300
run 524k --model Llama-3-8B --seq 524288 $b $r --profile $H --plan-time-limit 300
run 4M8 --model Llama-3-8B --seq 4194304 --gpus 8 $b --profile $H --plan-time-limit 900
run 1m-4gpus --model $M --seq 1048576 --gpus 4 $b $r --profile $P --plan-time-limit 300
run 1m-4gpus-limit60 --model $M --seq 1048576 --gpus 4 $b $r --profile $P
run 1m-sp4-z2 --model $M --seq 1048576 --gpus 4 --sequence-parallel 4 --zero-stage 2 $b $r --profile $P --plan-time-limit 300
run 1m-2gpus --model $M --seq 1048576 --gpus 2 $b $r --profile $P --plan-time-limit 300
run qwen3-8b-64k-4gpus --model Qwen3-8B --seq 65536 --gpus 4 --budget 60GiB --host-budget 80GiB --disk-budget 50GiB --profile $H --plan-time-limit 300
run 8b-lora-256k-4gpus --model Llama-3-8B --mode lora --seq 262144 --gpus 4 --budget 40GiB --host-budget 60GiB --profile $H --plan-time-limit 300
run max-seq --model Llama-3-8B --max-seq $b --profile $H --plan-time-limit 0
run max-seq-lean --model Llama-3-8B --max-seq $b $r --profile $H --plan-time-limit 0
