// Regexes as Hugging Face tokenizers runs them: Oniguruma (its SysRegex), Ruby syntax, UTF-8, and
// the iteration of the onig crate's find_iter. Internal to text/.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

struct Span {
  uint32_t begin, end;  // bytes, [begin, end)
};

class Regex {
 public:
  // The compiled pattern, or null with *error set to Oniguruma's message.
  static std::unique_ptr<Regex> compile(std::string_view pattern, std::string* error);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the matches in s (valid UTF-8) left to right: each search starts where the last match
  // ended (lookbehind sees the whole string); an empty match right after the last match is skipped
  // by one character (the onig crate's FindMatches). Safe on several threads at once.
  void find_all(std::string_view s, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  void* reg_ = nullptr;  // OnigRegex
  std::string pattern_;
};

}  // namespace strata::text
