#!/usr/bin/env python3
"""Builds the test tokenizers and the expected ids of tests/cpu/tokenizer_test.cpp.

Writes, under tests/tokenizer/:
  corpus.jsonl             one {"text": ...} per line: the test corpus (multilingual, code, emoji,
                           whitespace, numbers, added tokens, bytes outside the vocabulary);
  <name>/tokenizer.json    trained here with Hugging Face `tokenizers`, of the Llama kinds:
                           llama3  byte-level BPE: Llama 3's Split regex + ByteLevel, ignore_merges;
                           llama2  SentencePiece-style BPE: Prepend+Replace normalizer, byte fallback;
                           mistral the llama2 model with a Metaspace pre-tokenizer (prepend first);
                           metaspace_split  the same with prepend always, split on ▁, Metaspace decoder;
                           qwen2   the llama3 model with Qwen2's split regex (\p{N} one digit);
                           llama3_prefix    llama3 with ByteLevel add_prefix_space;
                           spm_unk the llama2 model without byte fallback: <unk>, fused;
                           qwen25  a Qwen2.5 / Qwen3 tokenizer.json's layout: NFC normalizer, Split
                                   on Qwen's regex + ByteLevel, ByteLevel decoder and post-processor,
                                   <|endoftext|> <|im_start|> <|im_end|> and <think> </think>;
  <name>/tokenizer_config.json   bos/eos as a checkpoint writes them;
  normalization.jsonl      tricky strings (NORM_LINES, every code point of the normalization tables,
                           random runs of marks, jamo and composites) with tokenizers' NFC, NFD,
                           NFKC and NFKD of each;
  expected_<name>.jsonl    per corpus line: ids (with special tokens), ids_plain (without) and
                           decoded / decoded_all (tokenizers' decode of ids_plain without / with
                           the special tokens).
No machine here reaches the model hub, so the tokenizers are trained on the corpus itself plus a
few standard-library modules (for code). Rebuild: pip install tokenizers==0.23.3, run with
python 3.11 (other versions train on other stdlib text: new merges, same checks). A tokenizer.json
already there is kept (the expected ids are recomputed from it) unless --retrain is given: training
the SentencePiece-style ones is not deterministic (ties among the alphabet's characters).
"""
import inspect
import json
import random
import sys
import unicodedata
import argparse as _argparse_mod
import textwrap as _textwrap_mod
import json.decoder as _json_decoder_mod
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

