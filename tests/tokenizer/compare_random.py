#!/usr/bin/env python3
"""Differential check: random strings through Hugging Face tokenizers and strata-tokenize must give
the same ids (with special tokens), the same offsets and the same decoded text. Not a ctest (needs `tokenizers`):
    python3 tests/tokenizer/compare_random.py BUILD/tools/strata-tokenize [count] [seed] [name,name...]
With count "all", the texts are every Unicode scalar value instead: runs of 48 consecutive code
points, and 16 of them at a time each between a letter and a digit (46,336 texts).
"""
import json
import random
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer, processors

HERE = Path(__file__).resolve().parent
PIECES = (list("abcXYZ'sStTdDmMlLrReEvV ") + [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028",
          "\x1c", "\x85", "\u200b", "1", "22", "4567", "٣", "²", "Ⅻ", "é", "e\u0301", "ß", "ſ", "K", "İ", "中文",
          "日本", "한", "مرحبا", "Привет", "नमस्ते", "👍", "👨‍👩‍👧", "🇫🇷", "\U00031350", "\u1c89", "\U00020000",
          "\ue000", "\x00", "\x7f", "!", "?!", "...", "(", ")", "_", "-", "<", ">", "|", "▁", "▁▁", "<s>", "</s>",
          "<unk>", "<|eot_id|>", "<|begin_of_text|>", "<|pad|>", "<mask>", " <mask> ", "foo", "New York",
          "hello world", "<0x41>", "<|im_start|>", "'ll", "'S", "'Re", "\ufeff", "\U0010fffd",
          # for the normalizers: marks to compose and reorder, jamo, compatibility characters
          "\u0301", "\u0323", "\u0308", "\u0345", "\u0313", "\u05ae", "\u0315", "\u1dfa", "\u093c", "\u09be",
          "\u1100", "\u1161", "\u11a8", "\uac00", "ﬁ", "①", "Ａ", "ﾊ", "\u309a", "\u212b", "\u0958", "\u0344",
          "<|endoftext|>", "<|im_end|>", "<think>",
          # for the regex tokenizers: case changes, slashes, added tokens with lstrip/rstrip
          "Camel", "HTTP", "iPhone", "/", "//", "a/b", "[INST]", "[SEP]", " [SEP] ", "World", " World ", "ẞ", "İ",
          "\u01c5", "\u1f88", "\U0001F44D\U0001F3FD", "\u200d",
          "\U00011DE0", "\U00016FF4", "\u166d", "\U000111C9", "\U00010D6E", "\U00011944"])


def random_char(rng):
    """Any scalar value, weighted toward the planes with letters and numbers."""
    while True:
        c = rng.choice([rng.randrange(0x80, 0x3000), rng.randrange(0x3000, 0x10000), rng.randrange(0x10000, 0x110000)])
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def random_text(rng):
    return "".join(rng.choice(PIECES) if rng.random() < 0.8 else random_char(rng) for _ in range(rng.randint(0, 40)))


def every_code_point():
    scalars = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = []
    for i in range(0, len(scalars), 48):
        chunk = scalars[i:i + 48]
        texts.append("".join(chr(c) for c in chunk))
        texts.append(" ".join("a" + chr(c) + "1" for c in chunk[:16]))
    return texts


def main():
    tool = sys.argv[1]
    count = sys.argv[2] if len(sys.argv) > 2 else "3000"
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    texts = every_code_point() if count == "all" else [random_text(rng) for _ in range(int(count))]
    count = len(texts)
    failures = 0
    names = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    for name in ("llama3", "llama2", "mistral", "metaspace_split", "qwen2", "llama3_prefix", "spm_unk", "qwen25",
                 "gpt2", "tekken", "deepseek", "normalizers_mix", "splits_mix", "whitespace_mix",
                 "byte_level_normalizer", "lookahead_split", "deepseek_v3", "gemma"):
        if names and name not in names:
            continue
        tok = Tokenizer.from_file(str(HERE / name / "tokenizer.json"))
        config = json.loads((HERE / name / "tokenizer_config.json").read_text())
        if config.get("add_eos_token"):  # the template transformers' LlamaTokenizerFast builds
            tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                               special_tokens=[("<s>", 1), ("</s>", 2)])
        stdin = "".join(json.dumps(t) + "\n" for t in texts)
        out = subprocess.run([tool, "--tokenizer", str(HERE / name), "--jsonl", "--offsets"], input=stdin.encode(),
                             capture_output=True, check=True).stdout.decode().split("\n")
        for k, t in enumerate(texts):
            enc = tok.encode(t)
            want = enc.ids
            got = [int(x) for x in out[2 * k].split()]
            if got != want:
                failures += 1
                if failures <= 10:
                    print(f"{name}: {t!r}\n  want {want}\n  got  {got}")
            # offsets: tokenizers gives characters; strata bytes
            want_off = [len(t[:b].encode()) for o in enc.offsets for b in o]
            got_off = [int(x) for x in out[2 * k + 1].split()]
            if got_off != want_off:
                failures += 1
                if failures <= 10:
                    print(f"{name} offsets: {t!r}\n  want {want_off}\n  got  {got_off}")
        # decode of the reference ids, with the special tokens kept
        for t in texts[:300]:
            ids = tok.encode(t, add_special_tokens=False).ids
            got = subprocess.run([tool, "--tokenizer", str(HERE / name), "--decode"],
                                 input=" ".join(map(str, ids)).encode(), capture_output=True, check=True).stdout
            want = tok.decode(ids, skip_special_tokens=False)
            if got.decode() != want:
                failures += 1
                if failures <= 10:
                    print(f"{name} decode: {t!r}\n  want {want!r}\n  got  {got.decode()!r}")
        print(f"{name}: {count} texts compared")
    print("failures:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
