// config.json parsing: both rope styles, llama3 values, HF defaults, and errors naming the field.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "tests/cpu/config_error.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/fifo_util.h"

namespace strata::io {
namespace {

// Llama-3.2-1B's config.json (transformers 4 style).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kMinimal = R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "vocab_size": 100})";

using strata::test_util::catch_as;
using strata::test_util::expect_config_error;

// kMinimal plus `extra` (`"key": value, ...`, keys not already in kMinimal).
std::string minimal_with(const std::string& extra) {
  std::string s = kMinimal;
  return s.substr(0, s.size() - 1) + ", " + extra + "}";
}

TEST(io_config, Transformers4StyleLlama3) {
  LlamaConfig c = parse_llama_config(kLlama32_1B, "config.json");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeType::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(io_config, Transformers4LegacyTypeKey) {
  LlamaConfig c = parse_llama_config(minimal_with(R"("rope_scaling": {"type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                                     "config.json");
  EXPECT_EQ(c.rope_scaling.type, RopeType::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
}

TEST(io_config, Transformers5RopeParameters) {
  LlamaConfig c = parse_llama_config(minimal_with(R"("dtype": "bfloat16", "rope_parameters": {
      "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                                     "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeType::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.torch_dtype, "bfloat16");

  LlamaConfig d = parse_llama_config(
      minimal_with(R"("rope_parameters": {"rope_type": "default", "rope_theta": 250000.0})"), "config.json");
  EXPECT_EQ(d.rope_theta, 250000.0f);
  EXPECT_EQ(d.rope_scaling.type, RopeType::plain);
}

TEST(io_config, DefaultsFollowTransformers) {
  LlamaConfig c = parse_llama_config(kMinimal, "config.json");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeType::plain);
  EXPECT_EQ(c.torch_dtype, "float32");

  LlamaConfig n = parse_llama_config(minimal_with(R"("head_dim": null, "rope_scaling": null)"), "config.json");
  EXPECT_EQ(n.head_dim, 16) << "explicit null head_dim means the default";
  LlamaConfig r = parse_llama_config(minimal_with(R"("rope_scaling": {"rope_type": "default"})"), "config.json");
  EXPECT_EQ(r.rope_scaling.type, RopeType::plain);
}

TEST(io_config, MissingRequiredField) {
  expect_config_error(R"({"intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "vocab_size": 100})",
                      "hidden_size", {"missing required field 'hidden_size' (expected a positive integer)"});
  expect_config_error(R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4})",
                      "vocab_size", {"missing required field"});
}

TEST(io_config, WrongJsonType) {
  expect_config_error(R"({"hidden_size": "64", "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "vocab_size": 100})",
                      "hidden_size", {"\"64\"", "expected a positive integer"});
  expect_config_error(minimal_with(R"("rms_norm_eps": "1e-5")"), "rms_norm_eps", {"expected a positive number"});
  expect_config_error(minimal_with(R"("tie_word_embeddings": 1)"), "tie_word_embeddings", {"expected a boolean"});
  expect_config_error(minimal_with(R"("head_dim": 16.5)"), "head_dim", {"expected a positive integer"});
  expect_config_error(minimal_with(R"("rope_scaling": "llama3")"), "rope_scaling", {"expected an object"});
}

TEST(io_config, BadValues) {
  expect_config_error(R"({"hidden_size": 0, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "vocab_size": 100})",
                      "hidden_size", {"positive integer"});
  expect_config_error(minimal_with(R"("max_position_embeddings": -5)"), "max_position_embeddings");
  expect_config_error(minimal_with(R"("head_dim": 15)"), "head_dim", {"even"});
  // Positive as a double, but 0 or inf as the float it is stored in.
  expect_config_error(minimal_with(R"("rms_norm_eps": 1e-50)"), "rms_norm_eps", {"float range"});
  expect_config_error(minimal_with(R"("rope_theta": 1e300)"), "rope_theta", {"float range"});
  expect_config_error(minimal_with(R"("model_type": "gemma")"), "model_type", {"'gemma'", "'llama'", "'qwen3'"});
  expect_config_error(minimal_with(R"("model_type": "mistral", "sliding_window": -1)"), "sliding_window");
  expect_config_error(minimal_with(R"("model_type": "qwen2", "sliding_window": 64, "layer_types": "full")"),
                      "layer_types", {"array"});
  expect_config_error("{not json", "json", {"invalid JSON"});
}

