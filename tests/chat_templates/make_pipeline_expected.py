#!/usr/bin/env python3
"""Expected ids and trained masks of `type: chat_template` datasets, from Hugging Face:
apply_chat_template(tokenize=True, return_dict=True, return_assistant_tokens_mask=True) over a
Qwen3-style, a Mistral-style and a Llama-3-style tiny checkpoint (a test tokenizer of
tests/tokenizer/ with the template in its tokenizer_config.json). The ids are HF's; the mask is
HF's assistant_masks where the template has {% generation %} blocks, else each trained message's
content span in the rendered text (found in order, stripped where the template trims it) plus the
end-of-turn token after it, on HF's token offsets. Writes pipeline_expected.json, read by
tests/cpu/chat_dataset_test.cpp.

    pip install transformers tokenizers jinja2 && python3 tests/chat_templates/make_pipeline_expected.py
"""
import json
import os
import shutil
import tempfile

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = os.path.join(HERE, "..", "tokenizer")
END_OF_TURN = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "</s>", "<|endoftext|>"]

ROWS = [
    {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the colour of the sky?"},
        {"role": "assistant", "content": "The sky is blue."},
        {"role": "user", "content": "  And grass? \n"},
        {"role": "assistant", "content": "Green, mostly.  "},
    ]},
    {"messages": [
        {"role": "user", "content": "Caf\u00e9 \u4f60\u597d \U0001f600?"},
        {"role": "assistant", "content": "Oui: caf\u00e9. New York"},
    ]},
]
SHAREGPT_ROWS = [  # the same conversations in ShareGPT's keys (from/value, human/gpt)
    {"conversations": [{"from": {"user": "human", "assistant": "gpt"}.get(m["role"], m["role"]), "value": m["content"]}
                       for m in r["messages"]]}
    for r in ROWS
]
THINKING_ROWS = [
    {"messages": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\n7 has no divisors.\n</think>\n\nYes."},
        {"role": "user", "content": "And 9?"},
        {"role": "assistant", "content": "No: 9 = 3 * 3.", "reasoning_content": "3 divides 9."},
    ]},
]

SETUPS = [
    {"name": "qwen3", "tokenizer": "qwen25", "template": "qwen3.jinja", "rows": ROWS, "options": {}},
    {"name": "qwen3_thinking", "tokenizer": "qwen25", "template": "qwen3_generation.jinja",
     "rows": ROWS + THINKING_ROWS, "options": {}},
    {"name": "qwen3_sharegpt", "tokenizer": "qwen25", "template": "qwen3.jinja", "rows": SHAREGPT_ROWS,
     "options": {"field_messages": "conversations", "role_key": "from", "content_key": "value",
                 "roles": {"user": ["human"], "assistant": ["gpt"]}}},
    {"name": "qwen25_sharegpt_default_roles", "tokenizer": "qwen25", "template": "qwen_25.jinja",
     "rows": SHAREGPT_ROWS, "options": {"field_messages": "conversations", "role_key": "from", "content_key": "value",
                                        "train_on_eos": "last"}},
    {"name": "mistral", "tokenizer": "mistral", "template": "mistral_v3_tekken.jinja", "rows": ROWS,
     "options": {}},
    {"name": "llama3", "tokenizer": "llama3", "template": "llama3_generation.jinja", "rows": ROWS,
     "options": {}},
    {"name": "llama3_eos_none", "tokenizer": "llama3", "template": "llama3_1_tools.jinja", "rows": ROWS,
     "options": {"train_on_eos": "none"}},
]


def checkpoint(setup, d):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, setup["tokenizer"], f), os.path.join(d, f))
    cfg_path = os.path.join(d, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = open(os.path.join(HERE, "templates", setup["template"]), encoding="utf-8").read()
    json.dump(cfg, open(cfg_path, "w"), indent=2)


def rule_mask(tok, text, offsets, ids, messages, opts):
    train_roles = opts.get("roles_to_train", ["assistant"])
    spans, cursor = [], 0
    for m in messages:
        c = m.get("content")
        if not isinstance(c, str):
            continue
        found, at = c, text.find(c, cursor)
        if at < 0:
            found = c.strip()
            at = text.find(found, cursor)
        if at < 0:
            assert m["role"] not in train_roles, (c, text)
            continue
        cursor = at + len(found)
        if m["role"] in train_roles:
            spans.append((at, at + len(found)))
    mask = [0] * len(ids)
    for k, (b, e) in enumerate(offsets):
        if e > b and any(e > sb and b < se for sb, se in spans):
            mask[k] = 1
    eot = {tok.convert_tokens_to_ids(t) for t in END_OF_TURN if t in tok.get_vocab()} | {tok.eos_token_id}
    ends = []
    for sb, se in spans:
        j = 0
        while j < len(ids) and offsets[j][0] < se:
            j += 1
        while j < len(ids) and ids[j] not in eot and text[offsets[j][0]:offsets[j][1]].strip(" \n\t") == "":
            j += 1
        if j < len(ids) and ids[j] in eot:
            ends.append(j)
    mode = opts.get("train_on_eos", "turn")
    if mode == "turn":
        for j in ends:
            mask[j] = 1
    elif mode == "last" and ends:
        mask[ends[-1]] = 1
    elif mode == "all":
        for k, i in enumerate(ids):
            if i in eot:
                mask[k] = 1
    return mask


def messages_of(row, opts):
    field = opts.get("field_messages", "messages")
    rk, ck = opts.get("role_key", "role"), opts.get("content_key", "content")
    out = []
    for m in row[field]:
        role = m[rk]
        if not opts.get("roles"):  # axolotl's default names
            role = {"human": "user", "gpt": "assistant"}.get(role, role)
        for to, names in opts.get("roles", {}).items():
            if role in names:
                role = to
        mm = {k: v for k, v in m.items() if k not in (rk, ck)}
        mm["role"], mm["content"] = role, m[ck]
        out.append(mm)
    return out


def main():
    out = []
    for setup in SETUPS:
        with tempfile.TemporaryDirectory() as d:
            checkpoint(setup, d)
            tok = AutoTokenizer.from_pretrained(d)
            generation = "generation" in open(os.path.join(HERE, "templates", setup["template"])).read().replace(
                "add_generation_prompt", "")
            expected = []
            for row in setup["rows"]:
                messages = messages_of(row, setup["options"])
                text = tok.apply_chat_template(messages, tokenize=False)
                enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=generation)
                ids = list(enc["input_ids"])
                assert ids == tok(text, add_special_tokens=False)["input_ids"]
                offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
                if generation:
                    mask = list(enc["assistant_masks"])
                else:
                    mask = rule_mask(tok, text, offsets, ids, messages, setup["options"])
                expected.append({"text": text, "ids": ids, "trained": mask})
        out.append(dict(setup, expected=expected))
    path = os.path.join(HERE, "pipeline_expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(path, sum(len(s["expected"]) for s in out), "rows")


if __name__ == "__main__":
    main()
