#include "io/hf_config.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "engine/error.h"
#include "engine/json_limits.h"
#include "engine/names.h"
#include "io/regular_file.h"

namespace strata::io {
namespace {

using json = nlohmann::json;
constexpr size_t kMaxConfigBytes = size_t(16) << 20;  // HF configs are a few KiB

// Field access with errors that name the file and the (dotted) field.
struct Reader {
  const std::string& path;

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    STRATA_THROW(ConfigError, fmt::format("{}: {}", path, msg), path, field);
  }
  [[noreturn]] void wrong_type(const std::string& field, const json& v, const char* expected) const {
    fail(field, fmt::format("field '{}' is {} ({}), expected {}", field, v.dump(), v.type_name(), expected));
  }
  // nullptr when absent or null (HF writes explicit nulls for defaults, e.g. head_dim).
  static const json* get(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  // An integer in [1, max]; a default is used as is (callers bound derived defaults themselves).
  int positive_int(const json& obj, const char* key, const std::string& field, const int* dflt, int max) const {
    const json* v = get(obj, key);
    if (!v) {
      if (dflt) return *dflt;
      fail(field, fmt::format("missing required field '{}' (expected a positive integer)", field));
    }
    if (!v->is_number_integer()) wrong_type(field, *v, "a positive integer");
    // Parsed non-negative integers are unsigned, negative ones signed.
    bool ok = v->is_number_unsigned() && v->get<uint64_t>() - 1 < uint64_t(max);
    if (!ok)
      fail(field, fmt::format("field '{}' is {}, expected a positive integer in [1, {}]", field, v->dump(), max));
    return v->get<int>();
  }

  float positive_float(const json& obj, const char* key, const std::string& field, float dflt) const {
    const json* v = get(obj, key);
    if (!v) return dflt;
    if (!v->is_number()) wrong_type(field, *v, "a positive number");
    // Checked as the float it becomes: 1e-50 would round to 0 and 1e300 to inf.
    float f = float(v->get<double>());
    if (!(f > 0) || !std::isfinite(f))
      fail(field, fmt::format("field '{}' is {}, expected a positive number within float range", field, v->dump()));
    return f;
  }

  bool boolean(const json& obj, const char* key, bool dflt) const {
    const json* v = get(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) wrong_type(key, *v, "a boolean");
    return v->get<bool>();
  }

  const json* string(const json& obj, const char* key, const std::string& field) const {
    const json* v = get(obj, key);
    if (v && !v->is_string()) wrong_type(field, *v, "a string");
    return v;
  }
};

constexpr EnumName<RopeType> kRopeTypes[] = {{RopeType::plain, "default"},     {RopeType::linear, "linear"},
                                             {RopeType::dynamic, "dynamic"},   {RopeType::yarn, "yarn"},
                                             {RopeType::longrope, "longrope"}, {RopeType::llama3, "llama3"}};

// A number of a rope block as the Python float transformers reads; absent or null: `dflt`.
double rope_number(const Reader& r, const json& rope, const char* key, const std::string& block, double dflt,
                   double min, bool min_inclusive, const char* expected) {
  const json* v = Reader::get(rope, key);
  if (!v) return dflt;
  const std::string field = block + "." + key;
  if (!v->is_number()) r.wrong_type(field, *v, expected);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || (!min_inclusive && d == min))
    r.fail(field, fmt::format("field '{}' is {}, expected {}", field, v->dump(), expected));
  return d;
}

// longrope's short_factor / long_factor: head_dim/2 positive numbers (float32, as transformers makes its tensor).
std::vector<float> rope_factors(const Reader& r, const json& rope, const char* key, const std::string& block,
                                int head_dim) {
  const std::string field = block + "." + key;
  const json* v = Reader::get(rope, key);
  if (!v) r.fail(field, fmt::format("{}.rope_type longrope requires '{}'", block, field));
  const std::string expected = fmt::format("a list of head_dim/2 = {} positive numbers", head_dim / 2);
  if (!v->is_array()) r.wrong_type(field, *v, expected.c_str());
  if (int(v->size()) != head_dim / 2)
    r.fail(field, fmt::format("field '{}' has {} entries, expected {}", field, v->size(), expected));
  std::vector<float> out;
  for (const json& e : *v) {
    const float f = e.is_number() ? float(e.get<double>()) : 0.0f;
    if (!(f > 0) || !std::isfinite(f))
      r.fail(field, fmt::format("'{}' holds {}, expected {}", field, e.dump(), expected));
    out.push_back(f);
  }
  return out;
}

// Reads a rope block: transformers-4 `rope_scaling` or transformers-5 `rope_parameters`, with transformers 5's
// defaults (original_max_position_embeddings: max_position_embeddings). What transformers only warns about and
// cannot compute sensibly (a factor below 1, factor lists of the wrong length) is refused.
void parse_rope(const Reader& r, const json& rope, const std::string& block, LlamaConfig& c) {
  if (!rope.is_object()) r.wrong_type(block, rope, "an object or null");
  std::string type_key = Reader::get(rope, "rope_type") ? "rope_type" : "type";
  const json* t = r.string(rope, type_key.c_str(), block + "." + type_key);
  const std::string type = t ? t->get<std::string>() : "default";
  const std::optional<RopeType> parsed = parse_name(kRopeTypes, type);
  if (!parsed)
    r.fail(block + ".rope_type",
           fmt::format("unsupported {}.rope_type '{}' (supported: {})", block, type, name_choices(kRopeTypes)));
  RopeScaling s;
  s.type = *parsed;
  if (s.type == RopeType::plain) {
    c.rope_scaling = s;
    return;
  }
  const json* partial = Reader::get(rope, "partial_rotary_factor");
  if (partial && !(partial->is_number() && partial->get<double>() == 1.0))
    r.fail(block + ".partial_rotary_factor",
           fmt::format("field '{}.partial_rotary_factor' is {}, expected 1 (strata rotates the whole head)", block,
                       partial->dump()));
  auto need = [&](const char* key) {
    if (!Reader::get(rope, key))
      r.fail(block + "." + key, fmt::format("{}.rope_type {} requires '{}.{}'", block, type, block, key));
  };
  const char* const at_least_one = "a number >= 1";
  if (s.type != RopeType::longrope) need("factor");
  s.factor = rope_number(r, rope, "factor", block, s.type == RopeType::longrope ? 0.0 : 1.0, 1.0, true, at_least_one);
  const int* max_pos = &c.max_position_embeddings;
  if (s.type == RopeType::llama3) {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) need(k);
    s.low_freq_factor = r.positive_float(rope, "low_freq_factor", block + ".low_freq_factor", 1.0f);
    s.high_freq_factor = r.positive_float(rope, "high_freq_factor", block + ".high_freq_factor", 4.0f);
    if (!(s.high_freq_factor > s.low_freq_factor))
      r.fail(block + ".high_freq_factor", fmt::format("{}.high_freq_factor {} must exceed low_freq_factor {}", block,
                                                      s.high_freq_factor, s.low_freq_factor));
  }
  if (s.type == RopeType::llama3 || s.type == RopeType::yarn || s.type == RopeType::longrope)
    s.original_max_position_embeddings =
        r.positive_int(rope, "original_max_position_embeddings", block + ".original_max_position_embeddings", max_pos,
                       LlamaConfigLimits::kMaxPositions);
  if (s.type == RopeType::yarn || s.type == RopeType::longrope)
    s.attention_factor = rope_number(r, rope, "attention_factor", block, 0.0, 0.0, false, "a positive number");
  if (s.type == RopeType::yarn) {
    s.beta_fast = rope_number(r, rope, "beta_fast", block, 0.0, -HUGE_VAL, true, "a number");
    s.beta_slow = rope_number(r, rope, "beta_slow", block, 0.0, -HUGE_VAL, true, "a number");
    s.mscale = rope_number(r, rope, "mscale", block, 0.0, -HUGE_VAL, true, "a number");
    s.mscale_all_dim = rope_number(r, rope, "mscale_all_dim", block, 0.0, -HUGE_VAL, true, "a number");
    const double fast = s.beta_fast != 0 ? s.beta_fast : 32.0, slow = s.beta_slow != 0 ? s.beta_slow : 1.0;
    if (!(fast > 0 && slow > 0 && fast >= slow))
      r.fail(block + ".beta_fast", fmt::format("{}.beta_fast {} and beta_slow {} must be positive with beta_fast >= "
                                               "beta_slow (defaults 32 and 1)",
                                               block, fast, slow));
    // transformers reads rope_parameters.get("truncate", True): an explicit null is false.
    auto it = rope.find("truncate");
    if (it != rope.end()) {
      if (!it->is_null() && !it->is_boolean()) r.wrong_type(block + ".truncate", *it, "a boolean");
      s.truncate = !it->is_null() && it->get<bool>();
    }
  }
  if (s.type == RopeType::longrope) {
    s.short_factor = rope_factors(r, rope, "short_factor", block, c.head_dim);
    s.long_factor = rope_factors(r, rope, "long_factor", block, c.head_dim);
  }
  c.rope_scaling = s;
}