// Qwen3-8B's config.json as transformers 5 writes it (abridged to the fields it has).
const char* kQwen3_8B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 12288, "layer_types": ["full_attention", "full_attention"],
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32,
  "num_hidden_layers": 2, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": false, "dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

TEST(io_config, ArchitecturesAndTheirPieces) {
  LlamaConfig q3 = parse_llama_config(kQwen3_8B, "config.json");
  EXPECT_EQ(q3.arch, Arch::qwen3);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias || q3.o_bias || q3.mlp_bias);
  EXPECT_EQ(q3.sliding_window, 0);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.rope_theta, 1e6f);
  // Qwen3's head_dim defaults to 128 whatever hidden / heads is; the others derive it.
  EXPECT_EQ(parse_llama_config(minimal_with(R"("model_type": "qwen3")"), "c").head_dim, 128);
  EXPECT_EQ(parse_llama_config(minimal_with(R"("model_type": "qwen2")"), "c").head_dim, 16);
  LlamaConfig q3b = parse_llama_config(minimal_with(R"("model_type": "qwen3", "attention_bias": true)"), "c");
  EXPECT_TRUE(q3b.qkv_bias && q3b.o_bias && q3b.qk_norm);
  LlamaConfig q2 = parse_llama_config(minimal_with(R"("model_type": "qwen2", "sliding_window": 4096)"), "c");
  EXPECT_TRUE(q2.qkv_bias);  // Qwen2Attention: q, k, v biases always, none on o
  EXPECT_FALSE(q2.o_bias || q2.qk_norm);
  EXPECT_EQ(q2.sliding_window, 0);  // use_sliding_window absent: false
  LlamaConfig q2w = parse_llama_config(
      minimal_with(R"("model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": true)"), "c");
  EXPECT_EQ(q2w.sliding_window, 4096);
  LlamaConfig q2l =
      parse_llama_config(minimal_with(R"("model_type": "qwen2", "sliding_window": 512, "use_sliding_window": true,
                      "layer_types": ["full_attention", "full_attention"])"),
                         "c");
  EXPECT_EQ(q2l.sliding_window, 0);  // layer_types says which layers window, and none does
  LlamaConfig mi = parse_llama_config(minimal_with(R"("model_type": "mistral", "sliding_window": 4096)"), "c");
  EXPECT_EQ(mi.arch, Arch::mistral);
  EXPECT_EQ(mi.sliding_window, 4096);
  EXPECT_FALSE(mi.qkv_bias || mi.o_bias || mi.qk_norm);
  EXPECT_EQ(parse_llama_config(minimal_with(R"("model_type": "mistral", "sliding_window": null)"), "c").sliding_window,
            0);
  LlamaConfig ll = parse_llama_config(minimal_with(R"("attention_bias": true, "mlp_bias": true)"), "c");
  EXPECT_TRUE(ll.qkv_bias && ll.o_bias && ll.mlp_bias);
  EXPECT_FALSE(ll.qk_norm);
  // Biases and q/k norms count: Qwen3's two [head_dim] norms per layer.
  LlamaConfig plain = q3;
  plain.qk_norm = false;
  EXPECT_EQ(llama_parameter_count(q3) - llama_parameter_count(plain), uint64_t(2 * 2 * 128));
}

TEST(io_config, ArchitecturesRoundTripWithTheirOwnFields) {
  for (const std::string& text :
       {std::string(kQwen3_8B), minimal_with(R"("model_type": "qwen2", "bos_token_id": 7, "sliding_window": 4096,
                                                 "use_sliding_window": true, "max_window_layers": 1)"),
        minimal_with(R"("model_type": "mistral", "sliding_window": 4096, "eos_token_id": 2)"),
        minimal_with(R"("model_type": "qwen3", "attention_bias": true)")}) {
    LlamaConfig c = parse_llama_config(text, "config.json");
    const std::string out = llama_config_to_json(c);
    LlamaConfig r = parse_llama_config(out, "out/config.json");
    EXPECT_EQ(r.arch, c.arch) << out;
    EXPECT_EQ(r.qkv_bias, c.qkv_bias);
    EXPECT_EQ(r.o_bias, c.o_bias);
    EXPECT_EQ(r.qk_norm, c.qk_norm);
    EXPECT_EQ(r.sliding_window, c.sliding_window) << out;
    EXPECT_EQ(r.head_dim, c.head_dim);
    EXPECT_EQ(r.passthrough_json, c.passthrough_json) << out;
    EXPECT_NE(out.find(fmt::format(R"("model_type": "{}")", arch_model_type(c.arch))), std::string::npos) << out;
    EXPECT_NE(out.find(arch_architecture(c.arch)), std::string::npos) << out;
  }
  // The source's other fields survive: token ids, max_window_layers, layer_types.
  const std::string out = llama_config_to_json(parse_llama_config(kQwen3_8B, "config.json"));
  for (const char* f :
       {R"("bos_token_id": 151643)", R"("eos_token_id": 151645)", R"("max_window_layers": 36)", R"("layer_types")"})
    EXPECT_NE(out.find(f), std::string::npos) << f << " not in " << out;
}

