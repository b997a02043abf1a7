#!/bin/bash
# Layout searches on the 2-core development machine, before and after (one after the other per case, idle cores):
# BASE = strata-plan built at 6f9a7a0, NEW = built at 49517d0, with the lower-stage rule counting ZeRO-3's state moves, no ZeRO
# searched for its paged plans alone, and the sim's LoRA adapters left uninitialised (build-cpu, Release).
# times.txt: case, build, wall and user seconds, the answer, sim runs; *.out: each answer.
cd /work/main
O=docs/bench/2026-11-30-layout-dominance
b="--budget 76GiB --host-budget 110GiB --disk-budget 55GiB"; r="--master-weights none --optimizer-state 8bit --gradients bf16"
H=profiles/h100_80gb.calibrated.json; P=profiles/h200.calibrated.json; M=docs/bench/2026-11-29-cpu-plan-times/llama-3-8b-1m.config.json
run() { name=$1; shift; for bin in "$BASE" "$NEW"; do tag=$([ "$bin" = "$BASE" ] && echo base || echo new); /usr/bin/time -f "%e %U" -o /tmp/t.txt $bin "$@" > $O/$name.$tag.out 2>&1; echo "$name $tag wall/user $(cat /tmp/t.txt) | $(grep -E '^fits:' $O/$name.$tag.out | cut -c1-80) | $(grep -oE '[0-9]+ sim runs' $O/$name.$tag.out | tail -1)"; done; }
run 1m-4gpus --model $M --seq 1048576 --gpus 4 $b $r --profile $P --plan-time-limit 300
run 3b-128k-2gpus --model Llama-3.2-3B --seq 131072 --gpus 2 --budget 40GiB --host-budget 60GiB --profile $P --plan-time-limit 300
run 8b-lora-256k-4gpus --model Llama-3-8B --mode lora --seq 262144 --gpus 4 --budget 40GiB --host-budget 60GiB --profile $H --plan-time-limit 300
