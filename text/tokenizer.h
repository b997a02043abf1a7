// A tokenizer read from a Hugging Face checkpoint's tokenizer.json (+ tokenizer_config.json) that
// gives the ids Hugging Face `tokenizers` gives. Two kinds, both BPE:
//  - byte-level BPE as Llama 3 (Split on its regex, ByteLevel, ignore_merges, ByteLevel decoder)
//    and Qwen2 / Qwen2.5 / Qwen3 (NFC normalizer, Split on Qwen's one-digit regex, ByteLevel);
//  - SentencePiece-style BPE with byte fallback as Llama 2, TinyLlama, Mistral (Prepend/Replace
//    normalizer or a Metaspace pre-tokenizer, <0xNN> tokens, fused <unk>).
// Added tokens are matched first (special, lstrip, rstrip, single_word, normalized); the
// post-processor template adds BOS/EOS. Normalizers: Prepend, Replace, NFC, NFD, NFKC, NFKD (in a
// Sequence or alone). Anything else (WordPiece, Unigram, another regex, Lowercase...) is refused
// with a ConfigError naming the file, the field and the value found.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::text {

struct TokenizerModel;  // tokenizer_model.h

struct Encoding {
  std::vector<int32_t> ids;
  // Byte offsets [begin, end) into the text of the characters each token came from, as Hugging
  // Face's return_offsets_mapping gives them (in bytes, not characters); tokens added by the
  // post-processor get {0, 0}.
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
};

// Copies share the loaded model. encode/decode may run on several threads at once (the word
// cache is per thread).
class Tokenizer {
 public:
  // DIR/tokenizer.json, and DIR/tokenizer_config.json where it exists. ConfigError (file, field)
  // for content strata does not support or cannot read; IoError for a missing or unreadable file.
  // regex_fast_path false runs every Split regex on Oniguruma, even the two strata also has by
  // hand (Llama 3's and Qwen2's; the same pieces, faster): for tests and benchmarks.
  static Tokenizer load(const std::string& dir, bool regex_fast_path = true);
  // From the texts; the names are used in errors. config_json may be null (no tokenizer_config).
  static Tokenizer parse(std::string_view tokenizer_json, const std::string& json_name, const std::string* config_json,
                         const std::string& config_name, bool regex_fast_path = true);

  // The ids of `text` (UTF-8; invalid bytes become U+FFFD first, as Rust's from_utf8_lossy).
  // With add_special_tokens, the template adds BOS/EOS: tokenizer.json's post_processor, or what
  // tokenizer_config.json's add_bos_token / add_eos_token say where it sets them.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The same ids with their offsets (through the normalizer, back into `text`; where `text` is not
  // valid UTF-8, into its U+FFFD-repaired form).
  Encoding encode_with_offsets(std::string_view text, bool add_special_tokens = true) const;
  // Appends instead of returning (no allocation per call once `out` has grown).
  void encode_append(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;

  // The text of `ids` through the tokenizer.json decoder; ids with no token are skipped (as
  // tokenizers does), special added tokens too when skip_special_tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // the largest id + 1 (model vocabulary and added tokens)
  int32_t bos_id() const;      // tokenizer_config.json's bos_token, -1 if none
  int32_t eos_id() const;      // tokenizer_config.json's eos_token, -1 if none
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // "" for an id without a token
  bool byte_level() const;                         // Llama 3 kind (else SentencePiece-style)

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerModel> m) : m_(std::move(m)) {}
  std::shared_ptr<const TokenizerModel> m_;
};

}  // namespace strata::text
