// libFuzzer target: strata-train's YAML config (axolotl keys) through apply_yaml_text. Only a
// strata::Error (a ConfigError naming the file and key) is a clean rejection: a yaml-cpp exception
// escaping is a finding.
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "model/run/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  TrainConfig cfg;
  try {
    apply_yaml_text(cfg, std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const Error&) {
  }
  return 0;
}
