#include "model/data/datasets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "engine/error.h"
#include "engine/json_limits.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"
#include "model/data/chat_template.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxSource = size_t(1) << 36;  // 64 GiB: a guard, not a limit anyone meets
constexpr char kCacheMagic[8] = {'S', 'T', 'R', 'D', 'S', 'E', 'T', '1'};

bool is_text_file(const std::string& path) {
  return fs::path(path).extension() == ".txt";
}

// Reads one line's field as a string; FormatError naming the file, line and field otherwise.
struct Row {
  const std::string& file;
  long line;
  const json& j;

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw FormatError(fmt::format("{}: line {}: field '{}' {}", file, line, field, why), file,
                      fmt::format("line {}: {}", line, field));
  }
  static const char* type_of(const json& v) { return v.type_name(); }
  // `v` (the value at `field`) as a string; null counts as missing.
  std::string str(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, fmt::format("must be a string, got {}", type_of(v)));
    return v.get<std::string>();
  }
  std::string required(const std::string& field) const {
    if (!j.contains(field) || j[field].is_null()) fail(field, "is missing");
    return str(j[field], field);
  }
  std::string optional(const std::string& field) const {
    if (!j.contains(field) || j[field].is_null()) return {};
    return str(j[field], field);
  }
};

std::vector<ChatMessage> chat_messages(const Row& r) {
  if (!r.j.contains("messages") || r.j["messages"].is_null()) r.fail("messages", "is missing");
  const json& ms = r.j["messages"];
  if (!ms.is_array()) r.fail("messages", fmt::format("must be a list of {{role, content}}, got {}", ms.type_name()));
  if (ms.empty()) r.fail("messages", "is empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = ms[i];
    if (!m.is_object()) r.fail(at, fmt::format("must be an object {{role, content}}, got {}", m.type_name()));
    if (!m.contains("role") || m["role"].is_null()) r.fail(at + ".role", "is missing");
    if (!m.contains("content") || m["content"].is_null()) r.fail(at + ".content", "is missing");
    ChatMessage cm{r.str(m["role"], at + ".role"), r.str(m["content"], at + ".content")};
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant")
      r.fail(at + ".role", fmt::format("is '{}' (expected system, user or assistant)", cm.role));
    out.push_back(std::move(cm));
  }
  return out;
}

class Encoder {
 public:
  explicit Encoder(const text::Tokenizer& tok) : tok_(tok) {
    const std::vector<int32_t> special = tok.encode("", true);
    bos_ = !special.empty() && special.front() == tok.bos_id() ? tok.bos_id() : -1;
    eos_ = tok.eos_id();
  }
  Example encode(const std::vector<Segment>& segments) const {
    Example e;
    begin(e);
    for (const Segment& s : segments) {
      tok_.encode_append(s.text, false, e.ids);
      e.trained.resize(e.ids.size(), uint8_t(s.trained));
    }
    end(e);
    return e;
  }
  // The same for one trained segment whose ids are given (a plain-text file, encoded in parts).
  Example wrap(const std::vector<int32_t>& ids) const {
    Example e;
    begin(e);
    e.ids.insert(e.ids.end(), ids.begin(), ids.end());
    e.trained.resize(e.ids.size(), 1);
    end(e);
    return e;
  }
  // An example of the BOS and EOS alone: its text had no token.
  bool empty(const Example& e) const { return e.ids.size() <= size_t(bos_ >= 0) + size_t(eos_ >= 0); }

 private:
  void begin(Example& e) const {
    if (bos_ >= 0) push(e, bos_, false);
  }
  void end(Example& e) const {
    if (eos_ >= 0 && (e.ids.empty() || e.ids.back() != eos_)) push(e, eos_, true);
  }
  static void push(Example& e, int32_t id, bool trained) {
    e.ids.push_back(id);
    e.trained.push_back(uint8_t(trained));
  }
  const text::Tokenizer& tok_;
  int32_t bos_ = -1, eos_ = -1;
};

