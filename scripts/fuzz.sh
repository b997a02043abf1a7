#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang -fsanitize=fuzzer,address,undefined into
# build-fuzz/, then for each target:
#  1. runs every committed seed (tests/fuzz/corpus/<target>/) and reproducer
#     (tests/fuzz/crashes/<target>/) once at full size, each within FUZZ_SEED_TIMEOUT seconds
#     (default 30): the large seeds (50k-entry headers: about 5 s here under the sanitizers) catch
#     super-linear parsing, which took minutes;
#  2. fuzzes it for FUZZ_SECONDS (default 45) from those seeds, inputs up to FUZZ_MAX_LEN bytes
#     (default 65536), each within FUZZ_TIMEOUT seconds (default 10).
# A crash, sanitizer report, leak, out-of-memory, timeout or escaped non-strata exception fails the
# script; the input is left in build-fuzz/findings/<target>/: fix it, then add it to
# tests/fuzz/crashes/<target>/.
# Usage: scripts/fuzz.sh [target...]   (targets: safetensors checkpoint_index hf_config tokens yaml_config
#                                      tokenizer datasets chat_template)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-45}
timeout_s=${FUZZ_TIMEOUT:-10}
seed_timeout_s=${FUZZ_SEED_TIMEOUT:-30}
max_len=${FUZZ_MAX_LEN:-65536}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=(safetensors checkpoint_index hf_config tokens yaml_config tokenizer datasets chat_template)
[ $# -gt 0 ] && targets=("$@")

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs it)"; exit 1; }
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -gline-tables-only"
# Line tables only: file and line in every report at less compile time than -g.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DSTRATA_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF -DSTRATA_FUZZ=ON >/dev/null
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  crashes="tests/fuzz/crashes/$t"
  work="$build/corpus/$t"
  findings="$build/findings/$t"
  log="$build/fuzz_$t.log"
  mkdir -p "$work" "$findings"
  replay_failed=0
  for f in "$seeds"/* "$crashes"/*; do
    [ -f "$f" ] || continue
    if ! timeout "$seed_timeout_s" "$bin" -rss_limit_mb=4096 "$f" >"$log" 2>&1; then
      echo "fuzz: $t: $f fails or takes over ${seed_timeout_s}s:"
      tail -n 40 "$log"
      replay_failed=1
    fi
  done
  if [ $replay_failed -ne 0 ]; then
    status=1
    continue
  fi
  if "$bin" -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb=4096 -max_len="$max_len" \
    -artifact_prefix="$findings/" -print_final_stats=1 "$work" "$seeds" >"$log" 2>&1; then
    echo "fuzz: $t: clean, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds}s"
  else
    echo "fuzz: $t: FINDING (log $log, input in $findings/):"
    grep -E 'ERROR|runtime error|Test unit written|ALARM|terminate|what\(\)' "$log" | head -n 20
    tail -n 30 "$log"
    status=1
  fi
done
exit $status
