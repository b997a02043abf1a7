#include "engine/json_limits.h"

#include <fmt/format.h>

namespace strata {

std::optional<std::string> json_nesting_error(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\')
        ++i;  // the escaped character, `\"` included
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth)
        return fmt::format("JSON nested deeper than {} levels (at byte {}; strata reads at most {})", max_depth, i,
                           max_depth);
    } else if (ch == ']' || ch == '}') {
      if (depth > 0) --depth;  // unbalanced text is the parser's to reject
    }
  }
  return std::nullopt;
}

}  // namespace strata
