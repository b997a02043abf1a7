// libFuzzer target: a token file, read against a vocabulary chosen by the input's last byte.
#include <cstdint>
#include <filesystem>

#include "engine/error.h"
#include "io/tokens.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  std::string path = fuzz::write_file("tokens.bin", data, size);
  int vocab = size ? 1 + int(data[size - 1]) * 257 : 1;
  for (long min_tokens : {0L, 3L}) {
    try {
      io::read_tokens(path, vocab, min_tokens);
    } catch (const Error&) {
    }
  }
  std::filesystem::remove(path);
  return 0;
}