// Shortest decimal that reads back as the same float (1e-05, not 9.999999747378752e-06).
double clean(float f) {
  return std::stod(fmt::format("{}", f));
}

// The rope block llama_config_to_json writes (null for the default type): what parse_rope reads back.
nlohmann::ordered_json rope_json(const RopeScaling& s) {
  nlohmann::ordered_json j;
  if (s.type == RopeType::plain) return j;
  j["rope_type"] = name_of(kRopeTypes, s.type);
  if (s.factor != 0) j["factor"] = s.factor;
  switch (s.type) {
    case RopeType::llama3:
      j["low_freq_factor"] = clean(s.low_freq_factor);
      j["high_freq_factor"] = clean(s.high_freq_factor);
      break;
    case RopeType::yarn:
      for (auto [key, v] : {std::pair{"beta_fast", s.beta_fast}, std::pair{"beta_slow", s.beta_slow},
                            std::pair{"mscale", s.mscale}, std::pair{"mscale_all_dim", s.mscale_all_dim}})
        if (v != 0) j[key] = v;
      j["truncate"] = s.truncate;
      break;
    case RopeType::longrope: {
      auto list = [](const std::vector<float>& v) {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (float f : v) a.push_back(clean(f));
        return a;
      };
      j["short_factor"] = list(s.short_factor);
      j["long_factor"] = list(s.long_factor);
      break;
    }
    default:
      break;
  }
  if ((s.type == RopeType::yarn || s.type == RopeType::longrope) && s.attention_factor != 0)
    j["attention_factor"] = s.attention_factor;
  if (s.type == RopeType::llama3 || s.type == RopeType::yarn || s.type == RopeType::longrope)
    j["original_max_position_embeddings"] = s.original_max_position_embeddings;
  return j;
}

