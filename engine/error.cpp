#include "engine/error.h"

#include <fmt/format.h>

#include <cstring>

namespace strata::detail {

std::string where(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return fmt::format("{}:{}", base ? base + 1 : file, line);
}

void check_failed(const char* stmt, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} (check failed: {}) [{}]", msg, stmt, where(file, line)));
}

}  // namespace strata::detail
