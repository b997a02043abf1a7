#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (committed; rerun after changing it).

Besides small valid and malformed inputs, each parser gets one input large enough that a
super-linear parse exceeds libFuzzer's -timeout (scripts/fuzz.sh): e.g. a safetensors header of
50k entries took 3 s in Release with the quadratic ordered_json parse, far more under ASan.
"""
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, header_override=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = header_override if header_override is not None else json.dumps(header, separators=(",", ":"))
    text = text.encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


DEEP = 100000
CACHE_MAGIC = b"STRDSET1"  # model/data/datasets.cpp kCacheMagic


def main():
    small = [
        ("w", "F32", [2, 2], f32(1, 2, 3, 4)),
        ("b", "BF16", [3], bf16(1.0, -0.5, 2.0)),
        ("h", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),
        ("i", "I32", [2], struct.pack("<2i", 7, -8)),
        ("u", "U8", [3], b"xyz"),
        ("s", "I16", [], struct.pack("<h", 5)),
        ("e", "F32", [0, 4], b""),
    ]
    put("safetensors", "dtypes", safetensors(small, {"format": "pt"}))
    put("safetensors", "scalar", safetensors([("x", "F32", [], f32(42))]))
    put("safetensors", "nan", safetensors([("x", "F32", [2], f32(1, float("nan")))]))
    put("safetensors", "overlap", safetensors([], header_override=json.dumps(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})) + b"\0" * 8)
    put("safetensors", "truncated", safetensors(small)[:40])
    put("safetensors", "escapes", safetensors([("a\"\\\u00e9\u4e2d", "F32", [1], f32(1))], {"k": "v\n"}))
    big = [("model.layers.%d.self_attn.q_proj.weight" % i, "F32", [0], b"") for i in range(50000)]
    put("safetensors", "huge_header_50k", safetensors(big))

    shard = safetensors([("a", "F32", [2], f32(1, 2)), ("b", "BF16", [1], bf16(3.0))])
    shard2 = safetensors([("c", "F32", [], f32(5))])
    index = {"metadata": {"total_size": 14}, "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
                                                           "c": "s2.safetensors"}}
    put("checkpoint_index", "two_shards", json.dumps(index).encode() + b"\0" + shard + b"\0" + shard2)
    put("checkpoint_index", "missing_shard",
        json.dumps({"weight_map": {"a": "model-00002-of-00002.safetensors"}}).encode() + b"\0" + shard)
    put("checkpoint_index", "wrong_shard", json.dumps({"weight_map": {"c": "s1.safetensors"}}).encode() + b"\0" + shard)
    many = {"weight_map": {"t%d" % i: "s1.safetensors" for i in range(50000)}}
    big_shard = safetensors([("t%d" % i, "F32", [0], b"") for i in range(50000)])
    put("checkpoint_index", "huge_index_50k", json.dumps(many).encode() + b"\0" + big_shard)

    llama32 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": 64,
               "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
               "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
               "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05,
               "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
               "vocab_size": 128256}
    put("hf_config", "llama32_1b", json.dumps(llama32, indent=2))
    t5 = dict(llama32)
    del t5["rope_scaling"]
    t5["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}
    t5["dtype"] = "float32"
    put("hf_config", "transformers5", json.dumps(t5))
    # The other rope types, in both blocks: yarn as Qwen2.5's long-context configs write it, longrope with its
    # factor lists (head_dim / 2 entries each), dynamic and linear.
    for name, block, rope in (
            ("rope_yarn", "rope_scaling", {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
            ("rope_yarn_mscale", "rope_parameters", {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0,
                                                     "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32,
                                                     "beta_slow": 1, "truncate": False}),
            ("rope_longrope", "rope_scaling", {"rope_type": "longrope", "original_max_position_embeddings": 4096,
                                               "short_factor": [1.0 + i / 64 for i in range(32)],
                                               "long_factor": [1.0 + i / 8 for i in range(32)]}),
            ("rope_dynamic", "rope_scaling", {"rope_type": "dynamic", "factor": 2.0}),
            ("rope_linear", "rope_scaling", {"rope_type": "linear", "factor": 4.0})):
        c = dict(llama32)
        del c["rope_scaling"]
        c[block] = rope
        put("hf_config", name, json.dumps(c))
    put("hf_config", "minimal", '{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, '
                                '"num_attention_heads": 4, "vocab_size": 100}')
    put("hf_config", "huge_layers", '{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2147483647, '
                                    '"num_attention_heads": 4, "vocab_size": 100}')
    padded = dict(llama32)
    for i in range(40000):
        padded["unused_key_%d" % i] = i
    put("hf_config", "huge_40k_keys", json.dumps(padded))

    def tok(width, ids, magic=b"STRATOK1", reserved=0):
        fmt = "<%d%s" % (len(ids), "H" if width == 2 else "I")
        return magic + struct.pack("<II", width, reserved) + struct.pack(fmt, *ids)

    put("tokens", "u16", tok(2, [1, 2, 3, 250, 0]) + b"\x01")
    put("tokens", "u32", tok(4, [5, 6, 7]) + b"\xff")
    put("tokens", "bad_magic", tok(4, [1], magic=b"STRATOK2"))
    put("tokens", "odd_payload", tok(2, [1, 2])[:-1])
    put("tokens", "big_u16", tok(2, [i % 60000 for i in range(30000)]) + b"\xff")

    put("yaml_config", "readme", """base_model: build/tiny
