#!/usr/bin/env python3
"""Renders every template in templates/ over varied conversations with transformers' own
chat-template renderer (its compiled jinja2 environment) and writes expected.json: per case the
context the template sees, the rendered text and the byte spans of {% generation %} blocks, or
the error it raises. tests/cpu/jinja_test.cpp renders the same contexts and compares byte for byte.

    pip install transformers jinja2 && python3 tests/chat_templates/make_expected.py
"""
import copy
import datetime as _datetime
import json
import os

import transformers.utils.chat_template_utils as _ctu
from transformers.utils.chat_template_utils import (
    _alias_reasoning_fields,
    _normalize_chat_messages,
    render_jinja_template,
)

HERE = os.path.dirname(os.path.abspath(__file__))

# strftime_now formats this time, not the clock's, so the expected texts do not change with the day they are made
# (tests/cpu/jinja_test.cpp renders with the same time: kNow there).
NOW = _datetime.datetime(2026, 11, 28, 12, 0, 0)


class _FixedDatetime(_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


_ctu.datetime = _FixedDatetime

SPECIAL = {  # the special tokens each family's tokenizer passes to its template
    "llama": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "qwen": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "phi": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "other": {"bos_token": "<s>", "eos_token": "</s>"},
}


def family(name):
    for f in ("llama", "mistral", "gemma", "qwen", "phi"):
        if name.startswith(f):
            return f
    return "other"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    }
]

CONVERSATIONS = {
    "single": [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi there. How can I help?"},
    ],
    "system_multi": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6"},
    ],
    "prompt_only": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "whitespace_unicode": [
        {"role": "user", "content": "  Leading and trailing spaces  \n\n"},
        {"role": "assistant", "content": "\n\tTabs,\u00a0nbsp, caf\u00e9, \u4f60\u597d, \U0001f600 emoji, line\u2028sep \n"},
        {"role": "user", "content": "quotes ' and \" and \\ backslash {{ not a tag }} {% nor this %}"},
        {"role": "assistant", "content": "ok"},
    ],
    "tools": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call12345",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21.5}"},
        {"role": "assistant", "content": "It is 21.5\u00b0C in Paris."},
    ],
    "thinking": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "Yes, 7 is prime.", "reasoning_content": "7 has no divisors but 1 and 7."},
        {"role": "user", "content": "And 9?"},
        {"role": "assistant", "content": "<think>\n9 = 3 * 3.\n</think>\n\nNo, 9 is not prime."},
    ],
    "tool_calls_multi": [
        {"role": "user", "content": "Weather in Paris and Rome, in °F?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "callparis", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"f\"}"}},
                {"id": "callrome1", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Rome", "unit": "f", "days": [1, 2.5]}}},
            ],
        },
        {"role": "tool", "tool_call_id": "callparis", "content": "70"},
        {"role": "tool", "tool_call_id": "callrome1", "content": "{\"temp\": 75, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "Paris 70°F, Rome 75°F."},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Answer in parts."}]},
    ],
}

EXTRA = {  # per template, extra template kwargs tried besides the plain ones
    "qwen3": [{"enable_thinking": False}],
}


def byte_spans(text, spans):
    return [[len(text[:b].encode()), len(text[:e].encode())] for b, e in spans]


def render(source, messages, tools, add_generation_prompt, kwargs):
    rendered, indices = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=source,
        return_assistant_tokens_mask=True,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return rendered[0], indices[0]


def main():
    cases = []
    tdir = os.path.join(HERE, "templates")
    for fname in sorted(os.listdir(tdir)):
        if not fname.endswith(".jinja"):
            continue
        name = fname[: -len(".jinja")]
        source = open(os.path.join(tdir, fname), encoding="utf-8").read()
        for conv_name, conv in CONVERSATIONS.items():
            for agp in (False, True):
                for extra in [{}] + EXTRA.get(name, []):
                    tools = TOOLS if conv_name.startswith("tool") else None
                    kwargs = dict(SPECIAL[family(name)], **extra)
                    # The context exactly as the template sees it (apply_chat_template's normalisation).
                    messages = _alias_reasoning_fields(_normalize_chat_messages(copy.deepcopy(conv)))
                    context = dict(messages=messages, tools=tools, documents=None, add_generation_prompt=agp, **kwargs)
                    case = {"template": fname, "conversation": conv_name, "context": context}
                    try:
                        text, spans = render(source, copy.deepcopy(messages), tools, agp, kwargs)
                        case["text"] = text
                        case["generation"] = byte_spans(text, spans)
                    except Exception as e:  # the template raises: the C++ side must raise the same message
                        case["error"] = str(e)
                        case["error_type"] = type(e).__name__
                    cases.append(case)
    out = os.path.join(HERE, "expected.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ok = sum("text" in c for c in cases)
    print(f"{out}: {len(cases)} cases, {ok} rendered, {len(cases) - ok} raise")


if __name__ == "__main__":
    main()
