# attention's sustained rates at long lengths and the pinned allocation rate, added to the GPU's calibrated profile
# On the GPU host: strata-calibrate --quick --long-attention T_MAX (attention at 65536, 131072, ... up to T_MAX tokens,
# B = 1, 32/8 heads, D 128, each timed over seconds of back-to-back calls), then the GPU's calibrated profile
# (profiles/<gpu>.calibrated.json) with only its attention_long points and pinned_alloc_gbps replaced by the new
# measurement: $OUT/<gpu>-long.json, the profile long_ctx takes as PROFILE. The whole new calibration stays in
# $OUT/calibrate.json (its log in $OUT/calibrate.log); the SM clock, power and temperature every second in
# $OUT/clocks.csv.
#   scripts/gpu.sh long_rates DIR [T_MAX]   (default 524288)
set -uo pipefail
t_max=${1:-524288}
pick_profile
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 1000 > "$out/clocks.csv" &
clocks=$!
"$dir/tools/strata-calibrate" --quick --long-attention "$t_max" --out "$out/calibrate.json" > "$out/calibrate.log" 2>&1
rc=$?
kill "$clocks" 2> /dev/null
grep -E "attention|pinned" "$out/calibrate.log"
if ((rc != 0)); then
  echo "long_rates: strata-calibrate failed (exit $rc, $out/calibrate.log)" >&2
  exit 1
fi
python3 - "$prof" "$out/calibrate.json" "$out/$profile-long.json" << 'EOF'
import json, sys
base, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("attention_long", "pinned_alloc_gbps"):
    if k in new:
        base[k] = new[k]
base["source"] += "; attention_long and pinned_alloc_gbps: scripts/gpu.sh long_rates (strata-calibrate --long-attention)"
json.dump(base, open(sys.argv[3], "w"), indent=2)
print(f"long_rates: wrote {sys.argv[3]}: attention_long {base.get('attention_long')}, "
      f"pinned_alloc_gbps {base.get('pinned_alloc_gbps')}")
EOF
