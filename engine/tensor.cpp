#include "engine/tensor.h"

#include <fmt/format.h>

namespace strata {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < nd; ++i) s += fmt::format("{}{}", i ? ", " : "", d[i]);
  return s + "]";
}

}  // namespace strata
