#!/usr/bin/env bash
# On the GPU host: where the step time goes, and what attention could reach.
#   scripts/gpu_diag.sh DIR
# - STRATA_PROFILE per-op tables for the benchmark configs (system cuDNN, then the venv's newer
#   cuDNN when torch bundles one);
# - torch's SDPA backends on the same attention shapes (tools/bench/attn_bench.py).
set -uo pipefail
dir=${1:-.devbuild}
out=${OUT:-/tmp/strata-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/diag.txt"
cudnn_venv=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
echo "venv cuDNN: $cudnn_venv" | tee -a "$out/diag.txt"
prof() {  # label cfg...
  local label=$1; shift
  read -r shape seq mode plan <<<"$1"
  echo "== $label $shape $seq $mode $plan" >>"$out/diag.txt"
  STRATA_PROFILE=1 "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" \
    --steps 3 --warmup 1 >>"$out/diag.txt" 2>&1
}
for cfg in "Llama-3.2-1B 4096 full keep" "Llama-3.2-1B 16384 full keep" "Llama-3-8B 8192 frozen keep"; do
  prof system "$cfg"
  [ -n "$cudnn_venv" ] && LD_LIBRARY_PATH=$cudnn_venv:${LD_LIBRARY_PATH:-} prof venv "$cfg"
done
python3 tools/bench/attn_bench.py >>"$out/diag.txt" 2>&1
