// Safetensors reader (mmap, validated up front), writer (atomic), and a Hugging Face checkpoint
// directory (single file or index + shards). Format and error policy: docs/FORMATS.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dtype.h"

namespace strata::io {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t offset = 0;  // bytes, within the data section
  size_t bytes = 0;
};

// Read-only, mmap-backed view of one .safetensors file. Move-only; munmaps in the destructor.
class SafetensorsFile {
 public:
  // Throws IoError (cannot open/map) or FormatError naming the file and the field at fault.
  static SafetensorsFile open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }               // header order
  const TensorInfo* find(std::string_view name) const;                              // nullptr if absent
  const std::byte* data(const TensorInfo& t) const { return data_ + t.offset; }     // may be unaligned
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
  // Unmaps the file and asks the kernel to drop its pages from the page cache (best effort: a filesystem that keeps
  // them, such as tmpfs, keeps them). data() is gone after it; the header (tensors, metadata) stays.
  void release() noexcept;
  bool released() const { return map_ == nullptr; }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const std::byte* data_ = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory: model.safetensors, or model.safetensors.index.json + shards.
class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);
  bool has(std::string_view name) const;
  std::vector<std::string> names() const;  // header (or weight_map) order
  // Copies tensor `name`, converted to float32, into dst after checking its shape equals
  // `expected`. FormatError names the file and the tensor, with expected vs found shape.
  void read_f32(std::string_view name, const std::vector<int64_t>& expected, float* dst) const;
  const TensorInfo& info(std::string_view name) const;  // FormatError if absent
  const std::string& dir() const { return dir_; }
  // Every shard released (SafetensorsFile::release): once the weights are read, their file's pages leave the page
  // cache, which a run about to pin most of the host's memory (host tiers, state, paging) would otherwise reclaim
  // page by page. read_f32 refuses afterwards.
  void release() noexcept;

 private:
  struct Entry {
    size_t shard, tensor;
  };
  const Entry& entry(std::string_view name) const;
  std::string dir_;
  std::string source_;  // the file that lists the names (for "not found" errors)
  std::vector<SafetensorsFile> shards_;
  std::vector<std::string> names_;
  std::map<std::string, Entry, std::less<>> entries_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * dtype_size bytes; may be null when numel == 0
};

// Writes through a temp file in the same directory, fsync, then rename over `path`: a failed save
// leaves the previous file intact and no temp file behind. Tensors are laid out in the given order;
// metadata is {"format": "pt"} plus `metadata`.
void save_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// "[2, 3]" — for error messages.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace strata::io
