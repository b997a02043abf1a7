// libFuzzer target: the tokenizer (text/tokenizer.h). The first byte picks the mode:
//   0, 1, 2: the rest (up to 16 KiB) is text for the committed llama3 / llama2 / mistral tokenizers
//            (tests/tokenizer/): every id must be in the vocabulary, decode must give valid UTF-8,
//            and llama3 (byte-level) must give the text back (valid UTF-8, without '<').
//   other:   the rest is a tokenizer.json; one that loads must encode and decode a sample.
// Only a strata::Error counts as a clean rejection.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {

using strata::text::Tokenizer;

const Tokenizer& committed(int which) {
  static const Tokenizer* toks[3] = {};
  static const char* names[3] = {"llama3", "llama2", "mistral"};
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
  for (bool special : {true, false}) {
    std::vector<int32_t> ids = tok.encode(text, special);
    for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "id outside the vocabulary");
    if (special) continue;
    for (bool skip : {false, true}) {
      std::string back = tok.decode(ids, skip);
      check(strata::text::utf8_valid_prefix(back) == back.size(), "decode gave invalid UTF-8");
      if (expect_round_trip && !skip) check(back == text, "byte-level round trip");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  int mode = data[0] % 4;
  if (mode < 3) {
    // Longer texts only repeat what 16 KiB shows, at a tenth of the runs per second.
    rest = rest.substr(0, 16384);
    bool valid = strata::text::utf8_valid_prefix(rest) == rest.size();
    exercise(committed(mode), rest, mode == 0 && valid && rest.find('<') == std::string_view::npos);
    return 0;
  }
  try {
    Tokenizer tok = Tokenizer::parse(rest, "fuzz/tokenizer.json", nullptr, "fuzz/tokenizer_config.json");
    exercise(tok, "Hello, world! 1234 \xE4\xBD\xA0\xE5\xA5\xBD <s> \xF0\x9F\x91\x8D\r\n  x", false);
  } catch (const strata::Error&) {
  }
  return 0;
}
