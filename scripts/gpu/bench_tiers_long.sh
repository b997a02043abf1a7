# long-context tier rows (1B at 65536, 8B frozen at 32768) beside Hugging Face gc+offload
# On the GPU host: the long-context rows of the tiers table (1B full at 65536 tokens, 8B frozen at
# 32768) that need the most memory or transfer time: keep, selective, streamed and synchronous
# offload, disk, and Hugging Face's gc + save_on_cpu in the same command. The disk rows need about
# 80-100 GB of free space under OFFLOAD_DIR; where there is less, strata says so and moves on.
#   scripts/gpu.sh bench_tiers_long DIR
set -uo pipefail
disk=${OFFLOAD_DIR:-/tmp/strata-disk}; mkdir -p "$disk"
export PYTHONUNBUFFERED=1
df -h "$disk" | tail -1
s() { "$dir/tools/strata-bench" --steps 2 --warmup 1 --offload-dir "$disk" "$@" 2>>"$out/tiers_long.err" |
  tee -a "$out/tiers_long.jsonl" | cut -c150-330; tail -1 "$out/tiers_long.err"; }
h() { timeout 300 python3 tools/bench/hf_bench.py --steps 2 --warmup 1 "$@" 2>>"$out/tiers_long.err" |
  tee -a "$out/tiers_long.jsonl" | cut -c1-250; tail -1 "$out/tiers_long.err"; }
for p in keep legacy disk; do s --shape Llama-3.2-1B --seq 65536 --plan $p; done
h --shape Llama-3.2-1B --seq 65536 --plan gc+offload
for p in selective offload legacy disk; do s --shape Llama-3-8B --mode frozen --seq 32768 --plan $p; done
h --shape Llama-3-8B --mode frozen --seq 32768 --plan gc+offload
