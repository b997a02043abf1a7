# the 8B under the long-context budgets: 524,288 tokens on fewer layers, the full 8B at 262,144, forecast beside
# On the GPU host: the issue's long-context runs under one H100's limits (--budget 76GiB --host-budget 110GiB
# --disk-budget 55GiB), each planned by strata-plan --budget on this host (its --write-config is what strata-train
# runs, unchanged: the same plan the forecast is of) and measured by strata-train on a random 8B-shaped checkpoint.
#   scripts/gpu.sh long_ctx DIR PART
#     PART prep-a, prep-b  that part's checkpoint alone (the 8B's: 16 GB, about 80 s), so a and b each fit one command
#     PART a     LAYERS (default 10: a step forecast near 4 minutes) 8B-shaped layers at 524,288 tokens, STEPS (default 1) steps
#     PART b     the full 8B (32 layers) at 262,144 tokens, STEPS (default 2: the first and one warm)
#     PART trace LAYERS (default 2) layers at 524,288 tokens planned as a, run by strata-bench on the same plan with
#                the CUPTI kernel trace (one warm-up step, then STEPS, default 1): where the step's GPU time goes,
#                kernel by kernel, in $OUT/long_ctx-trace.txt (STRATA_CUPTI_LIB: gpu.sh's use_cupti)
# Settings (environment): LAYERS (part a's), SEQ and STEPS (override the part's), BUDGETS (default above), RECIPE (strata-plan
# and strata-train recipe flags, e.g. "--master-weights bf16"; default none: fp32), PROFILE (default the GPU's
# calibrated one), CKPT_ROOT (/tmp), OFFLOAD (/tmp/strata-long-ctx-offload, emptied first), TRAIN_TIMEOUT (a: 500 s, b: 545 s: a killed run still
# leaves its finished steps' lines and the comparison), SHAPE (strata-make-tiny's shape flags; default the 8B's),
# PLAN_TIME_LIMIT (a: 60 s, b: 30 s; the planner spreads its sim runs over the host's cores), GPUS (default 1: N > 1
# plans with strata-plan --gpus N, so the planner lays the GPUs out (sequence parallel, ZeRO stage; the budgets are each
# rank's), and trains with strata-train --gpus N; the step lines and the forecast they are compared with are rank 0's,
# and the forecast record keeps the planner's own, the largest rank's, as largest_rank).
# Results: $OUT/long_ctx.jsonl gets, per part, a {"record": "forecast"} line (strata-plan's forecast of the plan),
# strata-train's step lines (tagged "part"), and a {"record": "compare"} line per step (measured against forecast:
# step time, its parts (setup, forward, backward, optimizer), device, host and disk peaks, and the first step's
# setup); logs in $OUT/long_ctx.err, the plan in $OUT/long_ctx-PART.yaml, strata-plan's whole JSON in
# $OUT/long_ctx-PART.plan.json, the host's free memory while it trains in $OUT/long_ctx-PART.meminfo.
set -uo pipefail
part=${1:?"PART: prep-a, prep-b, a or b (scripts/gpu.sh help long_ctx)"}
budgets=${BUDGETS:---budget 76GiB --host-budget 110GiB --disk-budget 55GiB}
mirror=""
recipe=${RECIPE:-}
root=${CKPT_ROOT:-/tmp}
off=${OFFLOAD:-/tmp/strata-long-ctx-offload}
mkdir -p "$off"
rm -rf "${off:?}"/* # a run cut short by the timeout may leave its disk-tier file
shape=${SHAPE:---hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256}
gpus=${GPUS:-1}
gpus_flag=""
((gpus > 1)) && gpus_flag="--gpus $gpus"
log=$out/long_ctx.err
jsonl=$out/long_ctx.jsonl
if [[ -n ${PROFILE:-} ]]; then
  prof=$PROFILE
elif command -v nvidia-smi > /dev/null; then
  pick_profile
else # a dry run without a GPU: the forecast of the cpu backend, which strata-train then runs
  prof=profiles/h100_80gb.calibrated.json
  mirror="--mirror cpu"
fi

ckpt() { # LAYERS MAXPOS: the checkpoint's directory, made once (600,000 synthetic tokens, or a row's worth)
  local d=$root/long-ctx-$1L
  local tokens=$(($2 + 4096 > 600000 ? $2 + 4096 : 600000))
  # shellcheck disable=SC2086 # shape is a flag list
  make_tiny_once "$d" --layers "$1" $shape --max-pos "$2" --dtype bf16 --tokens "$tokens" --seed 1 >> "$log" 2>&1 ||
    {
      echo "long_ctx: strata-make-tiny failed (see $log)" >&2
      exit 1
    }
  echo "$d"
}

# The disk holds one checkpoint beside a run's disk tier (55 GiB of 64): the other part's goes first.
keep_only() { # LAYERS: removes this script's other checkpoints
  local d
  for d in "$root"/long-ctx-*L; do
    [[ -d $d && $d != "$root/long-ctx-$1L" ]] && { echo "long_ctx: removing $d (disk room)" | tee -a "$log"; rm -rf "$d"; }
  done
}
case $part in
  prep-a | prep-b)
    l=32
    [[ $part == prep-a ]] && l=${LAYERS:-10}
    keep_only "$l"
    ckpt "$l" 524288 > /dev/null || exit 1
    du -sh "$root/long-ctx-${l}L" | tee -a "$log"
    df -h "$off" | tail -1 | tee -a "$log"
    exit 0
    ;;
  a) layers=${LAYERS:-10} seq=${SEQ:-524288} steps=${STEPS:-1} plan_limit=60 train_limit=500 ;;
  trace) layers=${LAYERS:-2} seq=${SEQ:-524288} steps=${STEPS:-1} plan_limit=30 train_limit=500 ;;
  b) layers=32 seq=${SEQ:-262144} steps=${STEPS:-2} plan_limit=30 train_limit=545 ;; # 2 steps of about 215 s
  *)
    echo "long_ctx: PART is prep-a, prep-b, a, b or trace, not '$part'" >&2
    exit 2
    ;;
esac
{
  echo "== long_ctx $part: $layers layers, seq $seq, $steps steps, $gpus GPU(s), $budgets $recipe, profile $prof ($(date -u))"
  if command -v nvidia-smi > /dev/null; then gpu_line; fi
  free -g | head -2
  df -h "$off" | tail -1
} | tee -a "$log"
keep_only "$layers"
ck=$(ckpt "$layers" $((seq > 524288 ? seq : 524288))) || exit 1
yaml=$out/long_ctx-$part.yaml
plan_json=$out/long_ctx-$part.plan.json
rm -f "$yaml" "$plan_json"

# 1. The plan and its forecast: strata-plan --budget on this host's cores.
start=$(date +%s%N)
# shellcheck disable=SC2086 # budgets and recipe are flag lists
"$dir/tools/strata-plan" --model "$ck" --seq "$seq" $budgets $recipe $mirror $gpus_flag --profile "$prof" \
  --plan-time-limit "${PLAN_TIME_LIMIT:-$plan_limit}" --write-config "$yaml" --json > "$plan_json" 2>> "$log"
plan_rc=$?
plan_s=$(awk "BEGIN { print ($(date +%s%N) - $start) / 1e9 }")
echo "strata-plan: exit $plan_rc after $plan_s s" | tee -a "$log"
rank0_json=""
if ((gpus > 1 && plan_rc == 0)); then
  # The planner's forecast is the largest rank's; strata-train's step lines are rank 0's: its forecast of the plan.
  rank0_json=$out/long_ctx-$part.rank0.json
  # shellcheck disable=SC2086 # recipe, mirror and gpus_flag are flag lists
  "$dir/tools/strata-plan" --model "$ck" --config "$yaml" $recipe $mirror $gpus_flag --rank 0 \
    --profile "$prof" --json > "$rank0_json" 2>> "$log"
fi
python3 - "$plan_json" "$part" "$layers" "$seq" "$plan_s" "$plan_rc" "$prof" "$rank0_json" >> "$jsonl" << 'EOF'
import json, sys
path, part, layers, seq, plan_s, rc, prof, rank0 = sys.argv[1:]
try:
    p = json.load(open(path))
except Exception as e:  # nothing fits: strata-plan says why on stderr (long_ctx.err)
    p = {"error": str(e)}
f = p.get("forecast", {})
largest = dict(f)
if rank0:
    f = json.load(open(rank0)).get("forecast", {})
keys = ["step_s", "tokens_per_s", "peak_bytes", "high_water_bytes", "peak_host_bytes", "peak_host_slot_bytes",
        "host_reserved_bytes", "paged_host_bytes", "state_host_bytes", "peak_disk_bytes", "state_disk_bytes", "setup",
        "forward_s", "backward_s", "optimizer_s"]
rec = {"record": "forecast", "part": part, "layers": int(layers), "seq": int(seq), "plan_rc": int(rc),
       "plan_s": float(plan_s), "profile": prof, "plan": p.get("planner", {}).get("label", p.get("plan")),
       "fits": p.get("planner", {}).get("found", f.get("fits"))}
if "layout" in p:  # --gpus N: the layout the planner chose, and the largest rank's forecast (the planner's)
    rec["layout"] = {k: p["layout"][k] for k in ("sequence_parallel", "zero_stage", "why") if k in p["layout"]}
    rec["largest_rank"] = {k: largest[k] for k in ("peak_bytes", "peak_host_bytes", "peak_disk_bytes", "step_s")
                           if k in largest}
rec.update({k: f[k] for k in keys if k in f})
print(json.dumps(rec))
EOF
tail -1 "$jsonl"
if [[ $plan_rc -ne 0 || ! -s $yaml ]]; then
  echo "long_ctx: no plan fits (strata-plan's answer, what it would need, is in $log); nothing to run" | tee -a "$log"
  grep -E "^strata-plan:" "$log" | tail -4
  exit 1
fi

# The disk tier's forecast must fit the drive beside the checkpoint.
need=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('forecast', {}).get('peak_disk_bytes', 0))" "$plan_json")
need=$((need * gpus)) # every rank's disk tier shares the drive
free=$(($(df -B1 --output=avail "$off" | tail -1)))
if ((need + (1 << 30) > free)); then
  echo "long_ctx: the plan's disk tier needs $need B and $off has $free B free; free some (other checkpoints under $root?)" |
    tee -a "$log"
  exit 1
fi

if [[ $part == trace ]]; then  # the same plan through strata-bench, with the kernel trace
  use_cupti
  # shellcheck disable=SC2086 # recipe is a flag list
  STRATA_KERNEL_TRACE=1 timeout "${TRAIN_TIMEOUT:-$train_limit}" "$dir/tools/strata-bench" --backend cuda --model "$ck" \
    --seq "$seq" --config "$yaml" $recipe --offload-dir "$off" --steps "$steps" --warmup 1 > "$out/long_ctx-trace.json" \
    2> "$out/long_ctx-trace.txt"
  rc=$?
  echo "strata-bench: exit $rc" | tee -a "$log"
  grep -E "tok/s|timeline|busy|idle" "$out/long_ctx-trace.txt" | tail -4
  sed -n '/kernel trace through/,+14p' "$out/long_ctx-trace.txt"
  exit "$rc"
fi

# 2. The run: strata-train on the plan strata-plan wrote (shape, recipe and budgets in it), one JSON line a step.
steps_file=$out/long_ctx-$part.steps.jsonl
# The host's memory every 2 s while it trains (seconds since the start, MemFree, MemAvailable, Cached in GiB): the
# first step pins the host tier's pool, and how full the host is then sets how fast that goes.
(
  t0=$(date +%s)
  while sleep 2; do
    awk -v t=$(($(date +%s) - t0)) '/^(MemFree|MemAvailable|Cached):/ { v[$1] = int($2 / 1048576) }
      END { print t, v["MemFree:"], v["MemAvailable:"], v["Cached:"] }' /proc/meminfo
  done
) > "$out/long_ctx-$part.meminfo" 2> /dev/null &
meminfo_pid=$!
start=$(date +%s%N)
# shellcheck disable=SC2086 # gpus_flag is a flag list
timeout "${TRAIN_TIMEOUT:-$train_limit}" "$dir/tools/strata-train" --config "$yaml" --model "$ck" --data "$ck/tokens.bin" \
  --steps "$steps" --offload-dir "$off" $gpus_flag --json > "$steps_file" 2>> "$log"
train_rc=$?
kill "$meminfo_pid" 2> /dev/null
train_s=$(awk "BEGIN { print ($(date +%s%N) - $start) / 1e9 }")
echo "strata-train: exit $train_rc after $train_s s" | tee -a "$log"

# 3. Measured against the forecast, a line per step.
python3 - "$steps_file" "$jsonl" "$part" "$train_s" "$train_rc" << 'EOF'
import json, sys
steps_path, jsonl, part, train_s, rc = sys.argv[1:]
fc = None
for line in open(jsonl):
    r = json.loads(line)
    if r.get("record") == "forecast" and r.get("part") == part:
        fc = r  # this part's latest
steps = [json.loads(l) for l in open(steps_path) if l.startswith("{")]
with open(jsonl, "a") as out:
    for s in steps:
        s["part"] = part
        out.write(json.dumps(s) + "\n")
    for s in steps:
        if "step_s" not in s:
            continue
        host = s["peak_host_bytes"] + s["state_host_bytes"] + fc.get("paged_host_bytes", 0)
        c = {"record": "compare", "part": part, "step": s["step"], "seq": fc["seq"], "layers": fc["layers"],
             "tokens_per_s": s["tokens_per_s"], "step_s": s["step_s"], "forecast_step_s": fc["step_s"],
             "step_vs_forecast": s["step_s"] / fc["step_s"] - 1,
             "peak_device_bytes": s["peak_device_bytes"], "forecast_peak_bytes": fc["peak_bytes"],
             "device_exact": s["peak_device_bytes"] == fc["peak_bytes"],
             "host_slot_bytes": s["peak_host_bytes"], "forecast_host_slot_bytes": fc["peak_host_slot_bytes"],
             "state_host_bytes": s["state_host_bytes"], "forecast_state_host_bytes": fc["state_host_bytes"],
             "host_bytes": host, "forecast_host_bytes": fc["peak_host_bytes"],
             "host_exact": host == fc["peak_host_bytes"],
             "peak_disk_bytes": s["peak_disk_bytes"], "forecast_disk_bytes": fc["peak_disk_bytes"],
             "disk_exact": s["peak_disk_bytes"] == fc["peak_disk_bytes"]}
        # The step's parts as the GPU ran them (setup: the host preparing the step, the host tier's pinning at
        # the first) beside the forecast's (its forward holds the setup).
        for k in ("setup_s", "forward_s", "backward_s", "optimizer_s"):
            if k in s:
                c[k] = s[k]
                if k != "setup_s" and k in fc:
                    c["forecast_" + k] = fc[k]
        if s["step"] == steps[0]["step"]:
            # The kernels' first-call tuning and the host tier's pinned allocation run inside the first step: its
            # forecast is the setup's first_step_s. The rest of strata-train's time (start, load, the state's and
            # paged weights' pinned allocation, exit) against the setup's load_pinned_alloc_s.
            setup = fc.get("setup", {})
            first = setup.get("first_step_s", fc["step_s"] + setup.get("tuning_s", 0))
            c["forecast_first_step_s"] = first
            c["first_step_vs_forecast"] = s["step_s"] / first - 1
            c["outside_steps_s"] = float(train_s) - sum(x.get("step_s", 0) for x in steps)
            c["forecast_load_pinned_alloc_s"] = setup.get("load_pinned_alloc_s")
        c["train_rc"] = int(rc)
        out.write(json.dumps(c) + "\n")
        print(json.dumps(c))
EOF
grep -E "plan:|host tier|error|fp8|done" "$log" | tail -6
exit "$train_rc"
