// libFuzzer target: the dataset readers (model/data/datasets.h), with the committed llama3 tokenizer
// (tests/tokenizer/llama3). The first byte picks the reader:
//   0, 1, 2: the rest is a JSON-lines file of completion, alpaca or chat examples;
//   3:       the rest is a plain-text completion file (.txt);
//   4:       the rest is the token cache of a fixed two-line dataset (dataset_cache_path), read by
//            load_dataset in place of tokenising.
// What loads is laid out into rows (lay_rows, lay_rows_packed). Only a strata::Error counts as a
// clean rejection.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/error.h"
#include "model/data/datasets.h"
#include "tests/fuzz/fuzz_util.h"
#include "text/tokenizer.h"

namespace {

const std::string kTokDir = std::string(STRATA_SOURCE_DIR) + "/tests/tokenizer/llama3";

const strata::text::Tokenizer& tokenizer() {
  static const auto* tok = new strata::text::Tokenizer(strata::text::Tokenizer::load(kTokDir));
  return *tok;
}

void lay_out(const std::vector<strata::Example>& ex) {
  std::vector<int32_t> in, tg, pos;
  for (bool chunk : {false, true}) {
    in.clear(), tg.clear();
    strata::lay_rows(ex, 64, 0, false, false, in, tg, chunk);
  }
  in.clear(), tg.clear();
  strata::lay_rows_packed(ex, 64, 0, true, true, in, tg, pos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size == 0) return 0;
  const int mode = data[0] % 5;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  DatasetSpec d;
  d.type = mode == 1 ? "alpaca" : mode == 2 ? "chat" : "completion";
  if (mode == 4) {
    const std::string sample = "{\"text\": \"Hello world\"}\n{\"text\": \"again\"}\n";
    d.path = fuzz::write_file("cached.jsonl", reinterpret_cast<const uint8_t*>(sample.data()), sample.size());
    const std::filesystem::path cache = dataset_cache_path(d, sample, kTokDir);
    std::filesystem::create_directories(cache.parent_path());
    fuzz::write_file(std::filesystem::relative(cache, fuzz::scratch_dir()).string(), data + 1, size - 1);
    try {
      lay_out(load_dataset(d, tokenizer(), kTokDir, nullptr).examples);
    } catch (const Error&) {
    }
    std::filesystem::remove_all(cache.parent_path());
    return 0;
  }
  d.path = fuzz::write_file(mode == 3 ? "data.txt" : "data.jsonl", data + 1, size - 1);
  try {
    lay_out(tokenize_dataset(d, rest, tokenizer()));
  } catch (const Error&) {
  }
  return 0;
}