// The fields llama_config_to_json always writes itself; the rest pass through (the sliding-window
// fields too: layer_types and max_window_layers say more than sliding_window alone).
bool interpreted_field(const std::string& k) {
  static const char* const kFields[] = {"architectures",
                                        "model_type",
                                        "hidden_act",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "vocab_size",
                                        "max_position_embeddings",
                                        "rms_norm_eps",
                                        "rope_theta",
                                        "rope_scaling",
                                        "rope_parameters",
                                        "attention_bias",
                                        "mlp_bias",
                                        "tie_word_embeddings",
                                        "torch_dtype",
                                        "dtype"};
  for (const char* f : kFields)
    if (k == f) return true;
  return false;
}

// Biases, q/k norms and the sliding window, by architecture (as transformers' modeling files use
// them: Qwen2Attention has q/k/v biases always; Qwen3Attention and LlamaAttention take
// attention_bias for q, k, v and o; MistralAttention has none).
void parse_arch_fields(const Reader& r, const json& j, LlamaConfig& c) {
  const bool attention_bias = r.boolean(j, "attention_bias", false);
  switch (c.arch) {
    case Arch::llama:
      c.qkv_bias = c.o_bias = attention_bias;
      c.mlp_bias = r.boolean(j, "mlp_bias", false);
      break;
    case Arch::mistral:
      break;
    case Arch::qwen2:
      c.qkv_bias = true;
      break;
    case Arch::qwen3:
      c.qkv_bias = c.o_bias = attention_bias;
      c.qk_norm = true;
      break;
  }
  if (c.arch == Arch::llama) return;  // LlamaAttention has no window
  int window = 0;
  if (const json* w = Reader::get(j, "sliding_window")) {
    if (!w->is_number_integer() || !w->is_number_unsigned() || w->get<uint64_t>() == 0 ||
        w->get<uint64_t>() > uint64_t(LlamaConfigLimits::kMaxPositions))
      r.fail("sliding_window",
             fmt::format("field 'sliding_window' is {}, expected null or a positive integer in [1, {}]", w->dump(),
                         LlamaConfigLimits::kMaxPositions));
    window = w->get<int>();
  }
  if (!window) return;
  bool windowed = c.arch == Arch::mistral;  // Mistral windows every layer; Qwen only where enabled
  if (c.arch != Arch::mistral) {
    if (const json* lt = Reader::get(j, "layer_types")) {
      if (!lt->is_array()) r.wrong_type("layer_types", *lt, "an array of strings");
      for (const json& t : *lt) {
        if (!t.is_string()) r.wrong_type("layer_types", t, "an array of strings");
        windowed |= t.get<std::string>() == "sliding_attention";
      }
    } else {
      windowed = r.boolean(j, "use_sliding_window", false);
    }
  }
  if (windowed) c.sliding_window = window;
}

}  // namespace

