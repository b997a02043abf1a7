// A tokenizer read from a Hugging Face checkpoint's tokenizer.json (+ tokenizer_config.json) that
// gives the ids (and offsets) Hugging Face `tokenizers` gives, for BPE models:
//  - byte-level BPE: Llama 3, Qwen2/2.5/3, Mistral-Nemo (tekken), GPT-2 and its family (SmolLM,
//    Phi, OLMo: ByteLevel with its own regex, add_prefix_space, trim_offsets), DeepSeek (a Sequence
//    of Splits with Digits); ignore_merges;
//  - SentencePiece-style BPE with byte fallback: Llama 2, Mistral, Gemma (Prepend/Replace or
//    Metaspace with prepend_scheme, <0xNN> tokens, fused <unk>).
// Every Split and Replace regex runs on Oniguruma (the engine `tokenizers` uses, linked statically);
// Llama 3's and Qwen2's split regexes also have a hand-written fast path, tested equal to it.
// Normalizers: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, ByteLevel.
// Pre-tokenizers: Sequence, Split (every behaviour, invert), ByteLevel, Metaspace, Digits,
// Whitespace, WhitespaceSplit, Punctuation. Decoders: Sequence, ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip. Post-processors: TemplateProcessing, ByteLevel, Sequence. Added
// tokens are matched first (special, lstrip, rstrip, single_word, normalized). Anything else
// (WordPiece, Unigram, BertNormalizer, a regex Oniguruma cannot compile...) is refused with a
// ConfigError naming the file, the field path and the value found.
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
  // Appends instead of returning (no allocation per call once `out` has grown). `continuation`:
  // text is a part after the first of a text cut at next_cut() (nothing is prepended at its start).
  void encode_append(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out,
                     bool continuation = false) const;

  // Cutting a long text to encode its parts on several threads (text/cut.cpp): where cut_refusal()
  // is "", encode(text, false) equals the first part's ids followed by every other part's (encoded
  // with continuation), for parts cut at next_cut() positions. Else it says why not.
  const std::string& cut_refusal() const;
  // The first cut position p >= from: text[p-2] a visible ASCII character, text[p-1] '\n', text[p]
  // an ASCII letter (that no token holds after a newline, where BPE decides the cut), and no added
  // token within reach. npos where there is none, or the tokenizer refuses cuts.
  size_t next_cut(std::string_view text, size_t from) const;

  // The text of `ids` through the tokenizer.json decoder; ids with no token are skipped (as
  // tokenizers does), special added tokens too when skip_special_tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // the largest id + 1 (model vocabulary and added tokens)
  int32_t bos_id() const;      // tokenizer_config.json's bos_token, -1 if none
  int32_t eos_id() const;      // tokenizer_config.json's eos_token, -1 if none
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string_view id_to_token(int32_t id) const;  // "" for an id without a token
  bool byte_level() const;                         // a ByteLevel pre-tokenizer or normalizer (else SentencePiece-style)

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerModel> m) : m_(std::move(m)) {}
  std::shared_ptr<const TokenizerModel> m_;
};

}  // namespace strata::text
