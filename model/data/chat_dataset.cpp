#include "model/data/chat_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "engine/error.h"
#include "io/regular_file.h"

namespace strata {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// axolotl's chatml and llama3 templates.
const char* kChatml =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in "
    "messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% "
    "if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
const char* kLlama3 =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set "
    "loop_messages = messages %}{% for message in loop_messages %}{% if message['content'] is string %}{% set "
    "message_text = message['content'] | trim %}{% else %}{% set message_text = message['content'] | "
    "selectattr('text', 'defined') | map(attribute='text') | join('') | trim %}{% endif %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message_text + '<|eot_id|>' %}{% if "
    "loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// The tokens that close a turn, where the tokenizer has them.
const char* kEndOfTurn[] = {"<|im_end|>",    "<|eot_id|>", "<|eom_id|>",   "<|end|>",
                            "<end_of_turn>", "</s>",       "<|endoftext|>"};

std::string read_file(const std::string& path, const char* what) {
  return io::read_regular_file(path, what, 1 << 26);
}

// A token of tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::string token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

[[noreturn]] void row_fail(const std::string& file, long line, const std::string& field, const std::string& why) {
  throw FormatError(fmt::format("{}: line {}: field '{}' {}", file, line, field, why), file,
                    fmt::format("line {}: {}", line, field));
}

}  // namespace

std::vector<std::string> builtin_chat_templates() {
  return {"chatml", "llama3"};
}

ChatFormat load_chat_format(const ChatTemplateOptions& o, const std::string& tokenizer_dir) {
  ChatFormat f;
  const std::string config_path = tokenizer_dir + "/tokenizer_config.json";
  ojson config = ojson::object();
  std::error_code ec;
  if (fs::is_regular_file(config_path, ec)) {
    try {
      config = ojson::parse(read_file(config_path, "the tokenizer config"));
    } catch (const ojson::exception& e) {
      throw FormatError(fmt::format("{}: not valid JSON: {}", config_path, e.what()), config_path, "");
    }
  }
  // apply_chat_template passes the special tokens it has (special_tokens_map) to the template.
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (config.contains(k)) {
      std::string t = token_text(config[k]);
      if (!t.empty()) f.special_tokens[k] = t;
    }
  std::string name;
  if (o.chat_template == "tokenizer_default") {
    const std::string jinja_path = tokenizer_dir + "/chat_template.jinja";
    if (fs::is_regular_file(jinja_path, ec)) {
      f.source = read_file(jinja_path, "the chat template");
      name = jinja_path;
    } else if (config.contains("chat_template")) {
      const ojson& ct = config["chat_template"];
      if (ct.is_string()) {
        f.source = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{name, template}]: the one named "default"
        for (const auto& e : ct)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template"))
            f.source = e["template"].get<std::string>();
      }
      name = config_path;
    }
    if (f.source.empty())
      throw ConfigError(
          fmt::format("{}: the tokenizer has no chat_template (and there is no chat_template.jinja beside "
                      "it): set the dataset's chat_template to a built-in ({}) or a .jinja file",
                      config_path, fmt::join(builtin_chat_templates(), ", ")),
          config_path, "chat_template");
  } else if (o.chat_template == "chatml" || o.chat_template == "llama3") {
    f.source = o.chat_template == "chatml" ? kChatml : kLlama3;
    name = "built-in " + o.chat_template;
  } else if (fs::path(o.chat_template).extension() == ".jinja") {
    f.source = read_file(o.chat_template, "the chat template");
    name = o.chat_template;
  } else {
    throw ConfigError(fmt::format("chat_template '{}' is neither tokenizer_default, a built-in ({}) nor a .jinja file",
                                  o.chat_template, fmt::join(builtin_chat_templates(), ", ")),
                      "", "chat_template");
  }
  f.tmpl = text::jinja::Template::parse(f.source, name);
  return f;
}