// A fast 64-bit hash (not cryptographic): 8 bytes at a time, then the tail and the length.
struct Hasher {
  uint64_t h = 0x243f6a8885a308d3ull;
  void mix(uint64_t w) {
    h ^= w;
    h = (h << 31) | (h >> 33);
    h *= 0x9e3779b97f4a7c15ull;
  }
  void add(std::string_view s) {
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      mix(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    mix(tail);
    mix(uint64_t(s.size()));
  }
  uint64_t final() const {
    uint64_t x = h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
  }
};

std::string cache_bytes(const std::vector<Example>& ex) {
  std::string out(kCacheMagic, 8);
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint64_t n = ex.size();
  put(&n, 8);
  for (const Example& e : ex) {
    const uint32_t len = uint32_t(e.ids.size());
    put(&len, 4);
    put(e.ids.data(), e.ids.size() * 4);
    put(e.trained.data(), e.trained.size());
  }
  return out;
}

// False for anything but a complete cache file whose every id is a token of the tokenizer (0 <= id < vocab)
// and every flag 0 or 1: verified in full here, not when a row is drawn (then the dataset is tokenised again).
bool parse_cache(const std::string& b, std::vector<Example>& ex, int32_t vocab) {
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    if (b.size() - at < n) return false;
    if (n) std::memcpy(p, b.data() + at, n);  // an empty example's vector has no storage: nothing to copy
    at += n;
    return true;
  };
  char magic[8];
  uint64_t n = 0;
  if (!get(magic, 8) || std::memcmp(magic, kCacheMagic, 8) != 0 || !get(&n, 8) || n > b.size()) return false;
  ex.resize(size_t(n));
  for (Example& e : ex) {
    uint32_t len = 0;
    if (!get(&len, 4) || size_t(len) * 5 > b.size() - at) return false;
    e.ids.resize(len);
    e.trained.resize(len);
    if (!get(e.ids.data(), size_t(len) * 4) || !get(e.trained.data(), len)) return false;
    for (size_t i = 0; i < len; ++i)
      if (e.ids[i] < 0 || e.ids[i] >= vocab || e.trained[i] > 1) return false;
  }
  return at == b.size();
}

std::string read_if_exists(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return {};
  return io::read_regular_file(path, "a tokenizer file", size_t(1) << 30);
}

// How many of e's tokens go into a row of `seq` (0: none, the example is left out), counted in st:
// an overlong example is truncated or dropped, one with no trained target is left out (counted once,
// as untrained), and the trained targets of what is kept are added.
size_t fit_example(const Example& e, int seq, bool train_on_inputs, bool drop_excess, RowStats& st) {
  size_t n = e.ids.size();
  if (n > size_t(seq)) {
    if (drop_excess) {
      ++st.dropped;
      return 0;
    }
    ++st.truncated;
    n = size_t(seq);
  }
  long trained = 0;
  for (size_t i = 1; i < n; ++i) trained += train_on_inputs || e.trained[i];
  if (trained == 0) {
    ++st.untrained;
    if (n < e.ids.size()) --st.truncated;
    return 0;
  }
  st.trained_targets += trained;
  return n;
}

