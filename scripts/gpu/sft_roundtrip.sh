# a transformers checkpoint and chat jsonl through strata-train, then transformers generates
# On the GPU host: the whole supervised fine-tuning path on a Llama-3.2-1B-shaped checkpoint that transformers
# writes (random weights; the committed Llama 3-style test tokenizer, whose ids fit the 128256
# vocabulary): strata-train --config with a chat jsonl on the cuda backend, then transformers'
# AutoTokenizer and AutoModelForCausalLM load the saved directory and generate.
#   scripts/gpu.sh sft_roundtrip DIR     (DIR/tools/strata-train)
# VOCAB=128257 (a pad token's row added: the vocabulary padded in memory, never in the saved file) and
# PACK=true (sample_packing) exercise those paths; defaults 128256 and false.
set -eu
vocab=${VOCAB:-128256}; pack=${PACK:-false}
w=/tmp/sft; rm -rf $w; mkdir -p $w
python3 - $w $vocab <<'PY'
import sys, torch, transformers, json, shutil
w, vocab = sys.argv[1], int(sys.argv[2])
cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                               num_key_value_heads=8, vocab_size=vocab, tie_word_embeddings=True, rms_norm_eps=1e-5,
                               max_position_embeddings=8192, bos_token_id=0, eos_token_id=1)
torch.manual_seed(0)
transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(f"{w}/base")
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"tests/tokenizer/llama3/{f}", f"{w}/base/{f}")
tok = transformers.AutoTokenizer.from_pretrained(f"{w}/base")
print("base written; tokenizer", type(tok).__name__, "vocab", len(tok))
with open(f"{w}/chat.jsonl", "w") as f:
    for i in range(64):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                          {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]}) + "\n")
PY
cat > $w/sft.yaml <<YAML
base_model: $w/base
datasets:
  - path: $w/chat.jsonl
    type: chat
sequence_len: 128
micro_batch_size: 8
max_steps: 20
learning_rate: 1.0e-4
output_dir: $w/out
sample_packing: $pack
YAML
"$dir/tools/strata-train" --config $w/sft.yaml --backend cuda > "$out/sft.log" 2>&1
tail -4 "$out/sft.log"
ls $w/out
python3 - $w <<'PY'
import sys, torch, transformers
w = sys.argv[1]
tok = transformers.AutoTokenizer.from_pretrained(f"{w}/out")
model = transformers.AutoModelForCausalLM.from_pretrained(f"{w}/out", dtype=torch.bfloat16).cuda()
base = transformers.AutoModelForCausalLM.from_pretrained(f"{w}/base", dtype=torch.bfloat16).cuda()
diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(model.parameters(), base.parameters()))
ids = tok("What is 3 plus 3?", return_tensors="pt").to("cuda")
gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
print("transformers loaded", type(model).__name__, "| vocab", model.config.vocab_size,
      "| embedding", tuple(model.get_input_embeddings().weight.shape), "| largest weight change vs base %.3g" % diff)
print("generated:", repr(tok.decode(gen[0][ids["input_ids"].shape[1]:])))
PY
