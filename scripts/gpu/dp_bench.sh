# data parallel on 1, 2, 4 GPUs: equivalence, scaling, PyTorch DDP and FSDP2, overlap probe
# Data parallel on one host with 2 or 4 GPUs, in one command (the device tool's 10-minute call):
#   1. the communicator check (scripts/gpu.sh comm_check: nccl against cpu, watchdog, bus bandwidth);
#   2. equivalence: a small random Llama, the same global batch of 4 rows on 1, 2 and 4 GPUs
#      (--batch 4, 2, 1 rows a rank), 20 steps; every step's loss against one GPU's;
#   3. scaling: a Llama-3.2-1B-shaped random checkpoint, 4096 tokens a rank, full fine-tune, keep plan,
#      strata's default recipe (fp32 master and moments) and Hugging Face's bf16 one (--master-weights
#      none --optimizer-state bf16), on 1, 2 and 4 GPUs; then Hugging Face + PyTorch DDP and FSDP2 on the
#      same GPUs with the same tokens a rank (tools/bench/hf_bench.py --dp).
#   scripts/gpu.sh dp_bench DIR   (DIR/tools: strata-train, strata-make-tiny, strata-comm-bench;
#                                  DIR/tests: comm_gpu_test)      results in $OUT (default /tmp/strata-out)
# tokens/s of a strata run: the median of its steps after the first 3 (--json lines), every rank's tokens.
set -u
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
gpus=(1); for g in 2 4; do (( g <= n )) && gpus+=("$g"); done
sum="$out/dp_summary.txt"
echo "GPUs: $n ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); $(date -u +%FT%TZ)" | tee "$sum"

step_median() {  # FILE: median tokens_per_s and step_s over steps > 3, and the peak
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
late = [r for r in rows if r["step"] > 3] or rows
tps = sorted(r["tokens_per_s"] for r in late)
st = sorted(r["step_s"] for r in late)
print(f"{tps[len(tps)//2]:.0f} tok/s, step {st[len(st)//2]:.4f} s, peak {max(r['peak_device_bytes'] for r in rows)/2**30:.2f} GiB, "
      f"final loss {rows[-1]['loss']:.4f} ({len(rows)} steps)")
EOF
}

# 1. communicator
OUT="$out" "$GPU_SH" comm_check "$dir" > "$out/comm_check_stdout.txt" 2>&1
echo "--- comm check (exit $?)" | tee -a "$sum"; grep -E "busbw|latency|PASSED|FAILED|exit" "$out/comm_check.txt" "$out/comm_gpu_test.log" | tail -12 | tee -a "$sum"

# 2. equivalence: each rank's micro-batch has the shape of one GPU's (1 row), so the GEMMs are alike and
#    only the order of the gradient sum differs: 1 GPU accumulates 4 micro-batches, 2 GPUs 2 each, 4 GPUs 1.
m=/tmp/dp-small
make_tiny $m --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1408 --vocab 2000 \
  --tokens 400000 --max-pos 1024 > /dev/null
for g in "${gpus[@]}"; do
  "$dir/tools/strata-train" --model $m --data $m/tokens.bin --seq 512 --batch 1 --grad-accum $((4 / g)) --steps 20 \
    --lr 1e-4 --gpus "$g" --json --max-grad-norm 1.0 > "$out/eq-$g.jsonl" 2> "$out/eq-$g.log" ||
    echo "eq $g GPUs failed: $(tail -3 "$out/eq-$g.log")" | tee -a "$sum"
done
python3 - "$out" "${gpus[@]}" <<'EOF2' | tee -a "$sum"
import json, sys
out, gpus = sys.argv[1], sys.argv[2:]
def run(g):
    return [json.loads(l) for l in open(f"{out}/eq-{g}.jsonl") if l.startswith('{"step"')]
base = run("1")
print(f"--- equivalence, 4 rows x 512 tokens a step (1 GPU: 4 accumulated), 20 steps, lr 1e-4; "
      f"1 GPU: loss {base[0]['loss']:.5f} -> {base[-1]['loss']:.5f}")
for g in gpus[1:]:
    l = run(g)
    if len(l) != len(base):
        print(f"{g} GPUs: {len(l)} steps"); continue
    wl = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(l, base))
    wn = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]) for a, b in zip(l, base))
    print(f"{g} GPUs: loss {l[0]['loss']:.5f} -> {l[-1]['loss']:.5f}; worst relative difference from 1 GPU: "
          f"loss {wl:.2e}, grad norm {wn:.2e} ({'within' if wl <= 1e-3 else 'OUTSIDE'} 1e-3 on the loss)")
EOF2

# 3. scaling
m1=/tmp/dp-1b
make_tiny $m1 --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256 \
  --tied --max-pos 8192 --tokens 1000000 > /dev/null
echo "--- 1B full fine-tune, 4096 tokens a rank, keep" | tee -a "$sum"
run_strata() {  # NAME GPUS FLAGS...
  local name=$1 g=$2; shift 2
  local f="$out/scale-$name-$g.jsonl"
  "$dir/tools/strata-train" --model $m1 --data $m1/tokens.bin --seq 4096 --batch 1 --steps 12 --gpus "$g" --json \
    "$@" > "$f" 2> "${f%.jsonl}.log"
  echo "strata $name, $g GPUs: $(step_median "$f" 2>&1 | tail -1)" | tee -a "$sum"
}
for g in "${gpus[@]}"; do run_strata fp32-recipe "$g"; done
for g in "${gpus[@]:1}"; do run_strata fp32-recipe-bf16-reduce "$g" --grad-reduce bf16; done
for g in "${gpus[@]}"; do run_strata bf16-recipe-bf16-reduce "$g" --master-weights none --optimizer-state bf16 --grad-reduce bf16; done
for dp in ddp fsdp2; do
  for g in "${gpus[@]}"; do
    [[ $dp == fsdp2 && $g == 1 ]] && continue
    r=$(torchrun --standalone --nproc-per-node "$g" tools/bench/hf_bench.py --dp $dp --shape Llama-3.2-1B --seq 4096 \
        --steps 8 --warmup 3 2> "$out/hf-$dp-$g.log" | tail -1)
    echo "hf $dp, $g GPUs: $r" | tee -a "$sum"
  done
done

# 4. how much of an all-reduce hides under GEMMs on this host (tools/bench/overlap_probe.py)
for g in "${gpus[@]:1}"; do
  for spec in "f32 4700" "bf16 2350"; do
    read -r dt mb <<<"$spec"
    r=$(torchrun --standalone --nproc-per-node "$g" tools/bench/overlap_probe.py --dtype $dt --mb $mb 2> "$out/probe-$g-$dt.log" | tail -1)
    echo "overlap probe, $g GPUs: $r" | tee -a "$sum"
  done
done
