// `type: chat_template` datasets (axolotl's keys): each row's conversation is rendered with the
// checkpoint's own chat template (text/jinja.h), tokenised as one text as apply_chat_template
// does, and the tokens of the trained roles' turns are found by character offsets.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja.h"
#include "text/tokenizer.h"

namespace strata {

// The dataset keys of a chat_template dataset (docs/USER_GUIDE.md, "Chat datasets").
struct ChatTemplateOptions {
  std::string chat_template = "tokenizer_default";  // tokenizer_default, a built-in name, or a .jinja file
  std::string field_messages = "messages";
  std::string role_key = "role";        // message_property_mappings.role
  std::string content_key = "content";  // message_property_mappings.content
  // roles: the template's role and the dataset's names for it (e.g. user: [human], assistant: [gpt]);
  // empty: human is user and gpt is assistant (axolotl's default).
  std::vector<std::pair<std::string, std::vector<std::string>>> roles;
  std::vector<std::string> roles_to_train = {"assistant"};
  std::string train_on_eos = "turn";  // turn (each trained turn's end), all, last or none
  bool operator==(const ChatTemplateOptions&) const = default;
};

// The built-in template names for `chat_template:`.
std::vector<std::string> builtin_chat_templates();

// The template and the values apply_chat_template passes beside the messages (bos_token,
// eos_token, ... from tokenizer_config.json).
struct ChatFormat {
  text::jinja::Template tmpl;
  std::string source;  // the template's text (part of the dataset cache's key; saved with the model)
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// The checkpoint's template (DIR/chat_template.jinja, else tokenizer_config.json's chat_template,
// as transformers reads them), a built-in, or a .jinja file. ConfigError naming the file and key
// when there is none or it does not parse.
ChatFormat load_chat_format(const ChatTemplateOptions& o, const std::string& tokenizer_dir);

// One rendered conversation: its text, the byte spans trained, and its tokens.
struct ChatExample {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained_spans;  // bytes of `text`
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;  // per id: 1 where it overlaps a trained span
};

// Renders and tokenises one row (a JSON object). FormatError "FILE: line N: ..." for a row the
// options cannot read, or a trained message whose content the template does not render verbatim
// (a template with {% generation %} blocks marks its spans itself).
ChatExample tokenize_chat_row(const nlohmann::ordered_json& row, const ChatTemplateOptions& o, const ChatFormat& f,
                              const text::Tokenizer& tok, const std::string& file, long line);

// strata-train --preview-data N: the first n rows of `contents` rendered, the trained text marked
// [[like this]], with token counts.
void preview_chat_rows(std::FILE* out, const std::string& contents, const ChatTemplateOptions& o, const ChatFormat& f,
                       const text::Tokenizer& tok, const std::string& file, int n);

}  // namespace strata
