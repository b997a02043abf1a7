// expect_config_error(json, field, words): parses `json` as config.json and expects a ConfigError naming the file,
// `field` and each of `words`. Shared by the config.json tests (io_config_test, io_rope_config_test).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/error.h"
#include "io/hf_config.h"
#include "tests/cpu/expect_error.h"

namespace strata::test_util {

// Parses `json` as "some/dir/config.json"; expects a ConfigError naming the file and `field`.
inline void expect_config_error(const std::string& json, const std::string& field,
                                std::vector<std::string> words = {}) {
  const std::string path = "some/dir/config.json";
  auto e = catch_as<ConfigError>([&] { io::parse_llama_config(json, path); });
  if (!e) return;
  EXPECT_EQ(e->file, path);
  EXPECT_EQ(e->field, field) << e->what();
  const std::string what = e->what();
  EXPECT_NE(what.find(path), std::string::npos) << what;
  words.push_back(field);
  for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
}

}  // namespace strata::test_util