data: build/tiny/tokens.bin
sequence_len: 128
micro_batch_size: 8
max_steps: 100
learning_rate: 3.0e-3
gradient_checkpointing: true
plan:
  "L*.mlp.gate": recompute
adapter: lora
lora_r: 8
lora_alpha: 16
lora_target_modules: [q_proj, v_proj]
""")
    put("yaml_config", "tiers", """memory_budget: 20GiB
host_memory_budget: 32GiB
disk_memory_budget: 100GB
activation_offloading: disk
offload_dir: /tmp/x
layer_offloading: true
gradient_checkpointing: {every: 2}
weight_decay: 0.1
adam_epsilon: 1e-8
max_grad_norm: 1.0
warmup_steps: 10
loss_chunk_tokens: 256
seed: 7
""")
    put("yaml_config", "bad_key", "[a, b]: 1\n")

    # tokenizer: byte 0 picks the mode (0-2 text for llama3/llama2/mistral, 3 a tokenizer.json,
    # 4 text for qwen25 and the normalizers).
    tok_dir = os.path.join(os.path.dirname(ROOT), "..", "tokenizer")
    sample = "Hello <|eot_id|> w\u00f6rld \u4e2d\u6587 1234567 \U0001f468\u200d\U0001f469 \r\n\t  <s> it'S"
    for mode in range(3):
        put("tokenizer", f"text{mode}", bytes([mode]) + sample.encode())
    put("tokenizer", "text_long", b"\0" + ("The quick brown fox; " * 300 + " " * 5000 + "9" * 5000).encode())
    put("tokenizer", "text_spm_long", b"\1" + ("x" * 8000 + "ab" * 4000).encode())
    put("tokenizer", "text_nfc", b"\4" + ("Cafe\u0301 \u1112\u1161\u11ab\uac00\u11a8 \ufb01 \u2460 \uff21 a\u0301\u0323 "
                                          "\u1e9b\u0323 \u0958 \u212b \u0344 \uff8a\uff9f <|im_end|> " * 20).encode())
    for name in ("llama3", "llama2", "mistral", "qwen25"):
        with open(os.path.join(tok_dir, name, "tokenizer.json"), "rb") as f:
            put("tokenizer", f"json_{name}", b"\3" + f.read())
    put("tokenizer", "json_truncated", b"\3" + b'{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"')
    put("tokenizer", "json_wordpiece", b"\3" + json.dumps({"model": {"type": "WordPiece", "vocab": {}}}).encode())
    put("tokenizer", "json_tiny", b"\3" + json.dumps({
        "added_tokens": [{"id": 3, "content": "<s>", "special": True, "lstrip": True, "rstrip": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "unk_token": "u", "fuse_unk": True, "byte_fallback": True,
                  "vocab": {"a": 0, "b": 1, "ab": 2, "u": 4, "<0x41>": 5}, "merges": ["a b"]}}).encode())
    put("yaml_config", "plan_many", "plan:\n" + "".join('  "L%d.attn.q": keep\n' % i for i in range(5000)))

    # Deep nesting (issue 33): 100k levels overflowed the stack of every recursive reader. Each reader
    # refuses past its depth limit (kMaxJsonDepth, yaml-cpp's 2000) before building anything.
    deep_array = "[" * DEEP + "]" * DEEP
    deep_object = '{"a":' * DEEP + "1" + "}" * DEEP
    deep_cfg = dict(llama32)
    deep_cfg["passthrough"] = "@DEEP@"
    put("hf_config", "deep_passthrough", json.dumps(deep_cfg).replace('"@DEEP@"', deep_array))
    put("hf_config", "deep_object", deep_object)
    put("safetensors", "deep_header", safetensors([], header_override='{"__metadata__": %s}' % deep_array))
    put("checkpoint_index", "deep_index",
        ('{"weight_map": {"a": "s1.safetensors"}, "metadata": %s}' % deep_object).encode() + b"\0" + shard)
    put("checkpoint_index", "escaping_shard",
        json.dumps({"weight_map": {"a": "../../outside/stolen.safetensors"}}).encode() + b"\0" + shard)
    put("checkpoint_index", "nul_shard", json.dumps({"weight_map": {"a": "s1.safetensors\0x"}}).encode() + b"\0" + shard)
    put("tokenizer", "json_deep", b"\3" + deep_array.encode())
    put("tokenizer", "json_deep_normalizer", b"\3" + ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, '
                                                       '"normalizer": %s}' % deep_object).encode())
    put("tokenizer", "json_empty_vocab", b"\3" + b'{"model": {"type": "BPE", "vocab": {}, "merges": []}}')
    # 7: a tokenizer_config.json beside the committed llama3 tokenizer.json.
    put("tokenizer", "config_llama3", b"\7" + json.dumps({"bos_token": "<|begin_of_text|>",
                                                           "eos_token": {"content": "<|eot_id|>"},
                                                           "add_bos_token": True}).encode())
    put("tokenizer", "config_deep_eos", b"\7" + ('{"eos_token": %s}' % deep_array).encode())
    put("yaml_config", "deep_flow", "plan: " + "[" * DEEP + "]" * DEEP + "\n")
    put("yaml_config", "deep_block", "datasets:\n" + "- " * DEEP + "x\n")
    put("yaml_config", "duplicate_nested", "plan:\n  L*.mlp.act: keep\n  L*.mlp.act: host\n")
    put("yaml_config", "yaml11_bools", "output_dir: yes\ntrain_on_inputs: on\nsample_packing: No\n")

    # datasets: byte 0 picks the reader (0 completion, 1 alpaca, 2 chat JSON lines, 3 a .txt completion,
    # 4 the token cache of a small dataset), tokenised with the committed llama3 tokenizer.
    put("datasets", "completion", b"\0" + b'{"text": "Hello world"}\n\n{"text": "second"}\n')
    put("datasets", "alpaca", b"\1" + json.dumps({"instruction": "Add", "input": "1 2", "output": "3"}).encode() + b"\n")
    put("datasets", "chat", b"\2" + json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                             {"role": "assistant", "content": "hello"}]}).encode())
    put("datasets", "text", b"\3" + ("Some plain text. " * 50).encode())
    put("datasets", "empty_examples", b"\0" + b'{"text": ""}\n' * 3)
    put("datasets", "deep_line", b"\0" + ('{"text": "x", "extra": %s}' % deep_array).encode() + b"\n")
    put("datasets", "cache", b"\4" + CACHE_MAGIC + struct.pack("<QI", 1, 2) + struct.pack("<2i", 1, 2) + b"\1\1")
    put("datasets", "cache_negative", b"\4" + CACHE_MAGIC + struct.pack("<QI", 1, 2) + struct.pack("<2i", -5, 2) + b"\1\1")

    # chat_template: real templates (tests/chat_templates/templates/), the one-construct snippets, and hostile ones:
    # deep nesting, huge loops, recursion through macros, giant repetition and ranges, integer overflow.
    tdir = os.path.join(os.path.dirname(ROOT), "..", "chat_templates")
    for name in sorted(os.listdir(os.path.join(tdir, "templates"))):
        with open(os.path.join(tdir, "templates", name), "rb") as f:
            put("chat_template", "real_" + name.replace(".jinja", ""), f.read())
    with open(os.path.join(tdir, "snippets.json")) as f:
        snippets = json.load(f)["cases"]
    for k, case in enumerate(snippets[::4]):
        put("chat_template", "snippet_%03d" % k, case["template"])
    put("chat_template", "deep_parens", "{{ " + "(" * DEEP + "1" + ")" * DEEP + " }}")
    put("chat_template", "deep_blocks", "{% if true %}" * 1000 + "x" + "{% endif %}" * 1000)
    put("chat_template", "deep_fors", "{% for a in [1] %}" * 99 + "x" + "{% endfor %}" * 99)
    put("chat_template", "long_chain", "{{ 1" + " + 1" * 20000 + " }}")
    put("chat_template", "loop_1e12", "{% for i in range(10**12) %}x{% endfor %}")
    put("chat_template", "loops_nested", "{% for i in range(100000) %}{% for j in range(100000) %}"
        "{% endfor %}{% endfor %}")
    put("chat_template", "string_1e12", "{{ 'a' * 10**12 }}")
    put("chat_template", "string_doubling", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}")
    put("chat_template", "list_growth", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
        "{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | length }}")
    put("chat_template", "repeat_big_items", "{% set s = 'x' * 1000000 %}{{ ([s] * 1000000) | length }}")
    put("chat_template", "macro_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
    put("chat_template", "macro_fanout", "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}"
        "{% endif %}{% endmacro %}{{ f(0) }}")
    put("chat_template", "power_overflow", "{{ 2 ** 10**18 }}{{ 9223372036854775807 + 1 }}")
    put("chat_template", "int_min_div", "{{ (-9223372036854775807 - 1) // -1 }}{{ (-9223372036854775807 - 1) % -1 }}")
    put("chat_template", "join_big_sep", "{{ range(100000) | join('y' * 10000000) }}")
    put("chat_template", "replace_blowup", "{{ ('a' * 1000000).replace('a', 'b' * 1000000) }}")
    put("chat_template", "indent_huge", "{{ 'a\\nb' | indent(10**12) }}")
    put("chat_template", "tojson_indent", "{{ [[[[1]]]] | tojson(indent=10**9) }}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
