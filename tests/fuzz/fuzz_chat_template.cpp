// libFuzzer target: the chat-template (Jinja) interpreter (text/jinja.h). The input is a template; it is parsed and
// rendered against a fixed conversation (messages with a system prompt, tool calls and a tool result, tools,
// bos/eos tokens, add_generation_prompt) and a few values of every type. A template that parses must render or fail
// with a strata::Error: any other exception, a crash, a sanitizer report, a timeout (a hang) or running out of
// memory is a finding. Whatever renders must respect the interpreter's output limit, and the byte spans of
// {% generation %} blocks must lie inside the text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/error.h"
#include "text/jinja.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json* c = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? caf\u00e9 \u4f60\u597d"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4", "name": "add"},
      {"role": "assistant", "content": "4."}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>",
    "s": " Hi, there ", "i": 3, "j": -2, "f": 0.5, "t": true, "n": null,
    "l": [1, "a", null, [2]], "d": {"k": "v", "n": 1, "l": [1, 2]}
  })"));
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = strata::text::jinja::Template::parse(source, "fuzz.jinja");
    const strata::text::jinja::Rendered r = t.render(context());
    if (r.text.size() > strata::text::jinja::kMaxRenderedBytes) {
      std::fprintf(stderr, "chat template: rendered %zu bytes, over the limit\n", r.text.size());
      std::abort();
    }
    for (auto [b, e] : r.generation)
      if (b > e || e > r.text.size()) {
        std::fprintf(stderr, "chat template: a generation span [%zu, %zu) outside the text\n", b, e);
        std::abort();
      }
  } catch (const strata::Error&) {
  }
  return 0;
}
