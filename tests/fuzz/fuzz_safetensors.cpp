// libFuzzer target: one .safetensors file, opened as a checkpoint directory and every tensor read
// as float32. Any strata::Error is a clean rejection; anything else (another exception, a crash, a
// sanitizer report, a timeout on a large header) is a finding.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "engine/error.h"
#include "io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  std::string path = fuzz::write_file("model.safetensors", data, size);
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
  std::filesystem::remove(path);
  return 0;
}
