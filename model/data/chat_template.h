// How a dataset row becomes text: the prompt/response segments of the `completion`, `alpaca` and
// `chat` formats (docs/USER_GUIDE.md, "Datasets"). Rendering is pure text; model/data/datasets.h
// tokenises the segments and masks the prompt ones.
#pragma once
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace strata {

// Bumped whenever a template's text changes: it is part of the dataset cache's key.
inline constexpr int kTemplateVersion = 2;

// A run of text, trained (its tokens count in the loss with train_on_inputs: false) or not.
struct Segment {
  std::string text;
  bool trained = false;
};

// Alpaca's prompt (the Stanford Alpaca template) up to and including "### Response:\n".
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// Which chat template a tokenizer gets: Llama 3's where it has <|start_header_id|>,
// <|end_header_id|> and <|eot_id|>, else the simple one.
enum class ChatTemplate { llama3, simple };
ChatTemplate chat_template_for(const text::Tokenizer& tok);
const char* chat_template_name(ChatTemplate t);

// The messages as segments (adjacent ones of the same kind merged):
//   llama3: "<|start_header_id|>ROLE<|end_header_id|>\n\n" (prompt) + "CONTENT<|eot_id|>"
//           (trained for assistant turns, prompt otherwise), CONTENT trimmed as Llama 3's
//           template trims it;
//   simple: "<|ROLE|>\n" (prompt) + "CONTENT\n" (trained for assistant turns).
// BOS and the final EOS are added by the caller (as ids).
std::vector<Segment> render_chat(const std::vector<ChatMessage>& messages, ChatTemplate t);

// The same format as a Jinja chat template (saved with the model: apply_chat_template then renders what the
// model was trained on): `bos` writes bos_token first (the tokenizer's template adds one), `eos` eos_token
// last (not after Llama 3's <|eot_id|> when that is the EOS); add_generation_prompt opens an assistant turn.
std::string chat_jinja(ChatTemplate t, bool bos, bool eos, const std::string& eos_token);

}  // namespace strata
