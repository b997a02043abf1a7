#!/usr/bin/env bash
# The main job on an embedded default: install, build only the two tools it runs, write a tiny
# Llama checkpoint and train it (cuda backend where a GPU is present, cpu otherwise), printing
# progress and a falling loss. The full build and test suite is scripts/test.sh.
#   STRATA_DEMO_BUILD: the build directory (default build-demo; tools end up in its tools/).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh build  # the build's packages only (the test suite's and fuzzers' are larger)
export PATH="$PATH:/usr/local/cuda/bin"
dir=${STRATA_DEMO_BUILD:-build-demo}
cores=$(nproc)
# The cuda backend only where a GPU is there to run it: its kernels are most of the build time.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
  cuda=ON
  minutes=$(((20 + cores - 1) / cores))  # estimate: about 20 min of one core's time with the cuda kernels
else
  cuda=OFF
  minutes=$(((4 + cores - 1) / cores))  # measured: 215 s of one core's time to build (no ccache)
fi
echo "demo: building strata-make-tiny and strata-train into $dir (cuda backend $cuda): about $minutes min on $cores cores"
start=$(date +%s)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=$cuda -DBUILD_TESTING=OFF >/dev/null
cmake --build "$dir" -j"$cores" --target strata-make-tiny strata-train
case $dir in /*) tools=$dir/tools ;; *) tools=$PWD/$dir/tools ;; esac
echo "demo: built in $(($(date +%s) - start)) s; the tools are in $dir/tools (export PATH=\"$tools:\$PATH\")"
"$dir/tools/strata-make-tiny" "$dir/tiny"
"$dir/tools/strata-train" --model "$dir/tiny" --data "$dir/tiny/tokens.bin" \
  --seq 128 --batch 8 --steps 100 --lr 3e-3 --backend auto "$@"
