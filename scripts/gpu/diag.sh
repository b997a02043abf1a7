# where the step time goes, per op and per kernel, beside Hugging Face's profile
# On the GPU host: where the step time goes, kernel by kernel, beside Hugging Face's.
#   scripts/gpu.sh diag DIR [venv]
# - strata-bench with STRATA_PROFILE=1 (GPU time per op) and STRATA_KERNEL_TRACE=1 (GPU time per
#   kernel, CUPTI, as the kernels ran in the step) for the benchmark configs;
# - hf_bench.py --profile on the same configs (torch.profiler: the same CUPTI records);
# - with "venv": the same strata runs again on the venv's newer cuDNN;
# - torch's SDPA backends on the same attention shapes (tools/bench/attn_bench.py).
set -uo pipefail
: >"$out/diag.txt"; gpu_line "$out/diag.txt" name,memory.total,driver_version
site=$(nvidia_site)
cudnn_venv=$(ls -d "$site"/cudnn/lib 2>/dev/null | head -1)
use_cupti
echo "venv cuDNN: ${cudnn_venv:-none}; CUPTI: ${STRATA_CUPTI_LIB:-loader path}" | tee -a "$out/diag.txt"
prof() {  # label cfg
  local label=$1
  read -r shape seq mode plan <<<"$2"
  echo "== $label strata $shape $seq $mode $plan" >>"$out/diag.txt"
  STRATA_PROFILE=1 STRATA_KERNEL_TRACE=1 "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" \
    --plan "$plan" --steps 3 --warmup 1 >>"$out/diag.txt" 2>&1
}
configs=("Llama-3.2-1B 4096 full keep" "Llama-3.2-1B 16384 full keep" "Llama-3-8B 8192 frozen keep")
for cfg in "${configs[@]}"; do
  prof system "$cfg"
  read -r shape seq mode plan <<<"$cfg"
  echo "== hf $cfg" >>"$out/diag.txt"
  python3 tools/bench/hf_bench.py --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --steps 2 --warmup 1 \
    --profile >>"$out/diag.txt" 2>&1
done
if [[ ${1:-} == venv && -n $cudnn_venv ]]; then
  for cfg in "${configs[@]}"; do LD_LIBRARY_PATH=$cudnn_venv:${LD_LIBRARY_PATH:-} prof venv "$cfg"; done
fi
python3 tools/bench/attn_bench.py >>"$out/diag.txt" 2>&1
