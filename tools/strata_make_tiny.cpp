// strata-make-tiny OUT_DIR: writes a tiny Hugging Face-format Llama checkpoint (config.json,
// model.safetensors with deterministic random weights) and tokens.bin, a learnable synthetic
// token stream (docs/FORMATS.md).
#include <fmt/format.h>

#include <filesystem>

#include "engine/dtype.h"
#include "engine/parallel.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokens.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/run/train_config.h"
#include "tools/cli.h"

using namespace strata;

static const char* kUsage =
    "usage: strata-make-tiny OUT_DIR [--layers 2] [--hidden 64] [--heads 4] [--kv-heads 2]\n"
    "                        [--intermediate 128] [--vocab 256] [--seed 0] [--tokens 200000]\n"
    "                        [--max-pos 2048] [--tied] [--dtype f32|bf16]\n"
    "--dtype bf16 writes the weights in bf16 (half the file; the values are the f32 ones rounded to nearest even).\n";

int main(int argc, char** argv) {
  try {
    io::remove_temps_on_signals();  // SIGINT/SIGTERM mid-write leave no model.safetensors.tmp.PID.N
    cli::Args a(
        argc, argv,
        {"layers", "hidden", "heads", "kv-heads", "intermediate", "vocab", "seed", "tokens", "max-pos", "dtype"},
        {"tied", "help"});
    if (a.has("help") || a.positional().size() != 1) {
      std::fputs(kUsage, a.has("help") ? stdout : stderr);
      return a.has("help") ? 0 : 2;
    }
    const std::string out = a.positional()[0];
    io::LlamaConfig c;
    // Range-checked before the config's own limits apply (--layers 4294967298 is refused, not read
    // as 2); the error names the flag.
    auto int_flag = [&](const char* k, int def) { return check_int(a.integer(k, def), 1, Origin::flag(k)); };
    c.num_hidden_layers = int_flag("layers", 2);
    c.hidden_size = int_flag("hidden", 64);
    c.num_attention_heads = int_flag("heads", 4);
    c.num_key_value_heads = int_flag("kv-heads", 2);
    c.intermediate_size = int_flag("intermediate", 128);
    c.vocab_size = int_flag("vocab", 256);
    c.max_position_embeddings = int_flag("max-pos", 2048);
    c.tie_word_embeddings = a.has("tied");
    c.rms_norm_eps = 1e-5f;
    const std::string dtype_flag = a.str("dtype", "f32");
    if (dtype_flag != "f32" && dtype_flag != "bf16")
      throw ConfigError(fmt::format("--dtype must be f32 or bf16, got '{}'", dtype_flag), "command line", "dtype");
    const bool bf16 = dtype_flag == "bf16";
    c.torch_dtype = bf16 ? "bfloat16" : "float32";
    const long seed_flag = a.integer("seed", 0), n_tokens = a.integer("tokens", 200000);
    if (seed_flag < 0)  // would wrap to 2^64 - 1
      throw ConfigError(fmt::format("--seed must be >= 0, got {}", seed_flag), "command line", "seed");
    if (n_tokens < 1)
      throw ConfigError(fmt::format("--tokens must be >= 1, got {}", n_tokens), "command line", "tokens");
    const uint64_t seed = uint64_t(seed_flag);
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
      throw ConfigError(
          fmt::format("--hidden {} must be a positive multiple of --heads {}", c.hidden_size, c.num_attention_heads),
          "command line", "hidden");
    c.head_dim = c.hidden_size / c.num_attention_heads;
    // Round-trip through the reader so the same validation applies as for any checkpoint.
    c = io::parse_llama_config(io::llama_config_to_json(c), "strata-make-tiny config");

    std::filesystem::create_directories(out);
    // One generator stream over every matrix in order (norms take no draws), filled in parallel: each
    // chunk skips to its first draw, so the numbers do not depend on the thread count.
    const Rng rng0(seed);
    std::vector<std::vector<float>> host;
    std::vector<std::vector<uint16_t>> host16;
    std::vector<io::TensorToWrite> tensors;
    auto shapes = llama_weight_shapes(c);
    host.reserve(shapes.size());
    host16.reserve(shapes.size());
    uint64_t draws = 0;  // normal() draws taken by the tensors before this one
    size_t params = 0;
    for (auto& [name, shape] : shapes) {
      const size_t n = size_t(shape.numel());
      const bool norm = shape.nd == 1;
      std::vector<float> w(n);
      parallel_chunks(n, size_t(1) << 20, [&](size_t b, size_t e) {
        Rng r = rng0;
        r.skip(2 * (draws + b));
        for (size_t i = b; i < e; ++i) w[i] = norm ? 1.0f : float(0.02 * r.normal());
      });
      if (!norm) draws += n;
      params += n;
      std::vector<int64_t> dims(shape.d.begin(), shape.d.begin() + shape.nd);
      if (bf16) {
        host16.emplace_back(n);
        convert_from_f32(host16.back().data(), DType::bf16, w.data(), n);
        tensors.push_back({name, DType::bf16, dims, host16.back().data()});
      } else {
        host.push_back(std::move(w));
        tensors.push_back({name, DType::f32, dims, host.back().data()});
      }
    }
    io::save_safetensors(out + "/model.safetensors", tensors);
    io::write_file_atomic(out + "/config.json", io::llama_config_to_json(c));
    io::write_tokens(out + "/tokens.bin", synthetic_tokens(n_tokens, c.vocab_size, seed));
    std::printf("strata-make-tiny: wrote %s (config.json, model.safetensors: %zu parameters; tokens.bin: %ld tokens)\n",
                out.c_str(), params, n_tokens);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-make-tiny: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-make-tiny: error: %s\n", e.what());
    return 1;
  }
}
