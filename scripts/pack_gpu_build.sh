#!/usr/bin/env bash
# Builds what the GPU host runs (the tools and the gpu-labelled tests) for sm_90a into build-dev, copies
# them stripped into .devbuild/ (git-ignored) and packs that into .carry/devbuild.tar.xz (git-ignored;
# the test binaries link the whole engine each, over 100 MiB unpacked). Carry `.carry` to the GPU host;
# there scripts/gpu.sh SUBCOMMAND unpacks it when .devbuild is missing (scripts/gpu.sh help lists them).
#   scripts/pack_gpu_build.sh [EXTRA_DIR...]   (each EXTRA_DIR, e.g. a baseline build's .basebuild, packed too)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a "${launcher[@]}" >/dev/null
targets=(strata-train strata-bench strata-plan strata-make-tiny strata-calibrate strata-comm-bench strata-tokenize)
for t in tests/gpu/*_test.cpp; do targets+=("$(basename "$t" .cpp)"); done
cmake --build build-dev -j"$(nproc)" --target "${targets[@]}"
rm -rf .devbuild && mkdir -p .devbuild/tests .devbuild/tools
cp build-dev/tests/*gpu_test .devbuild/tests/
cp build-dev/tools/strata-* .devbuild/tools/
strip .devbuild/tests/* .devbuild/tools/* 2>/dev/null || true
mkdir -p .carry
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
# -9e in one thread: its 64 MiB window spans the binaries, which share the engine (176 MiB packs to ~8 MiB;
# -T0 -6 cuts it into blocks and leaves ~40 MiB, over the device tool's carry limit beside the tree).
tar -cf - .devbuild "$@" | xz -9e >.carry/devbuild.tar.xz
du -sh .devbuild .carry/devbuild.tar.xz
