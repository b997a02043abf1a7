#!/bin/bash
# ZeRO's rounds before and after a candidate's unbounded forecast is reused under another budget, one after the
# other per case on the idle 2-core machine: BASE = strata-plan built at 49517d0 (its planner unchanged through 927eec8), NEW = built at d72d765 (build-cpu,
# Release). times3.txt: case, build, wall and user seconds, peak RSS, the answer, sim runs.
cd /work/main
O=docs/bench/2026-11-30-layout-dominance
H=profiles/h100_80gb.calibrated.json
run() { name=$1; shift; for bin in "$BASE" "$NEW"; do tag=$([ "$bin" = "$BASE" ] && echo base || echo new); /usr/bin/time -f "%e %U %MKB" -o /tmp/t.txt $bin "$@" > $O/$name.$tag.out 2>&1; echo "$name $tag wall/user/rss $(cat /tmp/t.txt) | $(grep -E '^fits:' $O/$name.$tag.out | cut -c1-80) | $(grep -oE '[0-9]+ sim runs' $O/$name.$tag.out | tail -1)"; done; }
run qwen3-8b-64k-dp4-zero3 --model Qwen3-8B --seq 65536 --gpus 4 --sequence-parallel 1 --zero-stage 3 --budget 60GiB --host-budget 80GiB --disk-budget 50GiB --profile $H --plan-time-limit 300
run qwen3-8b-64k-4gpus --model Qwen3-8B --seq 65536 --gpus 4 --budget 60GiB --host-budget 80GiB --disk-budget 50GiB --profile $H --plan-time-limit 300
# NEW alone under the default 60 s limit (no --plan-time-limit): the answer it gives by then.
one() { name=$1; shift; /usr/bin/time -f "%e %U %MKB" -o /tmp/t.txt $NEW "$@" > $O/$name.limit60.out 2>&1; echo "$name limit60 wall/user/rss $(cat /tmp/t.txt) | $(grep -E '^fits:' $O/$name.limit60.out | cut -c1-80) | $(grep -c 'stopped at its time limit' $O/$name.limit60.out) limit stops"; }
M=docs/bench/2026-11-29-cpu-plan-times/llama-3-8b-1m.config.json
one 1m-2gpus --model $M --seq 1048576 --gpus 2 --budget 76GiB --host-budget 110GiB --disk-budget 55GiB --master-weights none --optimizer-state 8bit --gradients bf16 --profile profiles/h200.calibrated.json
one qwen3-8b-64k-4gpus --model Qwen3-8B --seq 65536 --gpus 4 --budget 60GiB --host-budget 80GiB --disk-budget 50GiB --profile $H
