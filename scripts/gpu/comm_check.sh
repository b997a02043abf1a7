# the NCCL communicator against the cpu one, the watchdog, and all-reduce bus bandwidth (>= 2 GPUs)
# On a host with >= 2 GPUs: the nccl communicator against the cpu one, a peer that stops
# calling (the watchdog's timeout), and the all-reduce bus bandwidth for the sim's profile fields.
#   scripts/gpu.sh comm_check DIR     (DIR/tests/comm_gpu_test and DIR/tools/strata-comm-bench; a build
#                                      dir or .devbuild from scripts/pack_gpu_build.sh)
# NCCL_NVLS_ENABLE=0 stays set (NVLink multicast off, as the shared hosts require); the ranks inherit it.
# Logs in $OUT (default /tmp/strata-out).
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpus.txt" | wc -l)
echo "GPUs: $n" | tee "$out/comm_check.txt"
rc=0
"$dir/tests/comm_gpu_test" 2>&1 | tee "$out/comm_gpu_test.log" | tail -30
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
for g in 2 4 8; do
  (( g <= n )) || break
  echo "--- strata-comm-bench --gpus $g" | tee -a "$out/comm_check.txt"
  "$dir/tools/strata-comm-bench" --gpus "$g" --bytes 1GiB --iters 20 2>&1 | tee -a "$out/comm_check.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
done
echo "exit $rc" | tee -a "$out/comm_check.txt"
exit $rc
