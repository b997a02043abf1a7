#!/usr/bin/env bash
# Configures and builds strata into ./build (CUDA parts when nvcc is found, for sm_90a).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