namespace {
constexpr EnumName<Arch> kModelTypes[] = {
    {Arch::llama, "llama"}, {Arch::mistral, "mistral"}, {Arch::qwen2, "qwen2"}, {Arch::qwen3, "qwen3"}};
constexpr EnumName<Arch> kArchitectures[] = {{Arch::llama, "LlamaForCausalLM"},
                                             {Arch::mistral, "MistralForCausalLM"},
                                             {Arch::qwen2, "Qwen2ForCausalLM"},
                                             {Arch::qwen3, "Qwen3ForCausalLM"}};
}  // namespace

const char* arch_model_type(Arch a) {
  return name_of(kModelTypes, a);
}

const char* arch_architecture(Arch a) {
  return name_of(kArchitectures, a);
}

LlamaConfig parse_llama_config(const std::string& json_text, const std::string& path_for_errors) {
  Reader r{path_for_errors};
  json j;
  if (auto deep = json_nesting_error(json_text)) r.fail("json", *deep);
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    r.fail("json", fmt::format("invalid JSON: {}", e.what()));
  }
  if (!j.is_object()) r.fail("json", fmt::format("expected a JSON object, found {}", j.type_name()));

  LlamaConfig c;
  if (const json* mt = r.string(j, "model_type", "model_type")) {
    const std::string t = mt->get<std::string>();
    if (const std::optional<Arch> a = parse_name(kModelTypes, t)) {
      c.arch = *a;
    } else {
      std::string listed;
      for (const auto& e : kModelTypes) listed += fmt::format("{}'{}'", listed.empty() ? "" : ", ", e.name);
      r.fail("model_type", fmt::format("model_type is '{}', expected one of {}", t, listed));
    }
  }
  if (const json* act = r.string(j, "hidden_act", "hidden_act"); act && act->get<std::string>() != "silu")
    r.fail("hidden_act", fmt::format("hidden_act '{}' is not supported (only 'silu')", act->get<std::string>()));
  parse_arch_fields(r, j, c);

  using L = LlamaConfigLimits;
  c.hidden_size = r.positive_int(j, "hidden_size", "hidden_size", nullptr, L::kMaxHidden);
  c.intermediate_size = r.positive_int(j, "intermediate_size", "intermediate_size", nullptr, L::kMaxIntermediate);
  c.num_hidden_layers = r.positive_int(j, "num_hidden_layers", "num_hidden_layers", nullptr, L::kMaxLayers);
  c.num_attention_heads = r.positive_int(j, "num_attention_heads", "num_attention_heads", nullptr, L::kMaxHeads);
  c.vocab_size = r.positive_int(j, "vocab_size", "vocab_size", nullptr, L::kMaxVocab);
  c.num_key_value_heads =
      r.positive_int(j, "num_key_value_heads", "num_key_value_heads", &c.num_attention_heads, L::kMaxHeads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                              c.num_attention_heads, c.num_key_value_heads));
  // Qwen3Config's head_dim defaults to 128 whatever the width; the others derive it.
  const bool derived_head_dim = c.arch != Arch::qwen3;
  if (!Reader::get(j, "head_dim") && derived_head_dim && c.hidden_size % c.num_attention_heads != 0)
    r.fail("head_dim", fmt::format("head_dim absent and hidden_size {} is not a multiple of num_attention_heads {}",
                                   c.hidden_size, c.num_attention_heads));
  int head_dim = derived_head_dim ? c.hidden_size / c.num_attention_heads : 128;
  if (!Reader::get(j, "head_dim") && head_dim > L::kMaxHeadDim)
    r.fail("head_dim", fmt::format("head_dim absent and hidden_size / num_attention_heads = {} exceeds {}", head_dim,
                                   L::kMaxHeadDim));
  c.head_dim = r.positive_int(j, "head_dim", "head_dim", &head_dim, L::kMaxHeadDim);
  if (c.head_dim % 2 != 0) r.fail("head_dim", fmt::format("head_dim {} must be even (rope rotates pairs)", c.head_dim));
  int max_pos = c.max_position_embeddings;
  c.max_position_embeddings =
      r.positive_int(j, "max_position_embeddings", "max_position_embeddings", &max_pos, L::kMaxPositions);
  c.rms_norm_eps = r.positive_float(j, "rms_norm_eps", "rms_norm_eps", c.rms_norm_eps);
  c.tie_word_embeddings = r.boolean(j, "tie_word_embeddings", false);
  const json* dt = r.string(j, "dtype", "dtype");
  if (!dt) dt = r.string(j, "torch_dtype", "torch_dtype");
  if (dt) c.torch_dtype = dt->get<std::string>();

  c.rope_theta = r.positive_float(j, "rope_theta", "rope_theta", c.rope_theta);
  if (const json* rp = Reader::get(j, "rope_parameters")) {  // transformers 5
    if (!rp->is_object()) r.wrong_type("rope_parameters", *rp, "an object");
    c.rope_theta = r.positive_float(*rp, "rope_theta", "rope_parameters.rope_theta", c.rope_theta);
    parse_rope(r, *rp, "rope_parameters", c);
  } else if (const json* rs = Reader::get(j, "rope_scaling")) {  // transformers 4
    parse_rope(r, *rs, "rope_scaling", c);
  }
  json rest = json::object();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!interpreted_field(it.key())) rest[it.key()] = it.value();
  c.passthrough_json = rest.dump();
  // Every field is bounded, but together they can still describe an absurd model: refuse it here,
  // before anything (weight shapes, arenas) is sized from it.
  uint64_t params = llama_parameter_count(c);
  if (params > L::kMaxParameters)
    r.fail(
        "parameters",
        fmt::format("the config describes {} parameters ({} layers, hidden_size {}, intermediate_size {}, "
                    "vocab_size {}), over the limit of {}",
                    params, c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size, L::kMaxParameters));
  return c;
}

