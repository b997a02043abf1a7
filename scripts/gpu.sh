#!/usr/bin/env bash
# On the GPU host: every GPU-side run of strata through one entry point.
#   scripts/gpu.sh SUBCOMMAND [DIR] [ARGS...]
#   scripts/gpu.sh help [SUBCOMMAND]
# DIR is a build directory holding tests/ and tools/ (default .devbuild: what scripts/pack_gpu_build.sh
# copies on the build machine). Each subcommand's body is scripts/gpu/SUBCOMMAND.sh, sourced after the one
# preamble below; its first line is the description `help` prints, the comment block under it its usage.
#
# The preamble, shared by every subcommand:
#   - runs from the repository root (tools/bench/*.py, profiles/ and docs/bench/ are read relative to it);
#   - dir: the first argument, or .devbuild when none is given (not for `sanitize`, which takes TESTS_DIR);
#   - out: $OUT, default /tmp/strata-out, created and exported;
#   - /work/main -> the repository root where it does not exist: the test binaries carry the build machine's
#     tests/ path (/work/main/tests/...) compiled in;
#   - helpers: gpu_line [LOG [FIELDS]] (one nvidia-smi line, appended to LOG), pick_profile (sets prof to the
#     calibrated profile of the GPU, profile to its name), make_tiny MODEL_DIR ARGS (strata-make-tiny) and
#     make_tiny_once (the same, only where MODEL_DIR/model.safetensors is missing), GPU_SH (this script), nvidia_site
#     (the pip nvidia packages' directory) and use_cupti (STRATA_CUPTI_LIB for the kernel trace).

STRATA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU_SH=$STRATA_ROOT/scripts/gpu.sh
GPU_SUBS=$STRATA_ROOT/scripts/gpu

gpu_describe() {  # SUBCOMMAND: its one-line description (the file's first line)
  sed -n '1s/^# *//p' "$GPU_SUBS/$1.sh"
}

gpu_help() {
  if [[ -n ${1:-} ]]; then
    [[ -f $GPU_SUBS/$1.sh ]] || { echo "gpu.sh: no subcommand '$1' (scripts/gpu.sh help lists them)" >&2; return 2; }
    sed -n '/^[^#]/q; s/^# \{0,1\}//p' "$GPU_SUBS/$1.sh"
    return 0
  fi
  echo "usage: scripts/gpu.sh SUBCOMMAND [DIR] [ARGS...]   (DIR: a build dir with tests/ and tools/, default .devbuild)"
  echo "       scripts/gpu.sh help SUBCOMMAND              (its arguments and settings)"
  echo "Logs and JSON lines go to \$OUT (default /tmp/strata-out). Subcommands:"
  local f name
  for f in "$GPU_SUBS"/*.sh; do
    name=$(basename "$f" .sh)
    printf '  %-16s %s\n' "$name" "$(gpu_describe "$name")"
  done
}

sub=${1:-help}
(($#)) && shift
sub=${sub//-/_}
case $sub in
  help | -h | --help)
    gpu_help "${1:-}"
    exit $?
    ;;
esac
if [[ ! -f $GPU_SUBS/$sub.sh ]]; then
  echo "gpu.sh: no subcommand '$sub'" >&2
  gpu_help >&2
  exit 2
fi

# ---- the preamble -------------------------------------------------------------------------------
cd "$STRATA_ROOT" || exit 3
case $sub in
  sanitize) dir=.devbuild ;; # takes TESTS_DIR [OUT_DIR] itself
  *)
    dir=${1:-.devbuild}
    (($#)) && shift
    ;;
esac
# A build carried packed (scripts/pack_gpu_build.sh): unpacked here when the build directory is missing.
if [[ ! -d $dir && -f .carry/devbuild.tar.xz ]]; then
  tar -xJf .carry/devbuild.tar.xz || exit 3
fi
out=${OUT:-/tmp/strata-out}
mkdir -p "$out"
export OUT=$out
# Test binaries have the build machine's tests/ path compiled in; make it resolve here.
{ mkdir -p /work && { [ -e /work/main ] || ln -s "$STRATA_ROOT" /work/main; }; } 2>/dev/null || true

gpu_line() {  # [LOG [FIELDS]]: the GPU's name, memory and power limit (or FIELDS), appended to LOG
  local fields=${2:-name,memory.total,power.limit}
  if [[ -n ${1:-} ]]; then
    nvidia-smi --query-gpu="$fields" --format=csv,noheader | tee -a "$1"
  else
    nvidia-smi --query-gpu="$fields" --format=csv,noheader
  fi
}

pick_profile() {  # prof: profiles/<gpu>.calibrated.json of GPU 0; profile: its name (h100_80gb | h200)
  profile=h100_80gb
  nvidia-smi -L | head -1 | grep -q H200 && profile=h200
  prof=profiles/$profile.calibrated.json
}

nvidia_site() {  # the pip nvidia packages' directory (torch's CUDA libraries), empty where there is none
  python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2> /dev/null
}

use_cupti() {  # STRATA_CUPTI_LIB for STRATA_KERNEL_TRACE: as given, else the copy torch ships (else the loader's path)
  [ -n "${STRATA_CUPTI_LIB:-}" ] || STRATA_CUPTI_LIB=$(ls "$(nvidia_site)"/*/lib/libcupti.so* 2> /dev/null | head -1)
  export STRATA_CUPTI_LIB
}

make_tiny() {  # MODEL_DIR ARGS...: a random checkpoint (and tokens.bin) from strata-make-tiny
  "$dir/tools/strata-make-tiny" "$@"
}

make_tiny_once() {  # MODEL_DIR ARGS...: make_tiny unless MODEL_DIR/model.safetensors exists
  [[ -f $1/model.safetensors ]] || make_tiny "$@"
}

# ---- the subcommand -----------------------------------------------------------------------------
# shellcheck source=/dev/null
source "$GPU_SUBS/$sub.sh"