TEST(io_config, GqaDivisibility) {
  expect_config_error(R"({"hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 6, "num_key_value_heads": 4, "vocab_size": 100})",
                      "num_key_value_heads", {"num_attention_heads 6", "num_key_value_heads 4"});
}

TEST(io_config, UnsupportedRopeType) {
  const std::vector<std::string> every = {"'su'", "default, linear, dynamic, yarn, longrope or llama3"};
  expect_config_error(minimal_with(R"("rope_scaling": {"rope_type": "su", "factor": 4.0})"), "rope_scaling.rope_type",
                      every);
  expect_config_error(minimal_with(R"("rope_scaling": {"type": "mrope", "factor": 4.0})"), "rope_scaling.rope_type",
                      {"'mrope'"});
  expect_config_error(minimal_with(R"("rope_parameters": {"rope_type": "proportional", "rope_theta": 1e6})"),
                      "rope_parameters.rope_type", {"'proportional'", "longrope"});
}

TEST(io_config, Llama3RequiresItsParameters) {
  expect_config_error(minimal_with(R"("rope_scaling": {"rope_type": "llama3", "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                      "rope_scaling.factor");
}

TEST(io_config, RoundTripThroughJson) {
  LlamaConfig a = parse_llama_config(kLlama32_1B, "config.json");
  LlamaConfig b = parse_llama_config(kMinimal, "config.json");
  b.rms_norm_eps = 1e-5f;
  b.rope_theta = 123456.0f;
  b.num_key_value_heads = 2;
  b.head_dim = 32;
  b.torch_dtype = "float16";
  for (const LlamaConfig& c : {a, b}) {
    std::string text = llama_config_to_json(c);
    EXPECT_NE(text.find(R"("model_type": "llama")"), std::string::npos) << text;
    EXPECT_NE(text.find("LlamaForCausalLM"), std::string::npos) << text;
    LlamaConfig r = parse_llama_config(text, "out/config.json");
    EXPECT_EQ(r.hidden_size, c.hidden_size);
    EXPECT_EQ(r.intermediate_size, c.intermediate_size);
    EXPECT_EQ(r.num_hidden_layers, c.num_hidden_layers);
    EXPECT_EQ(r.num_attention_heads, c.num_attention_heads);
    EXPECT_EQ(r.num_key_value_heads, c.num_key_value_heads);
    EXPECT_EQ(r.head_dim, c.head_dim);
    EXPECT_EQ(r.vocab_size, c.vocab_size);
    EXPECT_EQ(r.max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(r.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(r.rope_theta, c.rope_theta);
    EXPECT_EQ(r.rope_scaling, c.rope_scaling);
    EXPECT_EQ(r.rope_scaling.factor, c.rope_scaling.factor);
    EXPECT_EQ(r.rope_scaling.low_freq_factor, c.rope_scaling.low_freq_factor);
    EXPECT_EQ(r.rope_scaling.high_freq_factor, c.rope_scaling.high_freq_factor);
    EXPECT_EQ(r.rope_scaling.original_max_position_embeddings, c.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(r.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(r.torch_dtype, c.torch_dtype);
  }
  // Floats are written in their shortest form, as HF writes them.
  EXPECT_NE(llama_config_to_json(a).find(R"("rms_norm_eps": 1e-05)"), std::string::npos) << llama_config_to_json(a);
}

TEST(io_config, ReadFromFileOrDirectory) {
  std::string dir = ::testing::TempDir() + "strata_cfg_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  write_file_atomic(dir + "/config.json", kLlama32_1B);
  EXPECT_EQ(read_llama_config(dir).hidden_size, 2048);
  EXPECT_EQ(read_llama_config(dir + "/config.json").vocab_size, 128256);

  write_file_atomic(dir + "/config.json", R"({"hidden_size": 64})");
  auto e = catch_as<ConfigError>([&] { read_llama_config(dir); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, dir + "/config.json");

  auto io = catch_as<IoError>([&] { read_llama_config(dir + "/missing/config.json"); });
  ASSERT_TRUE(io);
  EXPECT_EQ(io->file, dir + "/missing/config.json");
}

// Every size is bounded before anything is built from it: `num_hidden_layers: 2147483647` used to
// reach llama_weight_shapes and get the process killed for memory.
TEST(io_config, SizesAreBounded) {
  using L = LlamaConfigLimits;
  expect_config_error(R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2147483647,
                          "num_attention_heads": 4, "vocab_size": 100})",
                      "num_hidden_layers", {"2147483647", "[1, 1024]"});
  struct Case {
    const char* field;
    int max;
  };
  for (Case k : {Case{"hidden_size", L::kMaxHidden}, Case{"intermediate_size", L::kMaxIntermediate},
                 Case{"num_hidden_layers", L::kMaxLayers}, Case{"num_attention_heads", L::kMaxHeads},
                 Case{"vocab_size", L::kMaxVocab}}) {
    std::string json = kMinimal;
    std::string key = std::string("\"") + k.field + "\": ";
    size_t at = json.find(key) + key.size();
    json.replace(at, json.find_first_of(",}", at) - at, std::to_string(int64_t(k.max) + 1));
    expect_config_error(json, k.field, {"[1, " + std::to_string(k.max) + "]"});
  }
  expect_config_error(minimal_with(R"("num_key_value_heads": 4294967296)"), "num_key_value_heads", {"[1, 1024]"});
  expect_config_error(minimal_with(R"("head_dim": 2048)"), "head_dim", {"[1, 1024]"});
  expect_config_error(minimal_with(R"("max_position_embeddings": 16777217)"), "max_position_embeddings",
                      {"[1, 16777216]"});
  expect_config_error(minimal_with(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 99999999999})"),
                      "rope_scaling.original_max_position_embeddings", {"[1, 16777216]"});
  // hidden 65536 with 1 head would give an unbounded derived head_dim.
  expect_config_error(R"({"hidden_size": 65536, "intermediate_size": 128, "num_hidden_layers": 1,
                          "num_attention_heads": 1, "vocab_size": 100})",
                      "head_dim", {"65536", "1024"});
}

TEST(io_config, TotalParameterCountIsBounded) {
  // Each field within its bound, the whole over 2e12 parameters (1024 layers of 3 x 65536 x 262144).
  expect_config_error(R"({"hidden_size": 65536, "intermediate_size": 262144, "num_hidden_layers": 1024,
                          "num_attention_heads": 128, "vocab_size": 100})",
                      "parameters", {"over the limit of 2000000000000", "1024 layers"});
  // Llama-3.2-1B has 1,235,814,400 parameters (tied embeddings); untied adds the lm_head.
  LlamaConfig c = parse_llama_config(kLlama32_1B, "config.json");
  EXPECT_EQ(llama_parameter_count(c), 1235814400u);
  c.tie_word_embeddings = false;
  EXPECT_EQ(llama_parameter_count(c), 1235814400u + 128256u * 2048u);
  // Llama-3.1-405B's shape is well inside the limits.
  LlamaConfig big = parse_llama_config(R"({"hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
      "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256})",
                                       "config.json");
  EXPECT_GT(llama_parameter_count(big), 400'000'000'000u);
  EXPECT_LT(llama_parameter_count(big), 410'000'000'000u);
}

TEST(io_config, FifoIsRefusedWithoutBlocking) {
  std::string dir = ::testing::TempDir() + "strata_cfg_fifo_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  test_util::expect_refuses_fifo(dir + "/config.json", [&] { read_llama_config(dir); });
  test_util::expect_refuses_fifo(dir + "/other.json", [&] { read_llama_config(dir + "/other.json"); });
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace strata::io
