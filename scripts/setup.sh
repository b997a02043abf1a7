#!/usr/bin/env bash
# Installs the Debian packages strata needs, only those that are missing.
set -euo pipefail
pkgs=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libyaml-cpp-dev liburing-dev libgtest-dev clang-format
  clang libclang-rt-dev)  # clang + libclang-rt-dev: libFuzzer and the sanitizers for scripts/fuzz.sh
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
  echo "setup: CUDA toolkit found (the cuda backend builds where a build asks for it: scripts/build.sh, or the demo where a GPU is present)"
else
  echo "setup: no nvcc: building the cpu backend only"
fi
