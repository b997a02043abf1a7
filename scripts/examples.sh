#!/usr/bin/env bash
# Installs the build in BUILD (default ./build) to a fresh temporary prefix, then configures,
# builds and runs every example under examples/ against it, each in a fresh build directory, as
# an outside project would (find_package(strata CONFIG REQUIRED) with CMAKE_PREFIX_PATH=prefix).
# Any failure fails the script. Run by scripts/test.sh after the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
# Only the public headers are installed.
if [ "$(ls "$prefix/include")" != strata ]; then
  echo "examples: $prefix/include holds more than strata/" >&2
  exit 1
fi
for ex in examples/*/; do
  name=$(basename "$ex")
  echo "== examples/$name (against $prefix)"
  cmake -S "$ex" -B "$work/build-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/build-$name" -j"$(nproc)" >/dev/null
  (cd "$work" && "$work/build-$name/$name")
done
# pkg-config: the same library found through strata.pc.
pcdir=$(dirname "$(find "$prefix" -name strata.pc | head -1)")
if command -v pkg-config >/dev/null; then
  PKG_CONFIG_PATH="$pcdir" pkg-config --exists strata
  src=examples/plan/main.cpp
  # shellcheck disable=SC2046
  ${CXX:-c++} -O1 -o "$work/plan-pc" "$src" $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs strata)
  (cd "$work" && "$work/plan-pc" >/dev/null)
  echo "== pkg-config: built and ran examples/plan with strata.pc"
fi
echo "examples: all passed"
