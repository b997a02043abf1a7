// config.json's rope types beside default and llama3 (linear, dynamic, yarn, longrope): their fields from
// rope_scaling (transformers 4) and rope_parameters (transformers 5) with transformers 5's defaults, the round trip
// through llama_config_to_json, and errors that name the file, the field and what was expected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/error.h"
#include "io/hf_config.h"
#include "tests/cpu/config_error.h"
#include "tests/cpu/expect_error.h"

namespace strata::io {
namespace {

using strata::test_util::catch_as;
using strata::test_util::expect_config_error;

// head_dim 64 / 4 = 16: longrope's factor lists take 8 entries.
const char* kBase = R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 4096)";

std::string with(const std::string& rope) {
  return std::string(kBase) + ", " + rope + "}";
}

const char* kShort = "[1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]";
const char* kLong = "[1.5, 3.0, 7.25, 16.0, 20.0, 24.5, 30.0, 33.125]";

std::string block(const std::string& name, const std::string& body) {
  return "\"" + name + "\": {" + body + "}";
}

TEST(io_rope_config, ReadsEachTypeFromEitherBlock) {
  for (const char* b : {"rope_scaling", "rope_parameters"}) {
    SCOPED_TRACE(b);
    LlamaConfig c = parse_llama_config(with(block(b, R"("rope_type": "linear", "factor": 2.5)")), "config.json");
    EXPECT_EQ(c.rope_scaling.type, RopeType::linear);
    EXPECT_EQ(c.rope_scaling.factor, 2.5);

    c = parse_llama_config(with(block(b, R"("type": "dynamic", "factor": 3)")), "config.json");
    EXPECT_EQ(c.rope_scaling.type, RopeType::dynamic);
    EXPECT_EQ(c.rope_scaling.factor, 3.0);

    // Qwen2.5's long-context yarn block; original_max_position_embeddings as given.
    c = parse_llama_config(with(block(b, R"("rope_type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 32768)")),
                           "config.json");
    EXPECT_EQ(c.rope_scaling.type, RopeType::yarn);
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
    EXPECT_EQ(c.rope_scaling.attention_factor, 0.0);  // derived
    EXPECT_TRUE(c.rope_scaling.truncate);

    c = parse_llama_config(with(block(b, R"("rope_type": "yarn", "factor": 8, "beta_fast": 16, "beta_slow": 0.5,
        "mscale": 0.707, "mscale_all_dim": 1.0, "attention_factor": 1.25, "truncate": false)")),
                           "config.json");
    EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
    EXPECT_EQ(c.rope_scaling.beta_slow, 0.5);
    EXPECT_EQ(c.rope_scaling.mscale, 0.707);
    EXPECT_EQ(c.rope_scaling.mscale_all_dim, 1.0);
    EXPECT_EQ(c.rope_scaling.attention_factor, 1.25);
    EXPECT_FALSE(c.rope_scaling.truncate);
    // transformers 5 defaults original_max_position_embeddings to max_position_embeddings.
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);

    c = parse_llama_config(
        with(block(b, std::string(R"("rope_type": "longrope", "short_factor": )") + kShort + R"(, "long_factor": )" +
                          kLong + R"(, "original_max_position_embeddings": 1024)")),
        "config.json");
    EXPECT_EQ(c.rope_scaling.type, RopeType::longrope);
    EXPECT_EQ(c.rope_scaling.factor, 0.0);  // absent: max_position_embeddings / original
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 1024);
    EXPECT_EQ(c.rope_scaling.short_factor, (std::vector<float>{1.0f, 1.25f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f}));
    EXPECT_EQ(c.rope_scaling.long_factor.back(), 33.125f);
  }
}

TEST(io_rope_config, RoundTripsEachType) {
  const std::string bodies[] = {
      R"("rope_type": "linear", "factor": 1.1)",
      R"("rope_type": "dynamic", "factor": 2.0)",
      R"("rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768)",
      R"("rope_type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8,
         "original_max_position_embeddings": 4096, "truncate": false)",
      R"("rope_type": "yarn", "factor": 2.0, "attention_factor": 1.0625, "truncate": null)",
      std::string(R"("rope_type": "longrope", "short_factor": )") + kShort + R"(, "long_factor": )" + kLong +
          R"(, "factor": 32.0, "attention_factor": 1.19, "original_max_position_embeddings": 128)",
      std::string(R"("rope_type": "longrope", "short_factor": )") + kShort + R"(, "long_factor": )" + kLong,
      R"("rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192)",
  };
  for (const std::string& body : bodies) {
    for (const char* b : {"rope_scaling", "rope_parameters"}) {
      SCOPED_TRACE(body + " in " + b);
      const LlamaConfig c = parse_llama_config(with(block(b, body)), "config.json");
      EXPECT_NE(c.rope_scaling.type, RopeType::plain);
      const std::string text = llama_config_to_json(c);
      const LlamaConfig r = parse_llama_config(text, "out/config.json");
      EXPECT_EQ(r.rope_scaling, c.rope_scaling) << text;
      EXPECT_EQ(llama_config_to_json(r), text);
    }
  }
  // truncate: null is Python's None, which transformers takes as false.
  const LlamaConfig n =
      parse_llama_config(with(block("rope_scaling", R"("rope_type": "yarn", "factor": 2, "truncate": null)")), "c");
  EXPECT_FALSE(n.rope_scaling.truncate);
}

