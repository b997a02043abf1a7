#!/usr/bin/env bash
# Installs the Debian packages strata needs, only those that are missing.
#   scripts/setup.sh         everything: the build, the tests, formatting, the fuzzers and sanitizers
#   scripts/setup.sh build   what building the library and the tools needs (scripts/demo.sh)
set -euo pipefail
pkgs=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libyaml-cpp-dev liburing-dev curl)
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
# Oniguruma, the regex engine of Hugging Face tokenizers (6.9.10 in tokenizers 0.23: Unicode 16), linked
# statically: the GPU host has no libonig and Debian's libonig-dev ships no libonig.a, so this builds
# the static library from Debian's source tarball of the same version into /usr/local (once).
onig_version=6.9.10
onig_sha256=ad92309d0d13eebc27f6592e875f3efbfa3dda2bf6da5952e00f0a2120c921a8
if [ ! -f /usr/local/lib/libonig.a ] || ! grep -q "ONIGURUMA_VERSION_INT *60910" /usr/local/include/oniguruma.h 2>/dev/null; then
  echo "setup: building Oniguruma $onig_version (static) into /usr/local"
  tmp=$(mktemp -d)
  tarball="$tmp/libonig_$onig_version.orig.tar.gz"
  curl -sSfL -o "$tarball" "http://deb.debian.org/debian/pool/main/libo/libonig/libonig_$onig_version.orig.tar.gz"
  echo "$onig_sha256  $tarball" | sha256sum -c --quiet
  tar -xzf "$tarball" -C "$tmp"
  cmake -S "$tmp/oniguruma-$onig_version" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DENABLE_POSIX_API=OFF \
    -DCMAKE_INSTALL_PREFIX=/usr/local -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
  cmake --build "$tmp/build" >/dev/null
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO cmake --install "$tmp/build" >/dev/null
  rm -rf "$tmp"
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found (scripts/build.sh compiles the cuda backend; the demo does where a GPU is present)"
else
  echo "setup: no nvcc: the cpu backend only"
fi
