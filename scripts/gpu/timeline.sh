# strata-bench with the CUPTI kernel trace: GPU busy and idle time a step, per configuration
# On the GPU host: strata-bench with STRATA_KERNEL_TRACE=1 (CUPTI) for each config given, for the
# GPU's busy and idle time a step (the kernel table's last line) and the kernel table itself.
#   scripts/gpu.sh timeline DIR "shape seq mode plan [strata-bench flags...]" ...
set -uo pipefail
use_cupti
for cfg in "$@"; do
  read -r shape seq mode plan rest <<<"$cfg"
  echo "== $cfg" | tee -a "$out/timeline.txt"
  STRATA_KERNEL_TRACE=1 "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" \
    --steps 3 --warmup 2 ${rest:-} >>"$out/timeline.txt" 2>&1
  grep -E "timeline|tok/s" "$out/timeline.txt" | tail -2
done
