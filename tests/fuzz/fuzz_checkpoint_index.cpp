// libFuzzer target: a sharded checkpoint directory. The input is the index JSON, a NUL byte, then
// the bytes of shard "s1.safetensors" (a second NUL splits off "s2.safetensors"); the index may
// name those shards or anything else. Every tensor listed is read as float32.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/error.h"
#include "io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const uint8_t* end = data + size;
  auto split = [&](const uint8_t* from) {
    const void* nul = std::memchr(from, 0, size_t(end - from));
    return nul ? static_cast<const uint8_t*>(nul) : end;
  };
  const uint8_t* a = split(data);
  const uint8_t* s1 = a < end ? a + 1 : end;
  const uint8_t* b = split(s1);
  const uint8_t* s2 = b < end ? b + 1 : end;
  fuzz::write_file("model.safetensors.index.json", data, size_t(a - data));
  fuzz::write_file("s1.safetensors", s1, size_t(b - s1));
  fuzz::write_file("s2.safetensors", s2, size_t(end - s2));
  try {
    io::Checkpoint ck = io::Checkpoint::open_dir(fuzz::scratch_dir());
    std::vector<float> out;
    for (const std::string& name : ck.names()) {
      const io::TensorInfo& t = ck.info(name);
      out.resize(t.bytes / dtype_size(t.dtype) + 1);
      ck.read_f32(name, t.shape, out.data());
    }
  } catch (const Error&) {
  }
  for (const char* f : {"model.safetensors.index.json", "s1.safetensors", "s2.safetensors"})
    std::filesystem::remove(fuzz::scratch_dir() + "/" + f);
  return 0;
}
