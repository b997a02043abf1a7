#!/usr/bin/env bash
# Installs the Debian packages strata needs, only those that are missing.
#   scripts/setup.sh         everything: the build, the tests, formatting, the fuzzers and sanitizers
#   scripts/setup.sh build   what building the library and the tools needs (scripts/demo.sh)
set -euo pipefail
pkgs=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libyaml-cpp-dev liburing-dev)
if [ "${1:-all}" != build ]; then
  # gtest: the test suite; clang-format: its format check; clang + libclang-rt-dev: libFuzzer and the
  # sanitizers for scripts/fuzz.sh (a large download, which the demo does not need).
  pkgs+=(libgtest-dev clang-format clang libclang-rt-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found (scripts/build.sh compiles the cuda backend; the demo does where a GPU is present)"
else
  echo "setup: no nvcc: the cpu backend only"
fi