uint64_t llama_parameter_count(const LlamaConfig& c) {
  // Bounded fields keep every product below 2^50; the saturating helpers guard unbounded callers.
  auto mul = [](uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
  };
  auto add = [](uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
  };
  auto u = [](int v) { return v > 0 ? uint64_t(v) : uint64_t(0); };
  const uint64_t h = u(c.hidden_size), q = mul(u(c.num_attention_heads), u(c.head_dim)),
                 kv = mul(u(c.num_key_value_heads), u(c.head_dim));
  uint64_t layer = mul(h, add(add(q, q), add(kv, kv)));        // q, o, k, v projections
  layer = add(layer, mul(mul(3, h), u(c.intermediate_size)));  // gate, up, down
  layer = add(layer, mul(2, h));                               // two RMSNorms
  if (c.qkv_bias) layer = add(layer, add(q, add(kv, kv)));
  if (c.o_bias) layer = add(layer, h);
  if (c.mlp_bias) layer = add(layer, add(mul(2, u(c.intermediate_size)), h));
  if (c.qk_norm) layer = add(layer, mul(2, u(c.head_dim)));
  uint64_t embed = mul(u(c.vocab_size), h);
  uint64_t total = add(mul(layer, u(c.num_hidden_layers)), add(embed, h));  // + final norm
  return c.tie_word_embeddings ? total : add(total, embed);
}

