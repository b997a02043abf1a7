#!/usr/bin/env bash
# The main job on an embedded default: install, build, write a tiny Llama checkpoint and train it
# (cuda backend where a GPU is present, cpu otherwise), printing progress and a falling loss.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
./build/tools/strata-make-tiny build/tiny
./build/tools/strata-train --model build/tiny --data build/tiny/tokens.bin \
  --seq 128 --batch 8 --steps 100 --lr 3e-3 --backend auto "$@"
