# every parallel mode through torchrun and through strata-train --gpus N, losses side by side
# On one host: every parallel mode through `torchrun --no-python --nproc-per-node N
# strata-train ...` and through `strata-train --gpus N`, the two launches' losses side by side (the same ranks,
# data and arithmetic; on GPUs within the cuda backend's run-to-run spread). Modes: data parallel, ZeRO-1, 2 and
# 3, ZeRO-3 with the moments on the host, sequence parallel over every GPU (with recompute), and sequence
# parallel 2 x data parallel N/2 with ZeRO-2. A small random Llama, 8 steps.
#   scripts/gpu.sh torchrun_modes DIR      (DIR/tools: strata-train, strata-make-tiny)     results in $OUT
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
sum="$out/torchrun_modes.txt"
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); torch $(python3 -c "import torch; print(torch.__version__)" 2>/dev/null); $(date -u +%FT%TZ)" | tee "$sum"
m=/tmp/torchrun-modes
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 4 --intermediate 1408 --vocab 2000 \
  --tokens 400000 --max-pos 4096 > /dev/null
printf 'state_offloading: optimizer\n' > "$out/host.yaml"
printf 'gradient_checkpointing: true\n' > "$out/gc.yaml"
modes=(
  "dp|--zero-stage 0"
  "zero1|--zero-stage 1"
  "zero2|--zero-stage 2"
  "zero3|--zero-stage 3"
  "zero3-host|--zero-stage 3 --config $out/host.yaml"
  "sp$n-gc|--sequence-parallel $n --config $out/gc.yaml"
  "sp2-zero2|--sequence-parallel 2 --zero-stage 2"
)
export STRATA_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')  # the ranks' rendezvous secret
common=(--model $m --data $m/tokens.bin --seq 2048 --batch 1 --steps 8 --lr 1e-4 --json)
for entry in "${modes[@]}"; do
  name=${entry%%|*}; read -r -a flags <<< "${entry#*|}"
  torchrun --standalone --no-python --nproc-per-node "$n" "$dir/tools/strata-train" "${common[@]}" "${flags[@]}" \
    > "$out/tr-$name.jsonl" 2> "$out/tr-$name.log"
  rt=$?
  "$dir/tools/strata-train" "${common[@]}" --gpus "$n" "${flags[@]}" > "$out/gp-$name.jsonl" 2> "$out/gp-$name.log"
  rg=$?
  python3 - "$out" "$name" "$rt" "$rg" <<'PY' | tee -a "$sum"
import json, sys
out, name, rt, rg = sys.argv[1:]
def rows(p):
    try:
        return [json.loads(l) for l in open(f"{out}/{p}-{name}.jsonl") if l.startswith('{"step"')]
    except OSError:
        return []
a, b = rows("tr"), rows("gp")
if not a or not b:
    print(f"{name}: torchrun exit {rt} ({len(a)} steps), --gpus exit {rg} ({len(b)} steps): FAILED")
else:
    worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
    print(f"{name}: torchrun exit {rt}, {len(a)} steps, loss {a[0]['loss']:.5f} -> {a[-1]['loss']:.5f}; --gpus exit {rg}, "
          f"{len(b)} steps, -> {b[-1]['loss']:.5f}; worst relative difference {worst:.2e}; rank 0 peak "
          f"{a[0]['peak_device_bytes']} / {b[0]['peak_device_bytes']} B")
PY
done
