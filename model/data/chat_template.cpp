#include "model/data/chat_template.h"

#include <fmt/format.h>

namespace strata {

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return fmt::format(
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\n{}\n\n### Response:\n",
        instruction);
  return fmt::format(
      "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
      "response that appropriately completes the request.\n\n### Instruction:\n{}\n\n### Input:\n{}\n\n### "
      "Response:\n",
      instruction, input);
}

ChatTemplate chat_template_for(const text::Tokenizer& tok) {
  return tok.token_to_id("<|start_header_id|>") && tok.token_to_id("<|end_header_id|>") && tok.token_to_id("<|eot_id|>")
             ? ChatTemplate::llama3
             : ChatTemplate::simple;
}

const char* chat_template_name(ChatTemplate t) {
  return t == ChatTemplate::llama3 ? "llama3" : "simple";
}

namespace {

// Jinja's trim: whitespace off both ends.
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

}  // namespace

std::vector<Segment> render_chat(const std::vector<ChatMessage>& messages, ChatTemplate t) {
  std::vector<Segment> out;
  auto add = [&](std::string text, bool trained) {
    if (text.empty()) return;
    if (!out.empty() && out.back().trained == trained)
      out.back().text += text;
    else
      out.push_back({std::move(text), trained});
  };
  for (const ChatMessage& m : messages) {
    const bool trained = m.role == "assistant";
    if (t == ChatTemplate::llama3) {
      add(fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", m.role), false);
      add(trim(m.content) + "<|eot_id|>", trained);  // as the checkpoint's template: content | trim
    } else {
      add(fmt::format("<|{}|>\n", m.role), false);
      add(m.content + "\n", trained);
    }
  }
  return out;
}

std::string chat_jinja(ChatTemplate t, bool bos, bool eos, const std::string& eos_token) {
  std::string s = bos ? "{{- bos_token }}" : "";
  s += "{%- for message in messages %}";
  if (t == ChatTemplate::llama3) {
    s += "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
         "'<|eot_id|>' }}";
    eos = eos && eos_token != "<|eot_id|>";  // the last turn already ends in it: the EOS is not repeated
  } else {
    s += "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}";
  }
  s += "{%- endfor %}{%- if add_generation_prompt %}";
  s += t == ChatTemplate::llama3 ? "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
                                 : "{{- '<|assistant|>\\n' }}";
  s += eos ? "{%- else %}{{- eos_token }}{%- endif %}" : "{%- endif %}";
  return s;
}

}  // namespace strata
