#!/usr/bin/env bash
# On the GPU host: Nsight Compute on strata's own kernels as they run in a training step (clocks
# left alone, as the device notes ask), two passes: the backward's memory-bound kernels, then the
# forward's. The first (warm-up) step's launches are skipped.
#   scripts/gpu_ncu.sh DIR ["SHAPE SEQ MODE PLAN"]
# Writes $OUT/ncu_bwd.txt and $OUT/ncu_fwd.txt (full text reports) and prints, per kernel launch,
# its duration, DRAM and memory throughput (% of peak), achieved occupancy and registers.
set -uo pipefail
dir=${1:-.devbuild}
read -r shape seq mode plan <<<"${2:-Llama-3.2-1B 4096 full keep}"
out=${OUT:-/tmp/strata-out}; mkdir -p "$out"
prof() {  # tag regex skip count
  ncu --clock-control none --print-kernel-base function -k "regex:$2" --launch-skip "$3" --launch-count "$4" \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --steps 1 --warmup 1 \
    >"$out/ncu_$1.txt" 2>&1
  echo "== ncu $1 rc=$?"
  grep -E "^  [A-Za-z_].*\([0-9]+, [0-9]+, [0-9]+\)x|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|^    (One or More|The kernel|Every|On average)" \
    "$out/ncu_$1.txt" | sed -E 's/ +/ /g' | cut -c1-170
}
# Per step on the 1B (16 layers): 33 rmsnorm_bwd_rows, 16 SwigluBwd, 4 ce_fwd_bwd, 33 rmsnorm_fwd,
# 16 SwigluFwd, 64 rope, 32 AddFwd launches.
prof bwd "rmsnorm_bwd_rows|SwigluBwd|ce_fwd_bwd" 53 8
prof fwd "rmsnorm_fwd|SwigluFwd|rope_kernel|AddFwd" 145 8
