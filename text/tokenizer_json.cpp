// Reading tokenizer.json and tokenizer_config.json into a TokenizerModel. Every refusal is a
// ConfigError naming the file, the JSON field (dotted, with [i] for array elements) and the value.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_limits.h"
#include "io/regular_file.h"
#include "text/tokenizer.h"
#include "text/tokenizer_model.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

using json = nlohmann::json;
constexpr size_t kMaxTokenizerBytes = size_t(1) << 30;  // Llama 3's is 9 MB, Gemma's 33 MB
constexpr size_t kMaxConfigBytes = size_t(64) << 20;
constexpr int64_t kMaxId = int64_t(1) << 22;  // ids index a table; the largest vocabularies are ~256k

const char* const kSupported =
    "strata reads BPE models; normalizers Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, "
    "ByteLevel; pre-tokenizers Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, "
    "Punctuation; decoders Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip; post-processors "
    "Sequence, TemplateProcessing, ByteLevel";

std::string shown(const json& v) {
  if (v.is_structured() && v.size() > 8) return fmt::format("{} of {} entries", v.type_name(), v.size());
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    STRATA_THROW(ConfigError, fmt::format("{}: {}", file, msg), file, field);
  }
  [[noreturn]] void bad(const std::string& field, const json& v, const std::string& why) const {
    fail(field, fmt::format("field '{}' is {}: {}", field, shown(v), why));
  }
  [[noreturn]] void unsupported(const std::string& field, const json& v) const {
    bad(field, v, fmt::format("not supported ({})", kSupported));
  }
  // The value at key, or null (a const json's operator[] must not be given a missing key).
  static const json& value(const json& obj, const char* key) {
    static const json null;
    auto it = obj.find(key);
    return it == obj.end() ? null : *it;
  }
  static const json* get(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const json& obj, const char* key, const std::string& field) const {
    const json* v = get(obj, key);
    if (!v) fail(field, fmt::format("missing field '{}'", field));
    return *v;
  }
  const json& object(const json& obj, const char* key, const std::string& field) const {
    const json& v = need(obj, key, field);
    if (!v.is_object()) bad(field, v, "expected an object");
    return v;
  }
  const json& array(const json& obj, const char* key, const std::string& field) const {
    const json& v = need(obj, key, field);
    if (!v.is_array()) bad(field, v, "expected an array");
    return v;
  }
  std::string string(const json& obj, const char* key, const std::string& field) const {
    const json& v = need(obj, key, field);
    if (!v.is_string()) bad(field, v, "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const char* key, const std::string& field, bool dflt) const {
    const json* v = get(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(field, *v, "expected true or false");
    return v->get<bool>();
  }
  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) bad(field, v, fmt::format("expected an integer in [{}, {}]", lo, hi));
    bool neg = v.is_number_integer() && !v.is_number_unsigned();
    int64_t x = neg ? v.get<int64_t>() : int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(hi) + 1));
    if (x < lo || x > hi) bad(field, v, fmt::format("expected an integer in [{}, {}]", lo, hi));
    return x;
  }
  std::string type(const json& obj, const std::string& field) const {
    if (!obj.is_object()) bad(field, obj, "expected an object");
    return string(obj, "type", field + ".type");
  }
  json parse(std::string_view text) const {
    if (auto deep = json_nesting_error(text)) fail("json", *deep);
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      fail("json", fmt::format("invalid JSON: {}", e.what()));
    }
  }
};

// Sequences nest; a hostile file could nest them until the stack runs out.
void check_depth(const Reader& r, const std::string& field, const json& v) {
  if (std::count(field.begin(), field.end(), '.') > 8) r.bad(field, v, "Sequence nested more than 8 deep");
}

