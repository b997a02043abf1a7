# fp8: true against bf16 in one command: tests, step speed, the FP8 GEMM rate, loss curves on real text
# On the GPU host: the FP8 recipe (engine/fp8.h).
#   scripts/gpu.sh fp8 DIR PART   PART: check | bench | calibrate | curves | all
# check: tests/gpu/fp8_gpu_test and op_table_gpu_test. bench: strata-bench with and without --fp8, back to back,
# on the same flags (Hugging Face's recipe: master_weights none, optimizer_state bf16, gradients bf16), plus
# Hugging Face itself at 8B 16384 (tools/bench/hf_bench.py). calibrate: strata-calibrate --quick (writes
# $OUT/profile.json with matmul_fp8_tflops). curves: strata-train from the same random init, bf16 and fp8, on
# real text (this host's Python sources, tokenized by tests/tokenizer/llama3), with a held-out loss.
# JSON lines to $OUT/fp8.jsonl, per-step metrics to $OUT/curve-*.jsonl, stderr to $OUT/fp8.err.
set -uo pipefail
part=${1:-all}
gpu_line "$out/fp8.err"
hf_recipe=(--master-weights none --optimizer-state bf16 --gradients bf16)
bench() {  # NAME FLAGS...
  local name=$1
  shift
  for p in bf16 fp8; do
    local extra=()
    [ $p = fp8 ] && extra=(--fp8)
    echo "== $name $p: strata-bench $* ${extra[*]}" >>"$out/fp8.err"
    local line
    line=$("$dir/tools/strata-bench" --backend cuda "$@" "${extra[@]}" 2>>"$out/fp8.err" | tail -1)
    [ -n "$line" ] || line='{"error": "no output"}'
    echo "{\"row\": \"$name\", \"precision\": \"$p\", \"result\": $line}" | tee -a "$out/fp8.jsonl" | cut -c1-400
  done
}
if [[ $part == check || $part == all ]]; then
  for t in fp8_gpu_test op_table_gpu_test; do
    "$dir/tests/$t" --gtest_brief=1 2>&1 | tail -12 | tee -a "$out/fp8.err"
  done
fi
if [[ $part == bench || $part == all ]]; then
  bench "1B full 4096 keep" --shape Llama-3.2-1B --seq 4096 --mode full --plan keep --steps 4 --warmup 2 "${hf_recipe[@]}"
  bench "8B full 4096 gc" --shape Llama-3-8B --seq 4096 --mode full --plan gc --steps 3 --warmup 1 "${hf_recipe[@]}"
  bench "8B full 16384 gc" --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 "${hf_recipe[@]}"
  if [[ ${HF:-1} == 1 ]]; then
    echo "== hf 8B 16384 gc" >>"$out/fp8.err"
    python3 tools/bench/hf_bench.py --shape Llama-3-8B --seq 16384 --mode full --plan gc --steps 3 --warmup 1 \
      2>>"$out/fp8.err" | tail -1 | sed 's/^/{"row": "8B full 16384 gc", "precision": "hf bf16", "result": /; s/$/}/' |
      tee -a "$out/fp8.jsonl" | cut -c1-400
  fi
fi
if [[ $part == calibrate || $part == all ]]; then
  "$dir/tools/strata-calibrate" --quick --out "$out/profile.json" 2>&1 | grep -i "gemm\|fp8\|TFLOP" | tee -a "$out/fp8.err"
fi
if [[ $part == curves || $part == all ]]; then
  corpus=/tmp/fp8-corpus
  mkdir -p $corpus
  if [[ ! -f $corpus/tokens.bin ]]; then
    python3 - "$corpus" <<'PY'
import glob, os, site, sys
root = [p for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "transformers"))][0]
files = sorted(glob.glob(os.path.join(root, "transformers", "**", "*.py"), recursive=True))
with open(os.path.join(sys.argv[1], "corpus.txt"), "w") as f:
    for p in files:
        f.write(open(p, encoding="utf-8", errors="replace").read() + "\n")
print(f"{len(files)} files from {root}", file=sys.stderr)
PY
    "$dir/tools/strata-tokenize" --tokenizer tests/tokenizer/llama3 --no-special --stats <$corpus/corpus.txt >$corpus/ids.txt 2>>"$out/fp8.err"
    python3 - "$corpus" <<'PY'
import struct, sys
ids = [int(t) for t in open(sys.argv[1] + "/ids.txt").read().split()]
with open(sys.argv[1] + "/tokens.bin", "wb") as f:
    f.write(b"STRATOK1" + struct.pack("<II", 4, 0) + struct.pack(f"<{len(ids)}I", *ids))
print(f"{len(ids)} tokens, max id {max(ids)}", file=sys.stderr)
PY
  fi
  vocab=$(python3 -c "import json; d=json.load(open('tests/tokenizer/llama3/tokenizer.json')); n=max(list(d['model']['vocab'].values())+[t['id'] for t in d.get('added_tokens',[])])+1; print((n+63)//64*64)")
  curve() {  # NAME MODEL_DIR SEQ BATCH STEPS MAKE_TINY_ARGS...
    local name=$1 m=$2 seq=$3 batch=$4 steps=$5
    shift 5
    make_tiny_once "$m" "$@" --vocab "$vocab" --tokens 1000 --max-pos "$seq" --dtype bf16 >>"$out/fp8.err" 2>&1
    for p in bf16 fp8; do
      cat >"$m/$p.yaml" <<YAML
base_model: $m
data: $corpus/tokens.bin
sequence_len: $seq
micro_batch_size: $batch
max_steps: $steps
learning_rate: 3.0e-4
warmup_steps: 50
lr_scheduler: cosine
val_set_size: 0.02
eval_steps: 100
logging_steps: 10
metrics_file: $out/curve-$name-$p.jsonl
fp8: $([ $p = fp8 ] && echo true || echo false)
YAML
      echo "== curve $name $p" >>"$out/fp8.err"
      /usr/bin/time -f "%e s" "$dir/tools/strata-train" --config "$m/$p.yaml" --backend cuda 2>&1 | tail -4 | tee -a "$out/fp8.err"
    done
  }
  curve 1b /tmp/fp8-1b 2048 2 "${STEPS:-1000}" --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192
  curve 8b4 /tmp/fp8-8b4 4096 1 "${STEPS:-1000}" --layers 4 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336
fi
