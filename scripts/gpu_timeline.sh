#!/usr/bin/env bash
# On the GPU host: strata-bench with STRATA_KERNEL_TRACE=1 (CUPTI) for each config given, for the
# GPU's busy and idle time a step (the kernel table's last line) and the kernel table itself.
#   scripts/gpu_timeline.sh DIR "shape seq mode plan" ...
set -uo pipefail
dir=${1:-.devbuild}; shift
out=${OUT:-/tmp/strata-out}; mkdir -p "$out"
site=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null)
[ -z "${STRATA_CUPTI_LIB:-}" ] && export STRATA_CUPTI_LIB=$(ls "$site"/*/lib/libcupti.so* 2>/dev/null | head -1)
for cfg in "$@"; do
  read -r shape seq mode plan <<<"$cfg"
  echo "== $cfg" | tee -a "$out/timeline.txt"
  STRATA_KERNEL_TRACE=1 "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" \
    --steps 3 --warmup 2 >>"$out/timeline.txt" 2>&1
  grep -E "timeline|tok/s" "$out/timeline.txt" | tail -2
done
