// strata-tokenize --tokenizer DIR: text on stdin to token ids on stdout (or ids to text with
// --decode), with the tokenizer of a Hugging Face checkpoint directory (text/tokenizer.h).
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "engine/json_limits.h"
#include "model/data/datasets.h"
#include "text/tokenizer.h"
#include "tools/cli.h"

using namespace strata;

static const char* kUsage =
    "usage: strata-tokenize --tokenizer DIR [--decode] [--jsonl] [--no-special] [--stats] [--offsets] [--onig-only] "
    "[--threads N] < input\n"
    "  DIR holds tokenizer.json (and tokenizer_config.json for BOS/EOS).\n"
    "  default   all of stdin is one text; prints its ids, space separated\n"
    "  --decode  stdin is ids (whitespace separated); prints their text\n"
    "  --jsonl   each stdin line is a JSON string or an object with \"text\"; prints one line of ids each\n"
    "  --no-special  no BOS/EOS from the template (encode); keep special tokens out of the text (decode)\n"
    "  --stats   prints bytes, tokens and MB/s to stderr\n"
    "  --offsets with --jsonl: after each line of ids, a line of their byte offsets (begin end begin end ...)\n"
    "  --onig-only  every Split regex on Oniguruma, also Llama 3's and Qwen2's (hand-written by default)\n"
    "  --threads N  (one text) as a .txt dataset: cut at line starts where the ids stay exact and encoded on N\n"
    "               threads (0: every core); no BOS/EOS\n";

namespace {

void print_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// stdin is a stream, read with bounds: all of it (text, ids) at most kMaxStdin bytes, a --jsonl line at most
// kMaxLine (`< /dev/zero` was read until memory ran out).
constexpr size_t kMaxStdin = size_t(256) << 20, kMaxLine = size_t(64) << 20;

std::string read_stdin() {
  std::string s;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) {
    if (s.size() + n > kMaxStdin)
      throw ConfigError("stdin: more than 256 MiB; split the input (or pass --jsonl lines)", "stdin", "input");
    s.append(buf, n);
  }
  return s;
}

// The next line of stdin without its newline; false at the end.
bool read_line(std::string& line, long n) {
  line.clear();
  for (int ch; (ch = getc_unlocked(stdin)) != EOF;) {
    if (ch == '\n') return true;
    if (line.size() >= kMaxLine)
      throw ConfigError(fmt::format("stdin line {}: longer than 64 MiB", n), "stdin", "line");
    line.push_back(char(ch));
  }
  return !line.empty();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cli::Args a(argc, argv, {"tokenizer", "threads"},
                {"decode", "jsonl", "no-special", "stats", "offsets", "onig-only", "help"});
    if (a.has("help") || !a.has("tokenizer") || !a.positional().empty()) {
      std::fputs(kUsage, a.has("help") ? stdout : stderr);
      return a.has("help") ? 0 : 2;
    }
    text::Tokenizer tok = text::Tokenizer::load(a.str("tokenizer"), !a.has("onig-only"));
    const bool special = !a.has("no-special");
    std::ios::sync_with_stdio(false);
    if (a.has("decode")) {
      std::vector<int32_t> ids;
      // Each word whole: `>> long` would stop at an id too large for a long and leave the rest unread.
      std::istringstream in(read_stdin());
      for (std::string w; in >> w;) {
        long long v = 0;
        const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
        if (end != w.data() + w.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
          throw ConfigError(
              fmt::format("stdin: '{}' is not an integer id (expected whitespace-separated ids)", w.substr(0, 40)),
              "stdin", "ids");
        if (ec == std::errc::result_out_of_range || v < 0 || v >= tok.vocab_size())
          throw ConfigError(
              fmt::format("stdin: id {} is outside the vocabulary [0, {})", w.substr(0, 40), tok.vocab_size()), "stdin",
              "ids");
        ids.push_back(int32_t(v));
      }
      std::string s = tok.decode(ids, !special);
      std::fwrite(s.data(), 1, s.size(), stdout);
      return 0;
    }
    size_t bytes = 0, tokens = 0;
    auto t0 = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> t1;  // --threads: the encoding's end (printing left out)
    std::vector<int32_t> ids;
    if (a.has("jsonl")) {
      long n = 0;
      for (std::string line; read_line(line, n + 1);) {
        ++n;
        nlohmann::json j;
        if (auto deep = json_nesting_error(line))
          throw ConfigError(fmt::format("stdin line {}: {}", n, *deep), "stdin", "line");
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          throw ConfigError(fmt::format("stdin line {}: invalid JSON: {}", n, e.what()), "stdin", "line");
        }
        const nlohmann::json* t = j.is_object() && j.contains("text") ? &j["text"] : &j;
        if (!t->is_string())
          throw ConfigError(fmt::format("stdin line {}: expected a JSON string or {{\"text\": string}}", n), "stdin",
                            "text");
        const std::string& s = t->get_ref<const std::string&>();
        bytes += s.size();
        if (a.has("offsets")) {
          text::Encoding e = tok.encode_with_offsets(s, special);
          tokens += e.ids.size();
          print_ids(e.ids);
          std::vector<int32_t> flat;
          for (auto [b, end] : e.offsets) {
            flat.push_back(int32_t(b));
            flat.push_back(int32_t(end));
          }
          print_ids(flat);
          continue;
        }
        ids.clear();
        tok.encode_append(s, special, ids);
        tokens += ids.size();
        print_ids(ids);
      }
    } else if (a.has("threads")) {
      const std::string s = read_stdin();
      t0 = std::chrono::steady_clock::now();  // the encoding alone (not reading, not printing)
      const long threads = a.integer("threads", 0);
      if (threads < 0 || threads > 1024)
        throw ConfigError(fmt::format("--threads {}: expected 0 (every core) to 1024", threads), "command line",
                          "threads");
      ids = encode_text(tok, s, int(threads));
      t1 = std::chrono::steady_clock::now();
      bytes = s.size();
      tokens = ids.size();
      print_ids(ids);
      if (a.has("stats") && !tok.cut_refusal().empty())
        std::fprintf(stderr, "one thread: the tokenizer cannot be cut exactly (%s)\n", tok.cut_refusal().c_str());
    } else {
      const std::string s = read_stdin();
      tok.encode_append(s, special, ids);
      bytes = s.size();
      tokens = ids.size();
      print_ids(ids);
    }
    if (a.has("stats")) {
      double sec = std::chrono::duration<double>(t1.value_or(std::chrono::steady_clock::now()) - t0).count();
      std::fprintf(stderr, "%zu bytes -> %zu tokens in %.3f s: %.2f MB/s, %.0f tokens/s\n", bytes, tokens, sec,
                   sec > 0 ? double(bytes) / sec / 1e6 : 0.0, sec > 0 ? double(tokens) / sec : 0.0);
    }
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-tokenize: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-tokenize: error: %s\n", e.what());
    return 1;
  }
}
