#!/usr/bin/env bash
# Builds for sm_90a into build-dev and copies what the GPU host needs (test binaries, tools)
# into .devbuild/ (git-ignored), small enough to carry to the GPU host. There, from the repository
# root: scripts/gpu.sh SUBCOMMAND [.devbuild] [ARGS] (scripts/gpu.sh help lists the subcommands).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build build-dev -j2
rm -rf .devbuild && mkdir -p .devbuild/tests .devbuild/tools
cp build-dev/tests/*gpu_test .devbuild/tests/
cp build-dev/tools/strata-* .devbuild/tools/
strip .devbuild/tests/* .devbuild/tools/* 2>/dev/null || true
du -sh .devbuild
