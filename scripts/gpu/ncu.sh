# Nsight Compute on strata's own memory-bound kernels inside a training step
# On the GPU host: Nsight Compute on strata's own kernels as they run in a training step (clocks
# left alone, as the device notes ask), two passes: the backward's memory-bound kernels, then the
# forward's. The first (warm-up) step's launches are skipped.
#   scripts/gpu.sh ncu DIR ["SHAPE SEQ MODE PLAN"]
# Writes $OUT/ncu_bwd.txt and $OUT/ncu_fwd.txt (full text reports) and prints, per kernel launch,
# its duration, DRAM and memory throughput (% of peak), achieved occupancy and registers.
# ncu replays each kernel once per pass and backs up the memory it may touch in host memory
# between passes: the whole arena. With the default arena (the GPU's free memory, ~137 GB on an
# H200) each profiled rmsnorm launch took about a minute (2026-11-26), so the arena is held to ARENA
# (default 28GiB, enough for the 1B at 4096 with everything kept: 23.9 GiB) and only a handful of
# metrics are collected (a few passes each).
set -uo pipefail
read -r shape seq mode plan <<<"${1:-Llama-3.2-1B 4096 full keep}"
arena=${ARENA:-28GiB}
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,\
launch__registers_per_thread,launch__grid_size,launch__block_size
prof() {  # tag regex skip count
  ncu --clock-control none --print-kernel-base function -k "regex:$2" --launch-skip "$3" --launch-count "$4" \
    --metrics "$metrics" "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" \
    --device-memory "$arena" --steps 1 --warmup 1 \
    >"$out/ncu_$1.txt" 2>&1
  echo "== ncu $1 rc=$?"
  grep -E "^  [A-Za-z_].*\([0-9]+, [0-9]+, [0-9]+\)x|gpu__|dram__|sm__|launch__" "$out/ncu_$1.txt" |
    sed -E 's/ +/ /g' | cut -c1-170
}
# Per step on the 1B (16 layers): 33 rmsnorm_bwd_rows, 16 SwigluBwd, 4 ce_fwd_bwd, 33 rmsnorm_fwd,
# 16 SwigluFwd, 64 rope, 32 AddFwd launches.
prof bwd "rmsnorm_bwd_rows|SwigluBwd|ce_fwd_bwd" 53 8
prof fwd "rmsnorm_fwd|SwigluFwd|rope_kernel|AddFwd" 145 8
