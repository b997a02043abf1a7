#include "engine/disk_file.h"

#include <fmt/format.h>

#include "engine/error.h"

namespace strata {

void DiskFile::check_request(const std::string& path, size_t capacity, const char* op, size_t offset, size_t bytes,
                             const void* buf, bool check_buffer) {
  std::string bad;
  if (offset % kAlign) bad += fmt::format(" offset {}", offset);
  if (bytes % kAlign) bad += fmt::format(" size {}", bytes);
  if (check_buffer && reinterpret_cast<uintptr_t>(buf) % kAlign) bad += fmt::format(" buffer {}", buf);
  if (!bad.empty())
    STRATA_THROW(IoError,
                 fmt::format("{}: {} of {} bytes at offset {}: misaligned{} (must be multiples of {})", path, op, bytes,
                             offset, bad, kAlign),
                 path);
  if (offset > capacity || bytes > capacity - offset)
    STRATA_THROW(IoError,
                 fmt::format("{}: {} of {} bytes at offset {} exceeds the file's capacity of {} bytes", path, op, bytes,
                             offset, capacity),
                 path);
  if (check_buffer && bytes > 0 && buf == nullptr)
    STRATA_THROW(IoError, fmt::format("{}: {} of {} bytes at offset {} from a null buffer", path, op, bytes, offset),
                 path);
}

}  // namespace strata
