# two strata-train processes on one GPU, the arena sized from the plan, against a fixed arena
# On the GPU host: two strata-train processes side by side on one GPU (the arena sized
# from the plan). A 1.2B-parameter random Llama (strata-make-tiny), full fine-tune, 30 steps each.
#   scripts/gpu.sh two_procs DIR      (DIR/tools holds strata-train and strata-make-tiny)
# 1. A and B with the default arena (the plan's forecast + headroom), B starting 5 s after A.
# 2. The baseline: C reserving what the old default took (--device-memory 76GiB), D started beside it.
#    PART=baseline runs only this half (the model is made again).
# Logs and an nvidia-smi memory trace (1 s) in $OUT.
set -u
m=/tmp/two-procs-model
: >"$out/gpu.txt"; gpu_line "$out/gpu.txt" name,memory.total
make_tiny $m --layers 24 --hidden 2048 --heads 16 --kv-heads 8 --intermediate 5632 --vocab 32000 \
  --tokens 400000 --max-pos 4096 | tee -a "$out/gpu.txt"
train() { "$dir/tools/strata-train" --model $m --data $m/tokens.bin --backend cuda --seq 2048 --batch 2 --steps 30 "$@"; }
nvidia-smi --query-gpu=memory.used --format=csv,noheader -lms 500 > "$out/smi.txt" &
smi=$!
if [[ ${PART:-all} != baseline ]]; then
  (train > "$out/a.log" 2>&1; echo "exit $?" >> "$out/a.log") &
  a=$!
  sleep 5
  (train > "$out/b.log" 2>&1; echo "exit $?" >> "$out/b.log") &
  b=$!
  wait $a $b
fi
echo "--- baseline" >> "$out/smi.txt"
(train --device-memory 76GiB --steps 300 > "$out/c.log" 2>&1; echo "exit $?" >> "$out/c.log") &
c=$!
sleep 10  # C has loaded and trains (300 steps) while D starts
train > "$out/d.log" 2>&1; echo "exit $?" >> "$out/d.log"
wait $c
kill $smi
for f in a b c d; do [[ -f "$out/$f.log" ]] || continue; echo "== $f"; grep -E "^arena|arena budget|exit|rror|step +30|tok/s" "$out/$f.log" | tail -5; done
sort -n "$out/smi.txt" | tail -1 | sed 's/^/max memory.used: /'
