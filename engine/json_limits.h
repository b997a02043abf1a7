// Limits on untrusted JSON before it reaches nlohmann::json, whose DOM is copied, compared and
// dumped recursively: 100k nested brackets overflow the stack. Every JSON reader (config.json,
// the safetensors header and index, tokenizer.json, tokenizer_config.json, a dataset line, a
// device profile) scans the text first and refuses anything nested deeper than kMaxJsonDepth.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// The deepest nesting of arrays and objects strata reads. Real files nest a handful of levels
// (tokenizer.json's Sequence normalizers about 5, chat messages 4).
inline constexpr int kMaxJsonDepth = 128;

// Scans `text` for `[`/`{` nesting, skipping string literals (escapes included); no allocation.
// Returns nullopt within `max_depth`, else a message such as
// "JSON nested deeper than 128 levels (at byte 129; strata reads at most 128)", for the caller
// to throw with the file's name and its own error type.
std::optional<std::string> json_nesting_error(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace strata
