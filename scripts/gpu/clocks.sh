# SM clock and board power while strata-bench and Hugging Face run the same configurations
# On the GPU host: SM clock and board power while strata-bench and the Hugging Face baseline run the
# same configs, one after the other (nvidia-smi every 100 ms). Both engines run at the power cap on
# an H100/H200, so the clock each one gets is part of the speed comparison.
#   scripts/gpu.sh clocks DIR "SHAPE SEQ MODE PLAN" ...
# Writes $OUT/clocks.txt (raw samples with engine/config markers) and prints, per engine and config,
# the median SM clock and power over the samples drawing more than 300 W (the steps, not the setup).
set -uo pipefail
log=$out/clocks.txt
: >"$log"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,power.limit --format=csv,noheader \
  -lms 100 >>"$log" &
smi=$!
for cfg in "$@"; do
  read -r shape seq mode plan <<<"$cfg"
  echo "# strata $cfg" >>"$log"
  "$dir/tools/strata-bench" --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --steps 6 --warmup 2 \
    >>"$out/clocks_bench.jsonl" 2>>"$out/clocks_bench.err"
  echo "# hf $cfg" >>"$log"
  python3 tools/bench/hf_bench.py --shape "$shape" --seq "$seq" --mode "$mode" --plan "$plan" --steps 6 --warmup 2 \
    >>"$out/clocks_bench.jsonl" 2>>"$out/clocks_bench.err"
done
kill "$smi"
python3 - "$log" <<'EOF'
import statistics, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("# "):
        cur = line[2:].strip(); runs[cur] = []
        continue
    f = [x.strip() for x in line.split(",")]
    if cur is None or len(f) < 5:
        continue
    try:
        mhz, watts = float(f[1].split()[0]), float(f[3].split()[0])
    except ValueError:
        continue
    if watts > 300:
        runs[cur].append((mhz, watts))
for name, s in runs.items():
    if s:
        print(f"{name}: {len(s)} samples > 300 W, SM clock median {statistics.median(m for m, _ in s):.0f} MHz, "
              f"power median {statistics.median(w for _, w in s):.0f} W")
EOF
