// Shared by the libFuzzer targets: a private scratch directory per process (removed at exit) and a
// whole-file write, since the readers under test take paths.
#pragma once
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace strata::fuzz {

inline const std::string& scratch_dir() {
  // Never freed: the atexit cleanup runs after static destructors would have.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp ? tmp : "/tmp") + "/strata_fuzz_XXXXXX");
    if (!::mkdtemp(d->data())) std::abort();
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return *dir;
}

inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
  return path;
}

}  // namespace strata::fuzz
