# cuDNN API logs of one attention forward+backward from torch and from strata, side by side
# On the GPU host: cuDNN's API log (CUDNN_LOGLEVEL_DBG=3) of one attention forward + backward at one
# shape, from torch (cudnn-frontend's graph, tools/bench/attn_bench.py) and from strata (its own
# backend graph, every tuning candidate, AttentionGpu.LargeShapeBothPathsAgree), gzipped into $OUT
# for a side-by-side reading of the two operation graphs (tensor dims, strides, data types,
# pointwise modes and precisions, engine knobs).
#   scripts/gpu.sh cudnn_logs DIR [B,T,Hq,Hkv,D]     (default 1,8192,32,8,128: the 8B benchmark's)
set -uo pipefail
shape=${1:-1,8192,32,8,128}
IFS=, read -r B T H KV D <<<"$shape"
[ "$B" = 1 ] || { echo "attn_bench.py runs batch 1 only" >&2; exit 2; }
CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/torch_cudnn.log" python3 tools/bench/attn_bench.py --backends cudnn \
  --layout bshd --shapes "$T:$H:$KV:$D" --reps 1 --profile 2>&1 | grep -v Warning | tee "$out/torch_attn.txt"
CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/strata_cudnn.log" STRATA_ATTN_VERBOSE=1 STRATA_ATTN_TIMING_SHAPE="$shape" \
  "$dir/tests/gemm_attention_gpu_test" --gtest_filter=AttentionGpu.LargeShapeBothPathsAgree 2>&1 | tee "$out/strata_attn.txt"
gzip -f "$out/torch_cudnn.log" "$out/strata_cudnn.log"
ls -la "$out"
