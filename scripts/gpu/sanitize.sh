# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the gpu test binaries
# On the GPU host: NVIDIA compute-sanitizer over the gpu test binaries.
#   scripts/gpu.sh sanitize [TESTS_DIR (default build/tests)] [OUT_DIR (default /tmp/strata-sanitize)]
# Run it from the repository root (the tests read tests/ data through the path compiled into
# them; scripts/gpu.sh suite shows the /work/main link for a carried build).
#
# What runs, in this order, each a separate compute-sanitizer run with --error-exitcode 1:
#   memcheck   on EVERY *gpu_test binary in TESTS_DIR (out-of-bounds and misaligned accesses,
#              CUDA API errors)
#   racecheck  on the kernel binaries only (shared-memory hazards; it is 10-100x slower than
#              memcheck, and the model-level binaries run the same kernels through the Trainer)
#   synccheck  on the kernel binaries only (__syncthreads / barrier misuse; cheap)
#   initcheck  on none by default (reads of uninitialised device memory; the arena hands out
#              unset memory by design, so expect reports to triage; INITCHECK_BINS=all turns it on)
# The kernel binaries: kernels_gpu_test optimizer_gpu_test gemm_attention_gpu_test lm_head_grad_gpu_test
# transfer_gpu_test.
#
# Time: the whole script stays within BUDGET_S (default 480 s, 8 minutes). Each run is capped at
# PER_RUN_S (default 120 s) and at what is left of the budget; a run cut off is TIMEOUT (its
# errors so far are still counted), a run not started for lack of budget is SKIPPED. memcheck
# over all binaries goes first, so it is what the budget protects.
#
# Settings (environment):
#   SANITIZER        path of compute-sanitizer (default: PATH, then /usr/local/cuda*/bin)
#   BUDGET_S         wall-time budget of the whole script, s (480)
#   PER_RUN_S        cap of one run, s (120)
#   MEMCHECK_BINS    binaries for memcheck: "all", "kernels", "none" or a list of names (all)
#   RACECHECK_BINS   same, for racecheck (kernels)
#   SYNCCHECK_BINS   same, for synccheck (kernels)
#   INITCHECK_BINS   same, for initcheck (none)
#   MEMCHECK_FILTER, RACECHECK_FILTER, SYNCCHECK_FILTER, INITCHECK_FILTER
#                    gtest filter of each tool's runs (default '*'; e.g. RACECHECK_FILTER='-*Large*'
#                    when whole binaries are too slow under racecheck)
#   MEMCHECK_ARGS    extra memcheck options (e.g. "--leak-check full")
#   RACECHECK_ARGS, SYNCCHECK_ARGS   the same for racecheck / synccheck (e.g. racecheck
#                    "--kernel-name-exclude kns=nvjet,kns=sdpa": the cuBLAS / cuDNN Hopper kernels
#                    whose asynchronous-barrier syncs racecheck reports as hazards)
#
# Output: OUT_DIR/<tool>.<binary>.log (the full log of each run) and OUT_DIR/summary.txt: one line
# per run (tool, binary, status, wall seconds, exit code) and its "ERROR SUMMARY: N errors" line
# (racecheck's "RACECHECK SUMMARY" too), then the totals.
#
# Exit status: 0 every run clean; 1 a sanitizer reported errors or a test failed under it;
# 2 nothing reported but some run timed out or was skipped (incomplete); 3 setup problem.
set -uo pipefail

tests_dir=${1:-build/tests}
out=${2:-/tmp/strata-sanitize}
budget_s=${BUDGET_S:-480}
per_run_s=${PER_RUN_S:-120}
min_run_s=15 # do not start a run with less than this left
kernel_bins="kernels_gpu_test optimizer_gpu_test gemm_attention_gpu_test lm_head_grad_gpu_test transfer_gpu_test"

san=${SANITIZER:-}
if [[ -z $san ]]; then
  san=$(command -v compute-sanitizer || true)
fi
if [[ -z $san ]]; then
  for c in /usr/local/cuda*/bin/compute-sanitizer; do
    if [[ -x $c ]]; then
      san=$c
      break
    fi
  done
fi
if [[ -z $san || ! -x $san ]]; then
  echo "gpu.sh sanitize: compute-sanitizer not found (PATH, /usr/local/cuda*/bin); set SANITIZER" >&2
  exit 3
fi

