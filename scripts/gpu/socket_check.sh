# two single-GPU "nodes" over NCCL's socket transport against strata-train --gpus 2
# The multi-node check on one host with >= 2 GPUs: two "nodes" of one rank each, as srun or
# torchrun would start them on two machines (each process sees one GPU as device 0, LOCAL_RANK 0,
# LOCAL_WORLD_SIZE 1; rank 0's rendezvous on MASTER_ADDR:MASTER_PORT), NCCL forced onto its socket
# transport over loopback (no P2P, no shared memory; NCCL_DEBUG=INFO shows the transport). The
# losses must equal `strata-train --gpus 2` (P2P/NVLink) on the same data to float rounding.
#   scripts/gpu.sh socket_check DIR      (DIR/tools: strata-train, strata-make-tiny)
set -u
export NCCL_NVLS_ENABLE=0
m=/tmp/sock-small
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 200000 --max-pos 1024 > /dev/null
args=(--model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 10 --lr 1e-4 --json)
"$dir/tools/strata-train" "${args[@]}" --gpus 2 > "$out/sock-p2p.jsonl" 2> "$out/sock-p2p.log"
echo "p2p run: exit $?"
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')  # every rank of a job needs the same STRATA_JOB_SECRET
for r in 0 1; do
  env STRATA_JOB_SECRET=$secret CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29611 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET STRATA_COMM_TIMEOUT=120 \
    "$dir/tools/strata-train" "${args[@]}" > "$out/sock-node$r.jsonl" 2> "$out/sock-node$r.log" &
done
wait
echo "socket run: $(grep -c '"step"' "$out/sock-node0.jsonl") steps on node 0"
grep -h -o -E "NET/Socket[^\n]{0,80}|via NET/Socket[^\n]{0,40}|Using network Socket" "$out/sock-node0.log" | sort | uniq -c | head -5
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def losses(f):
    return [json.loads(l)["loss"] for l in open(f"{out}/{f}") if l.startswith('{"step"')]
a, b = losses("sock-p2p.jsonl"), losses("sock-node0.jsonl")
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"socket transport vs --gpus 2: {len(b)} steps, loss {b[0]:.5f} -> {b[-1]:.5f}, worst relative difference {worst:.2e}")
PY
