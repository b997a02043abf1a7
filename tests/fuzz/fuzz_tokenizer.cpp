// libFuzzer target: the tokenizer (text/tokenizer.h). The first byte picks the mode:
//   0, 1, 2: the rest (up to 16 KiB) is text for the committed llama3 / llama2 / mistral tokenizers
//            (tests/tokenizer/): every id must be in the vocabulary, decode must give valid UTF-8,
//            and llama3 (byte-level) must give the text back (valid UTF-8, without '<').
//   5, 6:    text for the committed gpt2 / tekken tokenizers (Oniguruma regexes, trim_offsets).
//   4:       text for the committed qwen25 tokenizer (NFC normalizer); on valid UTF-8 the
//            normalizers must be idempotent, NFC(NFD(x)) == NFC(x), NFKC(NFKD(x)) == NFKC(x), and
//            x and NFC(x) must give the same ids where x has no '<' (an added token is matched
//            before normalization: NFC composes "<|im_end|>" + U+0338 into "<|im_end|≯").
//   3:       the rest is a tokenizer.json; one that loads must encode and decode a sample.
//   7:       the rest is a tokenizer_config.json beside the committed llama3 tokenizer.json.
// Every encode_with_offsets gives encode()'s ids and offsets inside the (repaired) text.
// Only a strata::Error counts as a clean rejection.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "text/normalize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {

using strata::text::Tokenizer;

const Tokenizer& committed(int which) {
  static const Tokenizer* toks[6] = {};
  static const char* names[6] = {"llama3", "llama2", "mistral", "qwen25", "gpt2", "tekken"};
  if (!toks[which])
    toks[which] = new Tokenizer(Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/tests/tokenizer/" + names[which]));
  return *toks[which];
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer invariant violated: %s\n", what);
    std::abort();
  }
}

void exercise(const Tokenizer& tok, std::string_view text, bool expect_round_trip) {
  const size_t repaired_size = strata::text::utf8_lossy(text).size();
  for (bool special : {true, false}) {
    std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "id outside the vocabulary");
    strata::text::Encoding e = tok.encode_with_offsets(text, special);
    check(e.ids == ids, "encode_with_offsets ids differ from encode's");
    check(e.offsets.size() == ids.size(), "one offset pair per id");
    for (auto [b, end] : e.offsets) check(b <= end && end <= repaired_size, "offsets outside the text");
    if (special) continue;
    for (bool skip : {false, true}) {
      std::string back = tok.decode(ids, skip);
      check(strata::text::utf8_valid_prefix(back) == back.size(), "decode gave invalid UTF-8");
      if (expect_round_trip && !skip) check(back == text, "byte-level round trip");
    }
  }
}

void check_normalizers(const Tokenizer& tok, std::string_view text) {
  using strata::text::normalized;
  using strata::text::NormForm;
  std::string nfc = normalized(text, NormForm::kNFC), nfkc = normalized(text, NormForm::kNFKC);
  for (NormForm f : {NormForm::kNFC, NormForm::kNFD, NormForm::kNFKC, NormForm::kNFKD}) {
    std::string once = normalized(text, f);
    check(strata::text::utf8_valid_prefix(once) == once.size(), "normalizer gave invalid UTF-8");
    check(normalized(once, f) == once, "normalizer not idempotent");
  }
  check(normalized(normalized(text, NormForm::kNFD), NormForm::kNFC) == nfc, "NFC(NFD(x)) != NFC(x)");
  check(normalized(normalized(text, NormForm::kNFKD), NormForm::kNFKC) == nfkc, "NFKC(NFKD(x)) != NFKC(x)");
  if (text.find('<') == std::string_view::npos)
    check(tok.encode(text) == tok.encode(nfc), "NFC tokenizer: x and NFC(x) differ");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  int mode = data[0] % 8;
  if (mode != 3 && mode != 7) {
    // Longer texts only repeat what 16 KiB shows, at a tenth of the runs per second.
    rest = rest.substr(0, 16384);
    bool valid = strata::text::utf8_valid_prefix(rest) == rest.size();
    const Tokenizer& tok = committed(mode >= 4 ? mode - 1 : mode);
    exercise(tok, rest, mode == 0 && valid && rest.find('<') == std::string_view::npos);
    if (mode == 4 && valid) check_normalizers(tok, rest);
    return 0;
  }
  try {
    if (mode == 7) {  // a tokenizer_config.json beside the committed llama3 tokenizer.json
      static const std::string* llama3 = [] {
        std::ifstream f(std::string(STRATA_SOURCE_DIR) + "/tests/tokenizer/llama3/tokenizer.json");
        std::stringstream ss;
        ss << f.rdbuf();
        return new std::string(ss.str());
      }();
      const std::string config(rest);
      Tokenizer tok = Tokenizer::parse(*llama3, "llama3/tokenizer.json", &config, "fuzz/tokenizer_config.json");
      exercise(tok, "Hello, world! <|eot_id|> x", false);
      return 0;
    }
    Tokenizer tok = Tokenizer::parse(rest, "fuzz/tokenizer.json", nullptr, "fuzz/tokenizer_config.json");
    exercise(tok, "Hello, world! 1234 \xE4\xBD\xA0\xE5\xA5\xBD <s> \xF0\x9F\x91\x8D\r\n  x", false);
  } catch (const strata::Error&) {
  }
  return 0;
}