// Runs work(t, lo, hi) for t < n_threads on contiguous ranges [lo, hi) of n items, threads 1..n-1
// on threads of their own; the first error in item order is rethrown once all have finished.
template <typename Work>
void run_ranges(size_t n, size_t n_threads, const Work& work) {
  std::vector<std::exception_ptr> errors(n_threads);
  auto run = [&](size_t t) {
    try {
      work(t, n * t / n_threads, n * (t + 1) / n_threads);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (std::thread& th : pool) th.join();
  for (size_t t = 0; t < n_threads; ++t)
    if (errors[t]) std::rethrow_exception(errors[t]);  // ranges are in item order
}

// One per core (at most 16), one per `per` items; `threads` > 0 forces the count (at most one per item).
size_t thread_count(int threads, size_t items, size_t per) {
  if (threads > 0) return std::min<size_t>(size_t(threads), std::max<size_t>(items, 1));
  return std::clamp<size_t>(std::min<size_t>(std::thread::hardware_concurrency(), items / per), 1, 16);
}

}  // namespace

std::vector<int32_t> encode_text(const text::Tokenizer& tok, std::string_view text, int threads) {
  const size_t want = tok.cut_refusal().empty() ? thread_count(threads, text.size(), size_t(1) << 18) : 1;
  std::vector<size_t> bounds{0};
  for (size_t k = 1; k < want; ++k) {
    const size_t p = tok.next_cut(text, std::max(text.size() * k / want, bounds.back() + 1));
    if (p == std::string_view::npos) break;
    bounds.push_back(p);
  }
  bounds.push_back(text.size());
  std::vector<std::vector<int32_t>> parts(bounds.size() - 1);
  run_ranges(parts.size(), parts.size(), [&](size_t, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i)
      tok.encode_append(text.substr(bounds[i], bounds[i + 1] - bounds[i]), false, parts[i], i > 0);
  });
  std::vector<int32_t> ids;
  for (const std::vector<int32_t>& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

std::vector<Example> tokenize_dataset(const DatasetSpec& d, const std::string& contents, const text::Tokenizer& tok,
                                      const ChatFormat* chat_format, int threads) {
  const Encoder enc(tok);
  if (d.type == "completion" && is_text_file(d.path)) {
    Example e = enc.wrap(encode_text(tok, contents, threads));
    if (enc.empty(e))
      throw ConfigError(fmt::format("{}: the text file has no token (empty or blank)", d.path), d.path, "datasets");
    return {std::move(e)};
  }
  if (d.type == "chat_template" && !chat_format)
    throw ConfigError(fmt::format("{}: a chat_template dataset needs its chat template loaded", d.path), d.path,
                      "type");
  if (d.type != "completion" && d.type != "alpaca" && d.type != "chat" && d.type != "chat_template")
    throw ConfigError(fmt::format("{}: dataset type '{}' is not supported", d.path, d.type), d.path, "type");
  const ChatTemplate chat = chat_template_for(tok);
  const std::string text_field = d.field.empty() ? "text" : d.field;
  // The non-blank lines (blank ones are skipped), numbered from 1 as an editor shows them.
  struct Line {
    std::string_view text;
    long no;
  };
  std::vector<Line> lines;
  long line_no = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    const std::string_view line(contents.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back({line, line_no});
  }
  auto one = [&](const Line& l) -> Example {
    if (d.type == "chat_template") {
      nlohmann::ordered_json row;
      try {
        row = nlohmann::ordered_json::parse(l.text);
      } catch (const json::exception& e) {
        throw FormatError(fmt::format("{}: line {}: not valid JSON: {}", d.path, l.no, e.what()), d.path,
                          fmt::format("line {}", l.no));
      }
      if (!row.is_object())
        throw FormatError(fmt::format("{}: line {}: expected a JSON object, got {}", d.path, l.no, row.type_name()),
                          d.path, fmt::format("line {}", l.no));
      ChatExample c = tokenize_chat_row(row, d.chat, *chat_format, tok, d.path, l.no);
      return Example{std::move(c.ids), std::move(c.trained)};
    }
    json j;
    if (auto deep = json_nesting_error(l.text))
      throw FormatError(fmt::format("{}: line {}: {}", d.path, l.no, *deep), d.path, fmt::format("line {}", l.no));
    try {
      j = json::parse(l.text);
    } catch (const json::exception& e) {
      throw FormatError(fmt::format("{}: line {}: not valid JSON: {}", d.path, l.no, e.what()), d.path,
                        fmt::format("line {}", l.no));
    }
    if (!j.is_object())
      throw FormatError(fmt::format("{}: line {}: expected a JSON object, got {}", d.path, l.no, j.type_name()), d.path,
                        fmt::format("line {}", l.no));
    const Row r{d.path, l.no, j};
    if (d.type == "completion") return enc.encode({{r.required(text_field), true}});
    if (d.type == "alpaca") {
      const std::string instruction = r.required("instruction");
      const std::string input = r.optional("input");
      const std::string output = r.required("output");
      return enc.encode({{alpaca_prompt(instruction, input), false}, {output, true}});
    }
    return enc.encode(render_chat(chat_messages(r), chat));
  };
  // Contiguous ranges of lines on several threads (the Tokenizer is thread-safe); the first bad
  // line in file order is the one reported, whichever thread met it.
  std::vector<Example> out(lines.size());
  run_ranges(lines.size(), thread_count(threads, lines.size(), 256), [&](size_t, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) out[i] = one(lines[i]);
  });
  // Every example empty: the run would train on BOS -> EOS alone.
  if (!out.empty() && std::all_of(out.begin(), out.end(), [&](const Example& e) { return enc.empty(e); }))
    throw ConfigError(
        fmt::format("{}: every one of its {} examples is empty (no token but BOS and EOS)", d.path, out.size()), d.path,
        "datasets");
  return out;
}

std::string dataset_cache_bytes(const std::vector<Example>& examples) {
  return cache_bytes(examples);
}

std::string dataset_cache_path(const DatasetSpec& d, const std::string& contents, const std::string& tokenizer_dir) {
  Hasher h;
  h.add(fmt::format("strata-dataset v{} type={} field={} text={}", kTemplateVersion, d.type, d.field,
                    is_text_file(d.path)));
  h.add(contents);
  h.add(read_if_exists(tokenizer_dir + "/tokenizer.json"));
  h.add(read_if_exists(tokenizer_dir + "/tokenizer_config.json"));
  if (d.type == "chat_template") {
    const ChatTemplateOptions& o = d.chat;
    std::string keys =
        fmt::format("template={} messages={} role={} content={} train={} eos={}", o.chat_template, o.field_messages,
                    o.role_key, o.content_key, fmt::join(o.roles_to_train, ","), o.train_on_eos);
    for (const auto& [to, from] : o.roles) keys += fmt::format(" {}<-{}", to, fmt::join(from, ","));
    h.add(keys);
    h.add(load_chat_format(o, tokenizer_dir).source);
  }
  return fmt::format("{}.strata-cache/{:016x}.bin", d.path, h.final());
}

DatasetLoad load_dataset(const DatasetSpec& d, const text::Tokenizer& tok, const std::string& tokenizer_dir,
                         std::FILE* warn) {
  const std::string contents = io::read_regular_file(d.path, "the dataset file", kMaxSource);
  DatasetLoad r;
  r.cache_file = dataset_cache_path(d, contents, tokenizer_dir);
  std::error_code ec;
  if (fs::is_regular_file(r.cache_file, ec)) {
    try {
      if (parse_cache(io::read_regular_file(r.cache_file, "the dataset cache", kMaxSource), r.examples,
                      tok.vocab_size())) {
        r.cache_hit = true;
        return r;
      }
    } catch (const Error&) {
    }
    if (warn) std::fprintf(warn, "strata-train: warning: %s is damaged; tokenising again\n", r.cache_file.c_str());
    r.examples.clear();
  }
  if (warn && chunks_rows(d) && contents.size() > (size_t(1) << 20) && !tok.cut_refusal().empty())
    std::fprintf(warn, "strata-train: note: %s is tokenised on one thread: the tokenizer cannot be cut exactly (%s)\n",
                 d.path.c_str(), tok.cut_refusal().c_str());
  if (d.type == "chat_template") {
    const ChatFormat f = load_chat_format(d.chat, tokenizer_dir);
    r.examples = tokenize_dataset(d, contents, tok, &f);
  } else {
    r.examples = tokenize_dataset(d, contents, tok);
  }
  try {
    fs::create_directories(fs::path(r.cache_file).parent_path());
    io::write_file_atomic(r.cache_file, cache_bytes(r.examples));
  } catch (const std::exception& e) {
    if (warn) std::fprintf(warn, "strata-train: warning: the dataset cache was not written: %s\n", e.what());
  }
  return r;
}

void preview_dataset(std::FILE* out, const DatasetSpec& d, const text::Tokenizer& tok, const std::string& tokenizer_dir,
                     int n) {
  const std::string contents = io::read_regular_file(d.path, "the dataset file", kMaxSource);
  std::fprintf(out, "=== %s (type %s)\n", d.path.c_str(), d.type.c_str());
  if (d.type == "chat_template") {
    const ChatFormat f = load_chat_format(d.chat, tokenizer_dir);
    std::fprintf(out, "chat template: %s\n", f.tmpl.name().c_str());
    preview_chat_rows(out, contents, d.chat, f, tok, d.path, n);
    return;
  }
  const std::vector<Example> ex = tokenize_dataset(d, contents, tok);
  for (size_t i = 0; i < ex.size() && i < size_t(n); ++i) {
    const Example& e = ex[i];
    std::string text;
    long trained = 0;
    for (size_t b = 0; b < e.ids.size();) {
      size_t k = b;
      while (k < e.ids.size() && e.trained[k] == e.trained[b]) ++k;
      const std::string piece = tok.decode(std::span<const int32_t>(e.ids.data() + b, k - b));
      text += e.trained[b] ? "[[" + piece + "]]" : piece;
      if (e.trained[b]) trained += long(k - b);
      b = k;
    }
    std::fprintf(out, "--- example %zu: %zu tokens, %ld trained ([[...]])\n%s\n", i + 1, e.ids.size(), trained,
                 text.c_str());
  }
}

bool chunks_rows(const DatasetSpec& d) {
  return d.type == "completion" && is_text_file(d.path);
}

RowStats lay_rows(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs, bool drop_excess,
                  std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  return lay_rows(examples, seq, pad_id, train_on_inputs, drop_excess, inputs, targets, false);
}

RowStats lay_rows(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs, bool drop_excess,
                  std::vector<int32_t>& inputs, std::vector<int32_t>& targets, bool chunk) {
  if (chunk) {
    // Consecutive windows: row k's inputs are tokens [k*seq, k*seq + seq), its targets the next
    // token of each; the windows share one token at each boundary, as input and as target.
    std::vector<Example> pieces;
    for (const Example& e : examples) {
      if (e.ids.size() <= size_t(seq)) {
        pieces.push_back(e);
        continue;
      }
      for (size_t b = 0; b + 1 < e.ids.size(); b += size_t(seq)) {
        const size_t end = std::min(e.ids.size(), b + size_t(seq) + 1);
        Example p;
        p.ids.assign(e.ids.begin() + long(b), e.ids.begin() + long(end));
        p.trained.assign(e.trained.begin() + long(b), e.trained.begin() + long(end));
        pieces.push_back(std::move(p));
      }
    }
    RowStats st;
    for (const Example& p : pieces) {
      // A window of seq + 1 tokens fills one row (its last token is only a target).
      const Example& row = p;
      const size_t n = std::min(row.ids.size(), size_t(seq) + 1);
      long trained = 0;
      for (size_t i = 1; i < n; ++i) trained += train_on_inputs || row.trained[i];
      if (trained == 0) {
        ++st.untrained;
        continue;
      }
      st.trained_targets += trained;
      for (size_t i = 0; i < size_t(seq); ++i) {
        inputs.push_back(i < n ? row.ids[i] : pad_id);
        targets.push_back(i + 1 < n && (train_on_inputs || row.trained[i + 1]) ? row.ids[i + 1] : -1);
      }
      ++st.rows;
    }
    st.examples = long(examples.size());
    st.laid = st.rows;
    return st;
  }
  RowStats st;
  st.examples = long(examples.size());
  for (const Example& e : examples) {
    const size_t n = fit_example(e, seq, train_on_inputs, drop_excess, st);
    if (n == 0) continue;
    for (size_t i = 0; i < size_t(seq); ++i) {
      inputs.push_back(i < n ? e.ids[i] : pad_id);
      targets.push_back(i + 1 < n && (train_on_inputs || e.trained[i + 1]) ? e.ids[i + 1] : -1);
    }
    ++st.rows;
  }
  st.laid = st.rows;
  return st;
}

RowStats lay_rows_packed(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs,
                         bool drop_excess, std::vector<int32_t>& inputs, std::vector<int32_t>& targets,
                         std::vector<int32_t>& positions) {
  RowStats st;
  st.examples = long(examples.size());
  size_t used = size_t(seq);  // tokens of the current row taken; seq: no row open
  auto close_row = [&] {
    for (size_t i = used, run = 0; i < size_t(seq); ++i, ++run) {
      inputs.push_back(pad_id);
      targets.push_back(-1);
      positions.push_back(int32_t(run));
    }
    used = size_t(seq);
  };
  for (const Example& e : examples) {
    const size_t n = fit_example(e, seq, train_on_inputs, drop_excess, st);
    if (n == 0) continue;
    if (used + n > size_t(seq)) {  // start the next row
      if (used < size_t(seq)) close_row();
      used = 0;
      ++st.rows;
    }
    for (size_t i = 0; i < n; ++i) {
      inputs.push_back(e.ids[i]);
      targets.push_back(i + 1 < n && (train_on_inputs || e.trained[i + 1]) ? e.ids[i + 1] : -1);
      positions.push_back(int32_t(i));
    }
    used += n;
    ++st.laid;
  }
  if (used < size_t(seq)) close_row();
  return st;
}

int32_t pad_id_for(const text::Tokenizer& tok, const std::string& tokenizer_dir) {
  const std::string cfg = read_if_exists(tokenizer_dir + "/tokenizer_config.json");
  if (!cfg.empty() && !json_nesting_error(cfg)) {  // Tokenizer::load refused a deep one already
    try {
      const json j = json::parse(cfg);
      if (j.contains("pad_token")) {
        const json& p = j["pad_token"];
        const json& name = p.is_object() && p.contains("content") ? p["content"] : p;
        if (name.is_string())
          if (auto id = tok.token_to_id(name.get<std::string>())) return *id;
      }
    } catch (const json::exception&) {  // Tokenizer::load read it already; nothing to add here
    }
  }
  for (const char* name : {"<pad>", "<|pad|>", "[PAD]"})
    if (auto id = tok.token_to_id(name)) return *id;
  return tok.eos_id() >= 0 ? tok.eos_id() : 0;
}

DatasetRows build_dataset_rows(const DatasetOptions& cfg, const std::string& tokenizer_dir, std::FILE* info) {
  const text::Tokenizer tok = text::Tokenizer::load(tokenizer_dir);
  const int32_t pad = pad_id_for(tok, tokenizer_dir);
  DatasetRows out;
  for (const DatasetSpec& d : cfg.datasets) {
    const DatasetLoad ld = load_dataset(d, tok, tokenizer_dir, stderr);
    const bool pack = cfg.sample_packing && !chunks_rows(d);
    const size_t first = out.inputs.size();
    const RowStats st = pack ? lay_rows_packed(ld.examples, cfg.seq, pad, cfg.train_on_inputs, cfg.drop_excess,
                                               out.inputs, out.targets, out.positions)
                             : lay_rows(ld.examples, cfg.seq, pad, cfg.train_on_inputs, cfg.drop_excess, out.inputs,
                                        out.targets, chunks_rows(d));
    if (cfg.sample_packing && !pack)  // a plain-text file's chunks fill their rows: one sequence a row
      for (size_t i = first; i < out.inputs.size(); ++i)
        out.positions.push_back(int32_t((i - first) % size_t(cfg.seq)));
    if (info)
      std::fprintf(
          info,
          "dataset: %s (%s%s) | %ld examples -> %ld rows of %d%s | %ld truncated, %ld dropped (longer than "
          "sequence_len), %ld with no response token in the row | %ld trained targets | cache %s %s\n",
          d.path.c_str(), d.type.c_str(),
          d.type == "chat"            ? fmt::format(", {} template", chat_template_name(chat_template_for(tok))).c_str()
          : d.type == "chat_template" ? fmt::format(", {}", load_chat_format(d.chat, tokenizer_dir).tmpl.name()).c_str()
                                      : "",
          st.examples, st.rows, cfg.seq, pack ? fmt::format(" ({} packed)", st.laid).c_str() : "", st.truncated,
          st.dropped, st.untrained, st.trained_targets, ld.cache_hit ? "hit" : "written", ld.cache_file.c_str());
    if (st.rows == 0)
      throw ConfigError(
          fmt::format("{}: the dataset is empty after filtering: {} examples, {} longer than sequence_len {} and "
                      "dropped (excess_length_strategy: drop), {} with no response token within the first {} tokens "
                      "(a longer sequence_len keeps them)",
                      d.path, st.examples, st.dropped, cfg.seq, st.untrained, cfg.seq),
          d.path, "datasets");
    out.rows += st.rows;
    out.examples += st.laid;
  }
  for (int32_t id : out.inputs) out.max_id = std::max(out.max_id, id);
  return out;
}

}  // namespace strata
