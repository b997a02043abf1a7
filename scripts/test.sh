#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test. Tests labelled `gpu`
# skip with a visible message where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j2 "$@"