ChatExample tokenize_chat_row(const ojson& row, const ChatTemplateOptions& o, const ChatFormat& f,
                              const text::Tokenizer& tok, const std::string& file, long line) {
  const std::string& fm = o.field_messages;
  if (!row.contains(fm) || !row[fm].is_array() || row[fm].empty())
    row_fail(file, line, fm, "must be a non-empty list of messages");
  // The messages as apply_chat_template hands them over: roles mapped, None-valued keys dropped,
  // reasoning under reasoning_content and thinking.
  ojson messages = ojson::array();
  std::vector<bool> train_message;
  for (size_t i = 0; i < row[fm].size(); ++i) {
    const ojson& m = row[fm][i];
    const std::string at = fmt::format("{}[{}]", fm, i);
    if (!m.is_object()) row_fail(file, line, at, "must be an object");
    if (!m.contains(o.role_key) || !m[o.role_key].is_string())
      row_fail(file, line, at + "." + o.role_key, "must be a string");
    std::string role = m[o.role_key].get<std::string>();
    if (o.roles.empty()) {  // axolotl's default names: ShareGPT's human and gpt
      if (role == "human") role = "user";
      if (role == "gpt") role = "assistant";
    }
    for (const auto& [to, from] : o.roles)
      if (std::find(from.begin(), from.end(), role) != from.end()) role = to;
    ojson out = ojson::object();  // the row's key order (a template may print the message)
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.value().is_null()) continue;
      if (it.key() == o.role_key)
        out["role"] = role;
      else if (it.key() == o.content_key)
        out["content"] = it.value();
      else if (it.key() != "role" && it.key() != "content")
        out[it.key()] = it.value();
    }
    for (const char* k : {"reasoning_content", "thinking", "reasoning"})
      if (out.contains(k)) {
        ojson r = out[k];
        ojson aliased = ojson::object();
        aliased["thinking"] = r;
        for (auto it = out.begin(); it != out.end(); ++it) aliased[it.key()] = it.value();
        aliased["reasoning_content"] = r;
        out = std::move(aliased);
        break;
      }
    train_message.push_back(std::find(o.roles_to_train.begin(), o.roles_to_train.end(), role) !=
                            o.roles_to_train.end());
    messages.push_back(std::move(out));
  }
  ojson ctx = ojson::object();
  ctx["messages"] = messages;
  ctx["tools"] = row.contains("tools") ? row["tools"] : ojson(nullptr);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = false;
  for (auto it = f.special_tokens.begin(); it != f.special_tokens.end(); ++it) ctx[it.key()] = it.value();
  text::jinja::Rendered r;
  try {
    r = f.tmpl.render(ctx);
  } catch (const ConfigError& e) {
    throw FormatError(fmt::format("{}: line {}: {}", file, line, e.what()), file, fmt::format("line {}", line));
  }
  ChatExample ex;
  ex.text = std::move(r.text);
  // HF's apply_chat_template tokenises with add_special_tokens=False: the template wrote BOS itself.
  text::Encoding enc = tok.encode_with_offsets(ex.text, false);
  ex.ids = std::move(enc.ids);
  ex.trained.assign(ex.ids.size(), 0);
  std::vector<bool> eot(ex.ids.size(), false);
  for (const char* t : kEndOfTurn)
    if (auto id = tok.token_to_id(t))
      for (size_t k = 0; k < ex.ids.size(); ++k) eot[k] = eot[k] || ex.ids[k] == *id;
  if (tok.eos_id() >= 0)
    for (size_t k = 0; k < ex.ids.size(); ++k) eot[k] = eot[k] || ex.ids[k] == tok.eos_id();
  if (f.tmpl.has_generation()) {
    ex.trained_spans = r.generation;
  } else {
    // Each trained message's content, found in order in the text (as the template writes it: Python's
    // strip() where it trims), then its end-of-turn token where one follows.
    size_t cursor = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      const ojson& m = messages[i];
      if (!m.contains("content") || !m["content"].is_string()) {
        if (train_message[i] && m.contains("content"))
          row_fail(file, line, fmt::format("{}[{}].{}", fm, i, o.content_key),
                   "is not a string: its trained span needs a template with {% generation %} blocks");
        continue;
      }
      const std::string content = m["content"].get<std::string>();
      size_t at = ex.text.find(content, cursor);
      std::string found = content;
      if (at == std::string::npos) {
        found = text::jinja::Template::parse("{{ c | trim }}", "trim").render({{"c", content}}).text;
        at = ex.text.find(found, cursor);
      }
      if (at == std::string::npos) {
        if (!train_message[i]) continue;
        row_fail(file, line, fmt::format("{}[{}].{}", fm, i, o.content_key),
                 fmt::format("is not in the text {} renders: this template changes it; use one with {{% generation %}} "
                             "blocks",
                             f.tmpl.name()));
      }
      cursor = at + found.size();
      if (train_message[i]) ex.trained_spans.emplace_back(at, at + found.size());
    }
  }
  // Mark every token overlapping a span (apply_chat_template's return_assistant_tokens_mask rule).
  for (size_t k = 0, s = 0; k < ex.ids.size(); ++k) {
    const auto [b, e] = enc.offsets[k];
    while (s < ex.trained_spans.size() && b >= ex.trained_spans[s].second) ++s;
    if (s < ex.trained_spans.size() && e > ex.trained_spans[s].first && e > b) ex.trained[k] = 1;
  }
  if (f.tmpl.has_generation()) return ex;  // the template's blocks say which end-of-turn tokens train
  // train_on_eos: the end-of-turn token after each trained turn (whitespace between allowed), the
  // last one's, every one in the text, or none.
  std::vector<size_t> turn_ends;
  for (const auto& [sb, se] : ex.trained_spans) {
    size_t j = 0;
    while (j < ex.ids.size() && enc.offsets[j].first < se) ++j;
    while (j < ex.ids.size() && !eot[j] &&
           ex.text.find_first_not_of(" \n\t", enc.offsets[j].first) >= enc.offsets[j].second)
      ++j;
    if (j < ex.ids.size() && eot[j]) turn_ends.push_back(j);
  }
  if (o.train_on_eos == "turn")
    for (size_t j : turn_ends) ex.trained[j] = 1;
  if (o.train_on_eos == "last" && !turn_ends.empty()) ex.trained[turn_ends.back()] = 1;
  if (o.train_on_eos == "all")
    for (size_t k = 0; k < ex.ids.size(); ++k)
      if (eot[k]) ex.trained[k] = 1;
  return ex;
}

