// What a strata::Device holds: the engine's backend and the name it was made under.
#pragma once
#include <memory>
#include <string>

#include "engine/backend.h"
#include "strata/strata.h"

namespace strata {

struct Device::Impl {
  std::string backend;  // "cpu", "cuda" or "sim"
  std::unique_ptr<Backend> be;
};

}  // namespace strata