// GPT-2's split regex, which the ByteLevel pre-tokenizer runs where use_regex is true.
constexpr std::string_view kByteLevelRegex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::shared_ptr<const Regex> compile(const Reader& r, const std::string& pattern, const std::string& field,
                                     const json& v) {
  std::string error;
  std::unique_ptr<Regex> re = Regex::compile(pattern, &error);
  if (!re) r.bad(field, v, fmt::format("Oniguruma cannot compile it: {}", error));
  re->file = r.file;
  re->field = field;
  return re;
}

// A {"String": s} or {"Regex": r} pattern (Split, Replace): sets *literal or returns the regex.
std::shared_ptr<const Regex> read_pattern(const Reader& r, const json& obj, const std::string& field,
                                          std::string* literal) {
  const json& p = r.object(obj, "pattern", field + ".pattern");
  if (const json* s = Reader::get(p, "String"); s && s->is_string()) {
    *literal = s->get<std::string>();
    if (literal->empty()) r.bad(field + ".pattern", p, "an empty pattern");
    return nullptr;
  }
  if (const json* re = Reader::get(p, "Regex"); re && re->is_string())
    return compile(r, re->get<std::string>(), field + ".pattern", p);
  r.bad(field + ".pattern", p, "expected {\"String\": ...} or {\"Regex\": ...}");
}

// A {"String": s} pattern (the Replace decoder).
std::string string_pattern(const Reader& r, const json& obj, const std::string& field) {
  const json& p = r.object(obj, "pattern", field + ".pattern");
  if (const json* s = Reader::get(p, "String"); s && s->is_string()) return s->get<std::string>();
  r.bad(field + ".pattern", p, "only a {\"String\": ...} pattern is supported here");
}

NormalizerStep norm_step(NormalizerStep::Kind k) {
  NormalizerStep s;
  s.kind = k;
  return s;
}

void read_normalizer(const Reader& r, const json& n, const std::string& field, std::vector<NormalizerStep>& out) {
  std::string t = r.type(n, field);
  if (t == "Sequence") {
    check_depth(r, field, Reader::value(n, "type"));
    const json& list = r.array(n, "normalizers", field + ".normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(r, list[i], fmt::format("{}.normalizers[{}]", field, i), out);
  } else if (t == "Prepend") {
    NormalizerStep s = norm_step(NormalizerStep::kPrepend);
    s.a = r.string(n, "prepend", field + ".prepend");
    out.push_back(std::move(s));
  } else if (t == "Replace") {
    NormalizerStep s = norm_step(NormalizerStep::kReplace);
    s.regex = read_pattern(r, n, field, &s.a);
    s.b = r.string(n, "content", field + ".content");
    out.push_back(std::move(s));
  } else if (t == "Lowercase") {
    out.push_back(norm_step(NormalizerStep::kLowercase));
  } else if (t == "Strip") {
    NormalizerStep s = norm_step(NormalizerStep::kStrip);
    s.left = r.boolean(n, "strip_left", field + ".strip_left", true);
    s.right = r.boolean(n, "strip_right", field + ".strip_right", true);
    out.push_back(std::move(s));
  } else if (t == "ByteLevel") {
    out.push_back(norm_step(NormalizerStep::kByteLevel));
  } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
    NormForm f = t == "NFC"    ? NormForm::kNFC
                 : t == "NFD"  ? NormForm::kNFD
                 : t == "NFKC" ? NormForm::kNFKC
                               : NormForm::kNFKD;
    NormalizerStep s = norm_step(NormalizerStep::kUnicode);
    s.form = f;
    out.push_back(std::move(s));
  } else {
    r.unsupported(field + ".type", Reader::value(n, "type"));
  }
}