shopt -s nullglob
all_bins=()
for b in "$tests_dir"/*gpu_test; do
  [[ -x $b && -f $b ]] && all_bins+=("$(basename "$b")")
done
shopt -u nullglob
if ((${#all_bins[@]} == 0)); then
  echo "gpu.sh sanitize: no *gpu_test binaries in $tests_dir (build with CUDA first)" >&2
  exit 3
fi
mkdir -p "$out" || exit 3
summary=$out/summary.txt

# The binaries a *_BINS setting names, among those present.
select_bins() {
  local want=$1 b
  case $want in
    all) printf '%s\n' "${all_bins[@]}" ;;
    none | "") ;;
    kernels)
      for b in $kernel_bins; do
        [[ -x $tests_dir/$b ]] && echo "$b"
      done
      ;;
    *)
      for b in $want; do
        if [[ -x $tests_dir/$b ]]; then
          echo "$b"
        else
          echo "gpu.sh sanitize: $b is not in $tests_dir, left out" >&2
        fi
      done
      ;;
  esac
}

now() { date +%s.%N; }
start=$(now)
elapsed() { awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%d", b - a }'; }

{
  echo "# compute-sanitizer over $tests_dir ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo "# $("$san" --version 2>/dev/null | grep -m1 -i version)"
  echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "# budget ${budget_s} s, at most ${per_run_s} s a run"
  printf '# %-10s %-26s %-8s %7s %4s  %s\n' tool binary status wall_s rc "sanitizer summary"
} >"$summary"

total_errors=0
failed=0
incomplete=0
runs=0

# run_one TOOL BINARY FILTER EXTRA_ARGS...
run_one() {
  local tool=$1 bin=$2 filter=$3
  shift 3
  local log=$out/$tool.$bin.log left cap t0 t1 wall rc status errors sumline
  left=$((budget_s - $(elapsed)))
  if ((left < min_run_s)); then
    printf '  %-10s %-26s %-8s %7s %4s  %s\n' "$tool" "$bin" SKIPPED - - "budget spent" | tee -a "$summary"
    incomplete=$((incomplete + 1))
    return
  fi
  cap=$((left < per_run_s ? left : per_run_s))
  t0=$(now)
  # SIGINT first, so compute-sanitizer can still print what it found; SIGKILL 10 s later.
  timeout -s INT -k 10 "$cap" "$san" --tool "$tool" --error-exitcode 1 --print-limit 200 "$@" \
    "$tests_dir/$bin" --gtest_color=no --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  t1=$(now)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  runs=$((runs + 1))
  sumline=$(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | sed 's/^========= //' | paste -sd';' -)
  # One ERROR SUMMARY per process the sanitizer followed: add them up.
  errors=$(grep -oE '^========= ERROR SUMMARY: [0-9]+' "$log" | awk '{ s += $4 } END { if (NR) print s }')
  if [[ -z $errors ]]; then # cut off before the summary: count the reports printed so far
    errors=$(grep -cE '^========= +(Invalid|Program hit|Leaked|Error|ERROR|Race|Barrier|Uninitiali[sz]ed|Misaligned|Malloc|Out-of-range|Unused)' "$log" || true)
  fi
  errors=${errors:-0}
  total_errors=$((total_errors + errors))
  if ((rc == 124 || rc == 137)); then
    status=TIMEOUT
    incomplete=$((incomplete + 1))
    ((errors > 0)) && failed=$((failed + 1))
  elif ((errors > 0)); then
    status=ERRORS
    failed=$((failed + 1))
  elif ((rc != 0)); then
    status=FAILED # a test failed (or the binary crashed) under the sanitizer, nothing reported
    failed=$((failed + 1))
  else
    status=clean
  fi
  printf '  %-10s %-26s %-8s %7s %4s  %s\n' "$tool" "$bin" "$status" "$wall" "$rc" \
    "${sumline:-no summary ($errors reports in the log)}" | tee -a "$summary"
}

run_tool() {
  local tool=$1 bins=$2 filter=$3 b
  shift 3
  local selected
  selected=$(select_bins "$bins")
  [[ -z $selected ]] && return
  echo "== $tool (filter '$filter'): $(echo "$selected" | paste -sd' ' -)"
  for b in $selected; do
    run_one "$tool" "$b" "$filter" "$@"
  done
}

# shellcheck disable=SC2086 # MEMCHECK_ARGS is a list of options
run_tool memcheck "${MEMCHECK_BINS:-all}" "${MEMCHECK_FILTER:-*}" ${MEMCHECK_ARGS:-}
# shellcheck disable=SC2086 # RACECHECK_ARGS / SYNCCHECK_ARGS are lists of options
run_tool racecheck "${RACECHECK_BINS:-kernels}" "${RACECHECK_FILTER:-*}" ${RACECHECK_ARGS:-}
# shellcheck disable=SC2086
run_tool synccheck "${SYNCCHECK_BINS:-kernels}" "${SYNCCHECK_FILTER:-*}" ${SYNCCHECK_ARGS:-}
run_tool initcheck "${INITCHECK_BINS:-none}" "${INITCHECK_FILTER:-*}"

{
  echo "# total: $runs runs, $total_errors sanitizer errors, $failed runs failed, $incomplete incomplete" \
    "(timed out or skipped), $(elapsed) s of the ${budget_s} s budget"
} | tee -a "$summary"
echo "gpu.sh sanitize: logs in $out, summary in $summary"
if ((failed > 0 || total_errors > 0)); then
  exit 1
fi
if ((incomplete > 0)); then
  exit 2
fi
exit 0
