# ZeRO stages composed with the state tiers (device, host, disk) on 2 GPUs
# ZeRO composed with the state tiers on 2 GPUs ("a rank's shard of the state can itself live on host or
# disk"): strata-train --gpus 2 at zero_stage 1, 2 and 3, each with every rank's share of the state on the device,
# AdamW's moments on the host (state_offloading: optimizer), everything on the host (all) and moments and masters
# on disk (master, state_offloading_tier: disk). Per stage: the losses of each placement against the device run
# (the same arithmetic; on GPUs within the cuda backend's run-to-run spread), rank 0's first-step device peak and
# host state against strata-plan's forecast with the same placement, and the saved models' largest weight
# difference from the device run's (the final save gathers the owners' master low halves from their tier).
#   scripts/gpu.sh zero_tiers DIR      (DIR/tools: strata-train, strata-make-tiny, strata-plan)
set -u
export NCCL_NVLS_ENABLE=0
pick_profile
m=/tmp/zero-tiers
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 200000 --max-pos 1024 > /dev/null
mkdir -p "$out/cfg" /tmp/zero-tiers-disk
printf 'state_offloading: none\n' > "$out/cfg/device.yaml"
printf 'state_offloading: optimizer\n' > "$out/cfg/optimizer.yaml"
printf 'state_offloading: all\n' > "$out/cfg/all.yaml"
printf 'state_offloading: master\nstate_offloading_tier: disk\noffload_dir: /tmp/zero-tiers-disk\n' > "$out/cfg/disk.yaml"
for z in 1 2 3; do
  for s in device optimizer all disk; do
    "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --steps 8 --lr 1e-4 --gpus 2 \
      --zero-stage $z --config "$out/cfg/$s.yaml" --json --save "$out/z$z-$s-model" > "$out/z$z-$s.jsonl" \
      2> "$out/z$z-$s.log"
    echo "zero_stage $z, $s: exit $?"
    extra=()
    case $s in
      optimizer | all) extra=(--state-offloading "$s") ;;
      disk) extra=(--state-offloading master --state-offloading-tier disk) ;;
    esac
    "$dir/tools/strata-plan" --model $m --seq 512 --batch 1 --gpus 2 --zero-stage $z "${extra[@]}" --profile "$prof" \
      --json > "$out/z$z-$s-plan.json" 2>> "$out/z$z-$s.log"
  done
done
python3 - "$out" <<'PY'
import json, sys
import torch
from safetensors.torch import load_file
out = sys.argv[1]
def rows(z, s):
    return [json.loads(l) for l in open(f"{out}/z{z}-{s}.jsonl") if l.startswith('{"step"')]
for z in (1, 2, 3):
    base = rows(z, "device")
    wb = load_file(f"{out}/z{z}-device-model/model.safetensors")
    for s in ("device", "optimizer", "all", "disk"):
        r = rows(z, s)
        f = json.load(open(f"{out}/z{z}-{s}-plan.json"))["forecast"]
        worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(r, base)) if r else float("nan")
        got = r[0]["peak_device_bytes"] if r else -1
        host = r[0].get("state_host_bytes", 0) if r else -1
        line = (f"zero_stage {z}, {s}: {len(r)} steps, worst loss difference from the device run {worst:.2e}, "
                f"final {r[-1]['loss']:.6f}; rank 0 peak {got} (forecast {f['peak_bytes']}: "
                f"{'equal' if got == f['peak_bytes'] else 'DIFFERENT by %+d' % (got - f['peak_bytes'])}), "
                f"state host {host} (forecast {f.get('state_host_bytes', 0)})")
        if s != "device":
            w = load_file(f"{out}/z{z}-{s}-model/model.safetensors")
            d = max(float((w[k].float() - wb[k].float()).abs().max()) for k in wb)
            line += f", saved weights' largest difference from the device run {d:.2e}"
        print(line)
PY
