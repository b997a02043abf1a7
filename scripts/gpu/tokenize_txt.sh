# tokenizing a .txt dataset on every core of the GPU host against Hugging Face tokenizers (CPU only)
# How fast strata tokenizes one long text as a .txt dataset (cut at line starts, a part per core; ids checked
# equal to `tokenizers`' encode of the whole text), on every core of this host. No GPU is used.
#   scripts/gpu.sh tokenize_txt DIR      MB=64 (text size), TOKENIZERS=llama3,... (bench_tokenize.py's list)
# Output: $OUT/tokenize_txt.txt (the table, with the host's core count in its first line).
set -uo pipefail
[[ -x $dir/tools/strata-tokenize ]] || { echo "tokenize_txt: $dir/tools/strata-tokenize is missing" >&2; exit 3; }
{
  echo "== $(date -u +%F) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  python3 scripts/bench_tokenize.py "$dir/tools/strata-tokenize" --txt --mb "${MB:-64}" \
    --tokenizers "${TOKENIZERS:-llama3,llama3-onig,qwen25,gpt2,tekken,llama2,mistral,deepseek,lookahead_split}" 2>&1
} | tee "$out/tokenize_txt.txt"