void preview_chat_rows(std::FILE* out, const std::string& contents, const ChatTemplateOptions& o, const ChatFormat& f,
                       const text::Tokenizer& tok, const std::string& file, int n) {
  long line_no = 0;
  int shown = 0;
  for (size_t pos = 0; pos < contents.size() && shown < n;) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    const std::string_view line(contents.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ojson row;
    try {
      row = ojson::parse(line);
    } catch (const ojson::exception& e) {
      throw FormatError(fmt::format("{}: line {}: not valid JSON: {}", file, line_no, e.what()), file,
                        fmt::format("line {}", line_no));
    }
    const ChatExample ex = tokenize_chat_row(row, o, f, tok, file, line_no);
    // The trained text, token by token, between [[ and ]].
    std::string shown_text;
    text::Encoding enc = tok.encode_with_offsets(ex.text, false);
    bool in = false;
    size_t at = 0;
    long trained = 0;
    for (size_t k = 0; k < ex.ids.size(); ++k) {
      const auto [b, e] = enc.offsets[k];
      if (b < at) continue;
      shown_text.append(ex.text, at, b - at);
      if (ex.trained[k] && !in) shown_text += "[[";
      if (!ex.trained[k] && in) shown_text += "]]";
      in = ex.trained[k];
      trained += ex.trained[k];
      shown_text.append(ex.text, b, e - b);
      at = e;
    }
    shown_text.append(ex.text, at, std::string::npos);
    if (in) shown_text += "]]";
    std::fprintf(out, "--- %s line %ld: %zu tokens, %ld trained ([[...]])\n%s\n", file.c_str(), line_no, ex.ids.size(),
                 trained, shown_text.c_str());
    ++shown;
  }
}

}  // namespace strata