CODE = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
'''
CPP = "#include <vector>\r\nint main() {\r\n\tstd::vector<int> v{1, 2, 3};\r\n\treturn v.size() == 3 ? 0 : 1;\r\n}\r\n"
DOC = """# strata

A training engine for Llama-family models.

Usage:
    strata-train --config run.yaml   # trains
    strata-plan --model 8b           # plans

It's fast; it'S tested; IT'LL be fine.\n\n\n"""

LINES = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "a    b     c",
    "tabs\tand\t\tmore\ttabs",
    "\t\tindented with tabs",
    "line one\nline two\n\nline four",
    "windows\r\nline\r\nendings\r\n",
    "\r\n\r\n",
    "\n\n\n",
    " \n \n ",
    "   ",
    "",
    "I'M SURE WE'LL BE FINE; YOU'VE SEEN IT'S THERE, HE'D SAY THEY'RE RIGHT",
    "don't won't can't shouldn't I'll we're they've she's it'd",
    "'s 'S 't 'T 're 'RE 'Re 've 'VE 'm 'M 'll 'LL 'Ll 'd 'D",
    "'ſ 'ﬆ 'K 'x '' ''s",
    "rock'n'roll o'clock y'all",
    "1234567890",
    "3.14159265358979323846",
    "1,000,000 and 12 345 678",
    "phone: +1 (555) 010-9999",
    "٠١٢٣٤٥٦٧٨٩ and ١٢٣٤",
    "１２３４５ fullwidth digits",
    "x² + y³ = z⁴ and ½ ¾ Ⅻ ⅷ",
    "version 2.0.1-rc3 built 2026-11-26T14:46:27Z",
    "Les élèves français étudient à l'école. Où est la bibliothèque?",
    "Größe, Straße, Übung, ẞ",
    "Tiếng Việt có nhiều dấu thanh: ả ã ạ ấ ầ ẩ ẫ ậ",
    "Ελληνικά: Καλημέρα κόσμε",
    "Русский текст: Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Українська: Ґанок, їжак, єнот",
    "中文：你好，世界！我们正在测试分词器。",
    "日本語：こんにちは世界。カタカナとひらがな、漢字。",
    "한국어: 안녕하세요 세계",
    "العربية: مرحبا بالعالم، هذا اختبار.",
    "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया, यह एक परीक्षण है।",
    "ไทย: สวัสดีชาวโลก",
    "Türkçe: İstanbul, ılık, IŞIK",
    "e\u0301 vs \u00e9 (combining acute)",
    "emoji: 👍 👍🏽 ❤️ 🇫🇷 1️⃣ 🎉🎉🎉",
    "family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 👩🏾‍💻",
    "rare: 𠀀𠀁 𐀀 \ue000 \U0010fffd",
    "controls: \x00\x01\x1f\x7f and bom \ufeff",
    "spaces: a\u00a0b\u3000c\u2028d\u2029e\u200bf\u0085g\u1680h\u180ei",
    "new letters: \u1c89\u1c8a \U00031350 \U0001e4d0 \U00011f04",
    "separators \x1c\x1d\x1e\x1f end",
    "punctuation!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( )))",
    "mixed123abc456def7890ghi",
    "under_score snake_case CamelCase kebab-case",
    "https://example.com/path?query=1&other=two#frag",
    "email: someone@example.org",
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
    "<|eot_id|><|eot_id|>",
    "partial <|eot_id and <|eot_id| and <eot_id|>",
    "text<|pad|>more text",
    "<s> hello </s>",
    "<s>[INST] hi [/INST]",
    "<unk> and <s> and </s>",
    "mask: a <mask> b  <mask>  c<mask>d",
    "foo food foo_bar (foo) xfoo foo",
    "foo² foo٣ foo\u0301 foo\u200d foo§ ²foo Ⅻfoo",
    "New York is in New York State; newyork is not",
    "hello world and hello worlds",
    "<0x41> literally",
    "▁already▁has▁metaspace",
    "ends with newline\n",
    "x" * 300,
    "ab" * 200,
    "word " * 80,
    "9" * 50,
    "\u4e00" * 40,
    CODE,
    CPP,
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "    return x  # comment\n\n\n    pass",
    DOC,
]
# Whole documents: every line above joined, special tokens and all.
LINES += ["\n".join(LINES[:45]), "\n".join(LINES[45:]), "\r\n".join(LINES)]

# Lines for the Unicode normalizers (in the corpus, not in the training text of the tokenizers
# above, whose files stay as they were).
NORM_LINES = [
    "Cafe\u0301 de\u0301ja\u0300 vu, re\u0301sume\u0301, nai\u0308ve, Zoe\u0308, n\u0303",
    unicodedata.normalize("NFD", "Tiếng Việt có nhiều dấu thanh: ả ã ạ ấ ầ ẩ ẫ ậ"),
    unicodedata.normalize("NFD", "한국어: 안녕하세요 세계"),
    "jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af \uac00\u11a8 \u1100\u1100\u1161 \u1161\u11a8 "
    "\u115f\u1160 \u11a7",
    "ligatures: ﬁnance ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ǆ",
    "circled: ① ② ⑩ ⑳ ⑴ ⒜ ⓐ Ⓐ ㉑ ㊿",
    "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ ａｂｃ ０１２ ！？",
    "units: ㎏ ㎞ ㏄ ℡ ™ ㍻ ㌀ ℃ ° ½ ⅓ x² H₂O µ Å",
    "halfwidth: ｶﾀｶﾅ ﾊﾟ ｶﾞ ﾊﾞﾊﾟ ｡｢｣",
    "reorder: a\u0301\u0323 a\u0323\u0301 q\u0307\u0323 u\u031b\u0323 x\u0315\u0300\u05ae\u0300b \u1e9b\u0323",
    "blocked: a\u0328\u0301 e\u0301\u0301 o\u0302\u0301\u0300 A\u030a\u212b \u0301leading mark",
    "singletons: \u2126 \u212a \u212b \u0958 \u0344 \u0f73 \u0340\u0341 \u2000\u2001 \u037e \u0387",
    "greek: \u03b9\u0308\u0301 \u0390 \u03c9\u0345\u0313 \u1fb3 \u1f00\u0345",
    "indic: \u0928\u093c \u0915\u093c \u09c7\u09be \u0b47\u0b3e \u0bc6\u0bbe \u0d46\u0d3e \u1025\u102e "
    "\U00011099\U000110ba \U00011935\U00011930",
    "newer marks: a\u0300\u07fd\u0316 a\u1dfa\u0316 \u0898\u0300 \U00010781 \u32ff \ua7f2",
    "mixed: ﬁ\u0301 ①\u0301 Ａ\u0301 ﾊ\u309a \u3131\u314f \uff21\u030a",
]

# Lines for the regex tokenizers (GPT-2, tekken, DeepSeek): case changes, slashes, emoji, code.
REGEX_LINES = [
    "CamelCaseWords HTTPServer iPhone XMLHttpRequest getHTTPResponseCode ÉCOLE École",
    "path/to/file.txt https://example.com/a/b?c=1&d=2 // comment /* block */",
    "emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 ❤️ 🙂‍↔️ 😀😃😄",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n\treturn sum;",
    "x=1e-9; y = 0x1F; z = 1_000_000; w = 3.0f",
    "   indented    spaces   and\u00a0nbsp\u2003em\u3000ideographic",
    "Mixed 中文English日本語Text한국어123數字",
    "MistralNemo [INST] hi [/INST] foo foobar foo. <mask> x <mask>y [SEP]  z",
    "  <|endoftext|>  Hello World hello world HELLO WORLD",
    "'Tis the season; I'd've; O'NEILL's",
    "\u0130stanbul \u0049\u0307 \u1E9E \u03A3\u03A3 \u01C5 \u1F88",
]


def normalization_cases():
    """The tricky strings of normalization.jsonl."""
    forms = [getattr(normalizers, f)().normalize_str for f in ("NFD", "NFKD")]
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and
              (unicodedata.combining(chr(c)) or any(f(chr(c)) != chr(c) for f in forms))]
    cases = list(NORM_LINES)
    for i in range(0, len(points), 64):  # each code point alone, after a space
        cases.append("".join(" " + chr(c) for c in points[i:i + 64]))
    rng = random.Random(15)
    marks = [c for c in points if unicodedata.combining(chr(c))]
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A7, 0x11C3)) + [0xAC00, 0xAC1C]
    letters = [ord(x) for x in "aeiouAEOUnsyzK "] + [0x3B1, 0x3C9, 0x915, 0x9C7, 0xB47, 0x1025, 0x11099, 0x11935]
    for _ in range(500):
        pools = [marks, points, jamo, letters]
        cases.append("".join(chr(rng.choice(rng.choices(pools, [4, 3, 2, 3])[0])) for _ in range(rng.randint(1, 10))))
    return cases


def training_text():
    mods = [_argparse_mod, _textwrap_mod, _json_decoder_mod]
    return LINES * 3 + [inspect.getsource(m) for m in mods]


TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
                r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
                r"\s+(?!\S)|\s+")
# DeepSeek (LLM, V2)'s pre-tokenizer: a Sequence of Splits, Digits, then ByteLevel. Its letter class
# is written as code point ranges here (several of its characters change under NFC in an editor).
_DS_LETTERS = [(0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
               (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F),
               (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481),
               (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD),
               (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A),
               (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57),
               (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4),
               (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3),
               (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102),
               (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124),
               (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139),
               (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B),
               (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B),
               (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06),
               (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3),
               (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]


def _char_class(ranges):
    return "".join(chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)


DEEPSEEK_SPLITS = [
    r"[\r\n]",
    r"\s?[" + _char_class(_DS_LETTERS) + "]+",
    r"\s?[" + _char_class([(0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E), (0x2018, 0x201F),
                           (0x3000, 0x3002)]) + "]+",
    r"\s+$",
    "[" + _char_class([(0x4E00, 0x9FA5), (0x800, 0x4E00), (0xAC00, 0xD7FF)]) + "]+",
]


def byte_level_bpe(pre_tokenizer, extra_text=(), **bpe):
    tok = Tokenizer(models.BPE(**bpe))
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text() + list(extra_text) * 3 + REGEX_LINES * 3, trainer)
    return tok


def gpt2():
    """GPT-2's layout (SmolLM, Phi, OLMo...): ByteLevel with its own regex, trim_offsets; added tokens
    with each flag."""
    tok = byte_level_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                            AddedToken("[SEP]", rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("foo", single_word=True, normalized=False, special=False),
                    AddedToken("hello world", normalized=True, special=False),
                    AddedToken("World", lstrip=True, rstrip=True, normalized=True, special=False)])
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_prefix_space": False,
              "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"}
    return tok, config


def gpt2_variant(gpt2_tok, **changes):
    j = json.loads(gpt2_tok.to_str())
    j.update(changes)
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}


def tekken():
    """Mistral-Nemo's tekken layout: Split on its case-aware regex + ByteLevel, <s> template."""
    tok = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TEKKEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ]), ignore_merges=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]"])
    tok.add_tokens([AddedToken("[SEP]", lstrip=True, rstrip=True, normalized=False, special=False)])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def pre_tokenizer_json(p):
    return json.loads(p.__getstate__())


def deepseek(gpt2_tok):
    """DeepSeek-V2's pre-tokenizer (a Sequence of Splits, Digits, ByteLevel) on the GPT-2 model."""
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in DEEPSEEK_SPLITS]
    steps += [pre_tokenizers.Digits(individual_digits=True),
              pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]
    return gpt2_variant(gpt2_tok, pre_tokenizer=pre_tokenizer_json(pre_tokenizers.Sequence(steps)))


def normalizers_mix(gpt2_tok):
    """The normalizers (NFKC, Strip, Replace by regex and string, Lowercase) before GPT-2's ByteLevel
    with add_prefix_space; a normalized added token ("hello world") matched after lowercasing."""
    norm = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(left=True, right=False),
                                 normalizers.Replace(Regex(r"\s{2,}"), "  "), normalizers.Replace("ß", "ss"),
                                 normalizers.Lowercase()])
    j = json.loads(gpt2_tok.to_str())
    j["normalizer"] = json.loads(norm.__getstate__())
    j["pre_tokenizer"]["add_prefix_space"] = True
    j["post_processor"]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}


def splits_mix(gpt2_tok):
    """Every Split behaviour and invert, Whitespace, Punctuation, Digits (contiguous), a literal
    pattern; then ByteLevel on the GPT-2 model."""
    steps = [pre_tokenizers.Punctuation(behavior="contiguous"),
             pre_tokenizers.Digits(individual_digits=False),
             pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="merged_with_previous"),
             pre_tokenizers.Split("th", behavior="merged_with_next"),
             pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="merged_with_next", invert=True),
             pre_tokenizers.Split(Regex(r"\s"), behavior="contiguous", invert=True),
             pre_tokenizers.Split(Regex(r"x"), behavior="removed"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    return gpt2_variant(gpt2_tok, pre_tokenizer=pre_tokenizer_json(pre_tokenizers.Sequence(steps)))


def whitespace_mix(gpt2_tok):
    """Whitespace (\\w+ or other non-space runs; spaces removed), WhitespaceSplit, then ByteLevel."""
    steps = [pre_tokenizers.Whitespace(), pre_tokenizers.WhitespaceSplit(),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    return gpt2_variant(gpt2_tok, pre_tokenizer=pre_tokenizer_json(pre_tokenizers.Sequence(steps)))


def byte_level_normalizer(gpt2_tok):
    """The ByteLevel normalizer, then a split before each Ġ (a space's character)."""
    return gpt2_variant(gpt2_tok, normalizer={"type": "ByteLevel"},
                        pre_tokenizer=pre_tokenizer_json(pre_tokenizers.Split("Ġ", behavior="merged_with_next")))


def llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>", "<|pad|>"])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("foo", single_word=True, normalized=False, special=False),
                    AddedToken("New York", normalized=True, special=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "model_max_length": 131072,
              "clean_up_tokenization_spaces": True, "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def spm_base():
    """Llama 2's layout: <unk> <s> </s>, then <0x00>..<0xFF>, then the merged pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Trained on words as SentencePiece does (merges never cross a ▁ boundary inside a word)...
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=2700, min_frequency=2, show_progress=False, limit_alphabet=200,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(training_text(), trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    ordered = sorted(vocab.items(), key=lambda kv: kv[1])
    new_vocab = {}
    for t, i in ordered[:3]:
        new_vocab[t] = i
    for b in range(256):
        new_vocab[f"<0x{b:02X}>"] = len(new_vocab)
    for t, i in ordered[3:]:
        if t not in new_vocab:
            new_vocab[t] = len(new_vocab)
    j["model"]["vocab"] = new_vocab
    # ...but encoded as Llama 2's tokenizer.json does it: Prepend + Replace, no pre-tokenizer.
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens(["<pad>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("hello world", normalized=True, special=False)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok


def llama2(base):
    config = {"add_bos_token": True, "add_eos_token": False,
              "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False},
              "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False},
              "unk_token": "<unk>", "pad_token": None, "legacy": True, "tokenizer_class": "LlamaTokenizer"}
    return base, config


def mistral(base):
    j = json.loads(base.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "legacy": False, "tokenizer_class": "LlamaTokenizer"}
    return Tokenizer.from_str(json.dumps(j)), config


def metaspace_split(base):
    j = json.loads(base.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<s>", "eos_token": "</s>"}


def qwen2(llama3_tok):
    j = json.loads(llama3_tok.to_str())
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2_REGEX
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


def llama3_prefix(llama3_tok):
    j = json.loads(llama3_tok.to_str())
    j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


def spm_unk(base):
    j = json.loads(base.to_str())
    j["model"]["byte_fallback"] = False
    return Tokenizer.from_str(json.dumps(j)), {"bos_token": "<s>", "eos_token": "</s>", "add_eos_token": True}


def qwen25():
    """Qwen2.5's tokenizer.json layout (Qwen3's is the same, with more added tokens)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text() + NORM_LINES * 3, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False),
                    AddedToken("</think>", normalized=False, special=False)])
    j = json.loads(tok.to_str())  # as Qwen's file writes these (the Python decoder takes no options)
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    tok = Tokenizer.from_str(json.dumps(j))
    config = {"add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "errors": "replace", "model_max_length": 131072, "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False}
    return tok, config


def main():
    retrain = "--retrain" in sys.argv[1:]
    with open(HERE / "normalization.jsonl", "w", encoding="utf-8") as f:
        norms = [(f, getattr(normalizers, f)().normalize_str) for f in ("NFC", "NFD", "NFKC", "NFKD")]
        for text in normalization_cases():
            f.write(json.dumps({"text": text, **{name: n(text) for name, n in norms}}, ensure_ascii=False) + "\n")
    with open(HERE / "corpus.jsonl", "w", encoding="utf-8") as f:
        for line in LINES + NORM_LINES + REGEX_LINES:
            f.write(json.dumps({"text": line}, ensure_ascii=False) + "\n")
    base = spm_base()
    l3 = llama3()
    kinds = (("llama3", l3), ("llama2", llama2(base)), ("mistral", mistral(base)),
             ("metaspace_split", metaspace_split(base)), ("qwen2", qwen2(l3[0])),
             ("llama3_prefix", llama3_prefix(l3[0])), ("spm_unk", spm_unk(base)), ("qwen25", qwen25()))
    g2 = gpt2()
    kinds += (("gpt2", g2), ("tekken", tekken()), ("deepseek", deepseek(g2[0])),
              ("normalizers_mix", normalizers_mix(g2[0])), ("splits_mix", splits_mix(g2[0])),
              ("whitespace_mix", whitespace_mix(g2[0])), ("byte_level_normalizer", byte_level_normalizer(g2[0])))
    for name, (tok, config) in kinds:
        d = HERE / name
        d.mkdir(exist_ok=True)
        if retrain or not (d / "tokenizer.json").exists():
            tok.save(str(d / "tokenizer.json"), pretty=True)
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))  # what the C++ side reads
        if config.get("add_eos_token"):  # as transformers' LlamaTokenizerFast rebuilds the template
            tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                               special_tokens=[("<s>", 1), ("</s>", 2)])
        with open(HERE / f"expected_{name}.jsonl", "w", encoding="utf-8") as f:
            for line in LINES + NORM_LINES + REGEX_LINES:
                enc = tok.encode(line)
                ids = enc.ids
                plain = tok.encode(line, add_special_tokens=False).ids
                # offsets in bytes (tokenizers' Python side gives characters)
                offsets = [[len(line[:b].encode()), len(line[:e].encode())] for b, e in enc.offsets]
                f.write(json.dumps({"ids": ids, "ids_plain": plain, "offsets": offsets,
                                    "decoded": tok.decode(plain, skip_special_tokens=True),
                                    "decoded_all": tok.decode(plain, skip_special_tokens=False)},
                                   ensure_ascii=False) + "\n")
        print(f"{name}: {tok.get_vocab_size()} tokens, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