void read_metaspace(const Reader& r, const json& p, const std::string& field, std::string* replacement,
                    PreTokenizerStep::Prepend* prepend) {
  *replacement = r.string(p, "replacement", field + ".replacement");
  uint32_t cp;
  if (replacement->empty() || utf8_valid_prefix(*replacement) != replacement->size() ||
      size_t(utf8_decode(*replacement, 0, &cp)) != replacement->size())
    r.bad(field + ".replacement", Reader::value(p, "replacement"), "expected one character");
  if (const json* s = Reader::get(p, "prepend_scheme")) {
    std::string v = s->is_string() ? s->get<std::string>() : "";
    if (v == "always")
      *prepend = PreTokenizerStep::kAlways;
    else if (v == "first")
      *prepend = PreTokenizerStep::kFirst;
    else if (v == "never")
      *prepend = PreTokenizerStep::kNever;
    else
      r.bad(field + ".prepend_scheme", *s, "expected \"always\", \"first\" or \"never\"");
  } else {
    *prepend = r.boolean(p, "add_prefix_space", field + ".add_prefix_space", true) ? PreTokenizerStep::kAlways
                                                                                   : PreTokenizerStep::kNever;
  }
}

SplitBehavior read_behavior(const Reader& r, const json& p, const std::string& field) {
  std::string b = r.string(p, "behavior", field + ".behavior");
  const std::pair<const char*, SplitBehavior> names[] = {{"Removed", SplitBehavior::kRemoved},
                                                         {"Isolated", SplitBehavior::kIsolated},
                                                         {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
                                                         {"MergedWithNext", SplitBehavior::kMergedWithNext},
                                                         {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [name, v] : names)
    if (b == name) return v;
  r.bad(field + ".behavior", Reader::value(p, "behavior"),
        "expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// The regexes of the built-in pre-tokenizers, compiled once.
std::shared_ptr<const Regex> builtin_regex(std::string_view pattern) {
  static std::mutex mu;
  static std::vector<std::shared_ptr<const Regex>> compiled;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& re : compiled)
    if (re->pattern() == pattern) return re;
  std::string error;
  std::unique_ptr<Regex> re = Regex::compile(pattern, &error);
  STRATA_CHECK(re, fmt::format("built-in regex {}: {}", pattern, error));
  re->file = "(built in)";
  re->field = std::string(pattern);
  compiled.push_back(std::move(re));
  return compiled.back();
}

std::shared_ptr<const Regex> byte_level_regex() {
  return builtin_regex(kByteLevelRegex);
}

void read_pre_tokenizer(const Reader& r, const json& p, const std::string& field, std::vector<PreTokenizerStep>& out,
                        bool use_fast_path) {
  std::string t = r.type(p, field);
  PreTokenizerStep s{};
  if (t == "Sequence") {
    check_depth(r, field, Reader::value(p, "type"));
    const json& list = r.array(p, "pretokenizers", field + ".pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", field, i), out, use_fast_path);
    return;
  } else if (t == "Split") {
    s.kind = PreTokenizerStep::kSplit;
    Splitter& sp = s.splitter;
    sp.regex = read_pattern(r, p, field, &sp.literal);
    // The hand-written regexes stand in for Oniguruma where the pattern is theirs (proven equal).
    for (SplitRegex k : {SplitRegex::kLlama3, SplitRegex::kQwen2})
      if (sp.regex && sp.regex->pattern() == split_regex_pattern(k)) {
        sp.fast = true;
        sp.fast_regex = k;
      }
    if (sp.fast && !use_fast_path) sp.fast = false;
    if (sp.fast) sp.regex.reset();
    sp.behavior = read_behavior(r, p, field);
    sp.invert = r.boolean(p, "invert", field + ".invert", false);
  } else if (t == "ByteLevel") {
    s.kind = PreTokenizerStep::kByteLevel;
    s.add_prefix_space = r.boolean(p, "add_prefix_space", field + ".add_prefix_space", true);
    s.use_regex = r.boolean(p, "use_regex", field + ".use_regex", true);
    if (s.use_regex) s.splitter.regex = byte_level_regex();
  } else if (t == "Digits") {
    s.kind = PreTokenizerStep::kSplit;
    s.splitter.char_set = kNumericRanges;
    s.splitter.char_set_count = kNumericRangeCount;
    s.splitter.behavior = r.boolean(p, "individual_digits", field + ".individual_digits", false)
                              ? SplitBehavior::kIsolated
                              : SplitBehavior::kContiguous;
  } else if (t == "Whitespace") {
    s.kind = PreTokenizerStep::kSplit;
    s.splitter.word_runs = true;
    s.splitter.behavior = SplitBehavior::kRemoved;
    s.splitter.invert = true;
  } else if (t == "WhitespaceSplit") {
    s.kind = PreTokenizerStep::kSplit;
    s.splitter.regex = builtin_regex("\\s");  // char::is_whitespace: White_Space, as Oniguruma's \s
    s.splitter.behavior = SplitBehavior::kRemoved;
  } else if (t == "Punctuation") {
    s.kind = PreTokenizerStep::kSplit;
    s.splitter.char_set = kPunctuationRanges;
    s.splitter.char_set_count = kPunctuationRangeCount;
    s.splitter.behavior = Reader::get(p, "behavior") ? read_behavior(r, p, field) : SplitBehavior::kIsolated;
  } else if (t == "Metaspace") {
    s.kind = PreTokenizerStep::kMetaspace;
    read_metaspace(r, p, field, &s.replacement, &s.prepend);
    s.split = r.boolean(p, "split", field + ".split", true);
  } else {
    r.unsupported(field + ".type", Reader::value(p, "type"));
  }
  out.push_back(std::move(s));
}

void read_decoder(const Reader& r, const json& d, const std::string& field, std::vector<DecoderStep>& out) {
  std::string t = r.type(d, field);
  DecoderStep s{};
  if (t == "Sequence") {
    check_depth(r, field, Reader::value(d, "type"));
    const json& list = r.array(d, "decoders", field + ".decoders");
    for (size_t i = 0; i < list.size(); ++i) read_decoder(r, list[i], fmt::format("{}.decoders[{}]", field, i), out);
    return;
  } else if (t == "ByteLevel") {
    s.kind = DecoderStep::kByteLevel;
  } else if (t == "Replace") {
    s.kind = DecoderStep::kReplace;
    s.a = string_pattern(r, d, field);
    if (s.a.empty()) r.bad(field + ".pattern", Reader::value(d, "pattern"), "an empty pattern");
    s.b = r.string(d, "content", field + ".content");
  } else if (t == "ByteFallback") {
    s.kind = DecoderStep::kByteFallback;
  } else if (t == "Fuse") {
    s.kind = DecoderStep::kFuse;
  } else if (t == "Strip") {
    s.kind = DecoderStep::kStrip;
    s.a = r.string(d, "content", field + ".content");
    uint32_t cp;
    if (s.a.empty() || utf8_valid_prefix(s.a) != s.a.size() || size_t(utf8_decode(s.a, 0, &cp)) != s.a.size())
      r.bad(field + ".content", Reader::value(d, "content"), "expected one character");
    s.start = size_t(r.integer(r.need(d, "start", field + ".start"), field + ".start", 0, 1 << 20));
    s.stop = size_t(r.integer(r.need(d, "stop", field + ".stop"), field + ".stop", 0, 1 << 20));
  } else if (t == "Metaspace") {
    s.kind = DecoderStep::kMetaspace;
    PreTokenizerStep::Prepend p;
    read_metaspace(r, d, field, &s.a, &p);
    s.prepend = p != PreTokenizerStep::kNever;
  } else {
    r.unsupported(field + ".type", Reader::value(d, "type"));
  }
  out.push_back(std::move(s));
}

// TemplateProcessing's "single" (others: ByteLevel changes no ids; Sequence of these).
void read_post_processor(const Reader& r, const json& p, const std::string& field, TokenizerModel& m, bool* seen) {
  std::string t = r.type(p, field);
  if (t == "Sequence") {
    check_depth(r, field, Reader::value(p, "type"));
    const json& list = r.array(p, "processors", field + ".processors");
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(r, list[i], fmt::format("{}.processors[{}]", field, i), m, seen);
    return;
  }
  if (t == "ByteLevel") {
    m.trim_offsets = r.boolean(p, "trim_offsets", field + ".trim_offsets", true);
    m.trim_prefix_space = r.boolean(p, "add_prefix_space", field + ".add_prefix_space", true);
    return;
  }
  if (t != "TemplateProcessing") r.unsupported(field + ".type", Reader::value(p, "type"));
  if (*seen) r.bad(field, Reader::value(p, "type"), "a second TemplateProcessing");
  *seen = true;
  const json& single = r.array(p, "single", field + ".single");
  const json* specials = Reader::get(p, "special_tokens");
  bool sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    std::string f = fmt::format("{}.single[{}]", field, i);
    const json& piece = single[i];
    if (!piece.is_object()) r.bad(f, piece, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    if (const json* seq = Reader::get(piece, "Sequence")) {
      if (!seq->is_object() || seq->value("id", "") != "A" || sequence)
        r.bad(f, piece, "a single-sequence template has one {\"Sequence\": {\"id\": \"A\"}}");
      sequence = true;
      continue;
    }
    const json* tok = Reader::get(piece, "SpecialToken");
    if (!tok || !tok->is_object()) r.bad(f, piece, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    std::string name = r.string(*tok, "id", f + ".SpecialToken.id");
    const json* entry = specials && specials->is_object() ? Reader::get(*specials, name.c_str()) : nullptr;
    if (!entry || !entry->is_object())
      r.bad(f, piece, fmt::format("special token \"{}\" is not in {}.special_tokens", name, field));
    std::string ef = fmt::format("{}.special_tokens[\"{}\"].ids", field, name);
    const json& ids = r.array(*entry, "ids", ef);
    for (size_t k = 0; k < ids.size(); ++k) {
      int32_t id = int32_t(r.integer(ids[k], fmt::format("{}[{}]", ef, k), 0, kMaxId - 1));
      (sequence ? m.template_suffix : m.template_prefix).push_back(id);
    }
  }
  if (!sequence) r.fail(field + ".single", fmt::format("field '{}.single' has no {{\"Sequence\": ...}}", field));
}

void read_model(const Reader& r, const json& model, TokenizerModel& m, int64_t* max_id) {
  std::string t = r.type(model, "model");
  if (t != "BPE") r.unsupported("model.type", Reader::value(model, "type"));
  if (const json* d = Reader::get(model, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
    r.bad("model.dropout", *d, "BPE dropout is random; only null or 0 is supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = Reader::get(model, k); v && !(v->is_string() && v->get<std::string>().empty()))
      r.bad(fmt::format("model.{}", k), *v, "not used by the Llama family; only null is supported");

  const json& vj = r.object(model, "vocab", "model.vocab");
  Vocab vocab;
  vocab.reserve(vj.size());
  for (auto it = vj.begin(); it != vj.end(); ++it) {
    int64_t id = r.integer(it.value(), fmt::format("model.vocab[\"{}\"]", it.key()), 0, kMaxId - 1);
    *max_id = std::max(*max_id, id);
    vocab[it.key()] = int32_t(id);
  }
  m.tokens.assign(size_t(*max_id + 1), {});
  for (const auto& [tok, id] : vocab) m.tokens[size_t(id)] = tok;

  const json& mj = r.array(model, "merges", "model.merges");
  std::vector<BpeMerge> merges;
  merges.reserve(mj.size());
  auto lookup = [&](const std::string& tok, const std::string& f, const json& v) {
    auto it = vocab.find(tok);
    if (it == vocab.end()) r.bad(f, v, fmt::format("token \"{}\" is not in model.vocab", tok));
    return it->second;
  };
  for (size_t i = 0; i < mj.size(); ++i) {
    std::string f = fmt::format("model.merges[{}]", i);
    const json& e = mj[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      if (s.starts_with("#version")) continue;  // tokenizers skips these header lines
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.bad(f, e, "expected two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      r.bad(f, e, "expected \"a b\" or [\"a\", \"b\"]");
    }
    merges.push_back({lookup(a, f, e), lookup(b, f, e), lookup(a + b, f, e)});
  }

  BpeOptions o;
  if (const json* u = Reader::get(model, "unk_token")) {
    if (!u->is_string()) r.bad("model.unk_token", *u, "expected a string or null");
    auto it = vocab.find(u->get<std::string>());
    if (it == vocab.end()) r.bad("model.unk_token", *u, "not in model.vocab");
    o.unk_id = it->second;
  }
  o.byte_fallback = r.boolean(model, "byte_fallback", "model.byte_fallback", false);
  o.fuse_unk = r.boolean(model, "fuse_unk", "model.fuse_unk", false);
  o.ignore_merges = r.boolean(model, "ignore_merges", "model.ignore_merges", false);
  m.bpe = std::make_unique<Bpe>(std::move(vocab), merges, o);
}

void read_added_tokens(const Reader& r, const json& j, TokenizerModel& m, int64_t* max_id) {
  const json* list = Reader::get(j, "added_tokens");
  if (!list) return;
  if (!list->is_array()) r.bad("added_tokens", *list, "expected an array");
  for (size_t i = 0; i < list->size(); ++i) {
    std::string f = fmt::format("added_tokens[{}]", i);
    const json& e = (*list)[i];
    if (!e.is_object()) r.bad(f, e, "expected an object");
    AddedToken t;
    t.id = int32_t(r.integer(r.need(e, "id", f + ".id"), f + ".id", 0, kMaxId - 1));
    t.content = r.string(e, "content", f + ".content");
    if (utf8_valid_prefix(t.content) != t.content.size())
      r.bad(f + ".content", Reader::value(e, "content"), "not valid UTF-8");
    t.special = r.boolean(e, "special", f + ".special", false);
    t.lstrip = r.boolean(e, "lstrip", f + ".lstrip", false);
    t.rstrip = r.boolean(e, "rstrip", f + ".rstrip", false);
    t.single_word = r.boolean(e, "single_word", f + ".single_word", false);
    t.normalized = r.boolean(e, "normalized", f + ".normalized", !t.special);
    *max_id = std::max(*max_id, int64_t(t.id));
    m.added.push_back(std::move(t));
  }
}

// bos_token / eos_token: a string, {"content": ...} (an AddedToken dict) or null.
int32_t config_token(const Reader& r, const json& c, const char* key, const Tokenizer& tok) {
  const json* v = Reader::get(c, key);
  if (!v) return -1;
  const json* content = v->is_object() ? Reader::get(*v, "content") : v;
  if (!content || !content->is_string()) r.bad(key, *v, "expected a string, {\"content\": ...} or null");
  auto id = tok.token_to_id(content->get<std::string>());
  if (!id) r.bad(key, *v, "not a token of tokenizer.json (added_tokens or model.vocab)");
  return *id;
}

}  // namespace

Tokenizer Tokenizer::parse(std::string_view tokenizer_json, const std::string& json_name,
                           const std::string* config_json, const std::string& config_name, bool regex_fast_path) {
  auto m = std::make_shared<TokenizerModel>();
  m->json_name = json_name;
  Reader r{json_name};
  json j = r.parse(tokenizer_json);
  if (!j.is_object()) r.bad("json", j, "expected a JSON object");
  int64_t max_id = -1;
  read_model(r, r.need(j, "model", "model"), *m, &max_id);
  read_added_tokens(r, j, *m, &max_id);
  if (const json* n = Reader::get(j, "normalizer")) read_normalizer(r, *n, "normalizer", m->normalizer);
  if (const json* p = Reader::get(j, "pre_tokenizer"))
    read_pre_tokenizer(r, *p, "pre_tokenizer", m->pre_tokenizer, regex_fast_path);
  if (const json* d = Reader::get(j, "decoder")) {
    m->has_decoder = true;
    read_decoder(r, *d, "decoder", m->decoder);
  }
  bool seen = false;
  if (const json* p = Reader::get(j, "post_processor")) read_post_processor(r, *p, "post_processor", *m, &seen);
  for (int32_t id : m->template_prefix) max_id = std::max<int64_t>(max_id, id);
  for (int32_t id : m->template_suffix) max_id = std::max<int64_t>(max_id, id);
  // No token at all: every text would encode to nothing (or fail later, far from the cause).
  if (m->bpe->vocab().empty() && m->added.empty())
    r.bad("model.vocab", Reader::value(j["model"], "vocab"),
          "is empty, and there are no added_tokens: no token to encode to");

  m->tokens.resize(size_t(max_id + 1));
  m->special.assign(m->tokens.size(), 0);
  m->present.assign(m->tokens.size(), 0);
  for (const auto& [t, id] : m->bpe->vocab()) m->present[size_t(id)] = 1;
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<const AddedToken*> raw_tokens, norm_tokens;
  for (const AddedToken& t : m->added) {
    // A normalized token's string is its normalized content (tokenizers' id_to_token and decode).
    m->tokens[size_t(t.id)] = t.normalized ? m->normalize(t.content) : t.content;
    m->special[size_t(t.id)] = t.special;
    m->present[size_t(t.id)] = 1;
    if (t.content.empty()) continue;
    if (t.normalized) {
      norm_patterns.push_back(m->normalize(t.content));
      norm_tokens.push_back(&t);
    } else {
      raw_patterns.push_back(t.content);
      raw_tokens.push_back(&t);
    }
  }
  m->raw_tokens.build(std::move(raw_patterns), std::move(raw_tokens));
  m->normalized_tokens.build(std::move(norm_patterns), std::move(norm_tokens));
  for (const PreTokenizerStep& s : m->pre_tokenizer)
    m->byte_level = m->byte_level || s.kind == PreTokenizerStep::kByteLevel;
  for (const NormalizerStep& s : m->normalizer) m->byte_level = m->byte_level || s.kind == NormalizerStep::kByteLevel;
  analyze_cuts(*m);

  Tokenizer tok(m);
  if (config_json) {
    Reader cr{config_name};
    json c = cr.parse(*config_json);
    if (!c.is_object()) cr.bad("json", c, "expected a JSON object");
    m->bos_id = config_token(cr, c, "bos_token", tok);
    m->eos_id = config_token(cr, c, "eos_token", tok);
    // Where set, these decide the template's ends (transformers' LlamaTokenizerFast rebuilds the
    // post-processor from them); where absent, tokenizer.json's template stands.
    if (Reader::get(c, "add_bos_token")) {
      bool add = cr.boolean(c, "add_bos_token", "add_bos_token", false);
      if (add && m->bos_id < 0)
        cr.bad("add_bos_token", Reader::value(c, "add_bos_token"), "set, but there is no bos_token");
      m->template_prefix.clear();
      if (add) m->template_prefix.push_back(m->bos_id);
    }
    if (Reader::get(c, "add_eos_token")) {
      bool add = cr.boolean(c, "add_eos_token", "add_eos_token", false);
      if (add && m->eos_id < 0)
        cr.bad("add_eos_token", Reader::value(c, "add_eos_token"), "set, but there is no eos_token");
      m->template_suffix.clear();
      if (add) m->template_suffix.push_back(m->eos_id);
    }
  }
  return tok;
}

Tokenizer Tokenizer::load(const std::string& dir, bool regex_fast_path) {
  std::string json_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  std::string text = io::read_regular_file(json_path, "tokenizer.json", kMaxTokenizerBytes);
  std::error_code ec;
  if (!std::filesystem::exists(config_path, ec)) return parse(text, json_path, nullptr, config_path, regex_fast_path);
  std::string config = io::read_regular_file(config_path, "tokenizer_config.json", kMaxConfigBytes);
  return parse(text, json_path, &config, config_path, regex_fast_path);
}

}  // namespace strata::text