LlamaConfig read_llama_config(const std::string& path) {
  std::string file = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    file = path + (path.ends_with('/') ? "" : "/") + "config.json";
  return parse_llama_config(read_regular_file(file, "config", kMaxConfigBytes), file);
}

std::string llama_config_to_json(const LlamaConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {arch_architecture(c.arch)};
  j["model_type"] = arch_model_type(c.arch);
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = clean(c.rms_norm_eps);
  j["rope_theta"] = clean(c.rope_theta);
  j["rope_scaling"] = rope_json(c.rope_scaling);
  switch (c.arch) {
    case Arch::llama:
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
      break;
    case Arch::qwen3:
      j["attention_bias"] = c.qkv_bias;
      break;
    case Arch::mistral:
    case Arch::qwen2:
      break;
  }
  // The window's own fields pass through from the source (layer_types, max_window_layers, ...);
  // a config made here states the window it runs with.
  if (c.arch != Arch::llama && c.sliding_window > 0) {
    j["sliding_window"] = c.sliding_window;
    if (c.arch != Arch::mistral && c.passthrough_json.empty()) j["use_sliding_window"] = true;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  // Everything else the source config said (token ids, ...), or transformers' defaults for a new one.
  // Spliced into the text rather than inserted into `j`: an ordered_json object finds keys by a
  // linear search, so a config with tens of thousands of fields would take quadratic time.
  if (c.passthrough_json.empty()) {
    j["attention_dropout"] = 0.0;
    j["initializer_range"] = 0.02;
    j["use_cache"] = true;
    return j.dump(2) + "\n";
  }
  std::string out = j.dump(2);  // "{\n  ...\n}"
  const json rest = json::parse(c.passthrough_json, nullptr, /*allow_exceptions=*/false);
  if (rest.is_object()) {
    std::string extra;
    for (auto it = rest.begin(); it != rest.end(); ++it) {
      if (interpreted_field(it.key()) || j.contains(it.key())) continue;  // j holds a few dozen keys
      std::string value = it.value().dump(2);
      for (size_t p = value.find('\n'); p != std::string::npos; p = value.find('\n', p + 3)) value.insert(p + 1, "  ");
      extra += fmt::format(",\n  {}: {}", json(it.key()).dump(), value);
    }
    out.insert(out.size() - 2, extra);  // before the closing "\n}"
  }
  return out + "\n";
}

}  // namespace strata::io