TEST(io_rope_config, RequiredFields) {
  expect_config_error(with(block("rope_scaling", R"("rope_type": "yarn", "original_max_position_embeddings": 8)")),
                      "rope_scaling.factor", {"rope_type yarn requires"});
  expect_config_error(with(block("rope_parameters", R"("rope_type": "linear", "rope_theta": 10000.0)")),
                      "rope_parameters.factor", {"rope_type linear requires"});
  expect_config_error(with(block("rope_scaling", R"("type": "dynamic")")), "rope_scaling.factor");
  expect_config_error(with(block("rope_scaling", std::string(R"("rope_type": "longrope", "long_factor": )") + kLong)),
                      "rope_scaling.short_factor", {"requires"});
  expect_config_error(with(block("rope_scaling", std::string(R"("rope_type": "longrope", "short_factor": )") + kShort)),
                      "rope_scaling.long_factor", {"requires"});
}

TEST(io_rope_config, BadValues) {
  // A factor below 1 (transformers: "must be a float or int >= 1").
  for (const char* type : {"linear", "dynamic", "yarn", "longrope"}) {
    std::string body = std::string(R"("rope_type": ")") + type + R"(", "factor": 0.5)";
    if (std::string(type) == "longrope")
      body += std::string(R"(, "short_factor": )") + kShort + R"(, "long_factor": )" + kLong;
    expect_config_error(with(block("rope_scaling", body)), "rope_scaling.factor", {"0.5", "a number >= 1"});
  }
  expect_config_error(with(block("rope_scaling", R"("rope_type": "linear", "factor": "2")")), "rope_scaling.factor",
                      {"\"2\"", "a number >= 1"});
  // longrope's lists: head_dim/2 = 8 positive numbers.
  expect_config_error(
      with(block("rope_scaling",
                 std::string(R"("rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": )") + kLong)),
      "rope_scaling.short_factor", {"2 entries", "head_dim/2 = 8"});
  expect_config_error(with(block("rope_parameters", std::string(R"("rope_type": "longrope", "short_factor": )") +
                                                        kShort + R"(, "long_factor": [1, 2, 3, 4, 5, 6, 7, 8, 9])")),
                      "rope_parameters.long_factor", {"9 entries", "head_dim/2 = 8"});
  expect_config_error(with(block("rope_scaling", std::string(R"("rope_type": "longrope", "short_factor": )") + kShort +
                                                     R"(, "long_factor": [1, 2, 3, 0, 5, 6, 7, 8])")),
                      "rope_scaling.long_factor", {"holds 0", "positive numbers"});
  expect_config_error(with(block("rope_scaling", std::string(R"("rope_type": "longrope", "short_factor": 2.0, )") +
                                                     R"("long_factor": )" + kLong)),
                      "rope_scaling.short_factor", {"list of head_dim/2 = 8"});
  // yarn's attention factor, ramp bounds and truncate.
  expect_config_error(with(block("rope_scaling", R"("rope_type": "yarn", "factor": 4, "attention_factor": 0)")),
                      "rope_scaling.attention_factor", {"a positive number"});
  expect_config_error(
      with(block("rope_scaling", R"("rope_type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 2)")),
      "rope_scaling.beta_fast", {"beta_fast >= beta_slow"});
  expect_config_error(with(block("rope_scaling", R"("rope_type": "yarn", "factor": 4, "truncate": "no")")),
                      "rope_scaling.truncate", {"a boolean"});
  expect_config_error(
      with(block("rope_scaling", R"("rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0)")),
      "rope_scaling.original_max_position_embeddings", {"[1, 16777216]"});
  // strata rotates the whole head.
  expect_config_error(
      with(block("rope_parameters", R"("rope_type": "linear", "factor": 2, "partial_rotary_factor": 0.5)")),
      "rope_parameters.partial_rotary_factor", {"expected 1"});
}

}  // namespace
}  // namespace strata::io
