// LlamaModel's persistent state file on the disk tier (model/llama/llama.h): created at its full size with the model,
// and read and written synchronously through an aligned bounce buffer (initialisation, checkpoints).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/switches.h"
#include "model/llama/llama.h"
#include "model/llama/llama_internal.h"

namespace strata {

using namespace llama_detail;

void LlamaModel::open_state_disk(size_t bytes) {
  std::string dir = opt_.state_dir;
  if (dir.empty()) dir = switches().temp_dir;
  try {
    state_disk_ = be_.open_disk_file(dir, bytes);
  } catch (const Error& e) {
    // Which classes wanted the room: the first few, and how many in all.
    std::vector<std::string> cls;
    for (const Parameter& p : params_)
      for (auto [off, kind] :
           {std::pair{p.disk_master, ".w.master"}, std::pair{p.disk_m, ".adam.m"}, std::pair{p.disk_v, ".adam.v"}})
        if (off != Parameter::kDevice && std::find(cls.begin(), cls.end(), p.group + kind) == cls.end())
          cls.push_back(p.group + kind);
    std::string names;
    for (size_t i = 0; i < std::min<size_t>(cls.size(), 4); ++i) names += (i ? ", " : "") + cls[i];
    if (cls.size() > 4) names += fmt::format(" and {} more", cls.size() - 4);
    STRATA_THROW(IoError,
                 fmt::format("disk tier: cannot create the persistent state file in {} for state classes {}: it needs "
                             "{} bytes ({:.2f} GiB) of free space: {}",
                             dir, names, bytes, double(bytes) / double(size_t(1) << 30), e.what()),
                 dir);
  }
  state_disk_bytes_ = bytes;
}

void LlamaModel::throw_state_disk_error(const std::string& what, bool write, const std::string& err) const {
  const std::string path = state_disk_ ? state_disk_->path() : std::string("(no state file)");
  STRATA_THROW(IoError,
               fmt::format("disk tier: {} persistent state class {} {} the state file {} failed: {}",
                           write ? "writing" : "reading", what, write ? "to" : "from", path, err),
               path);
}

std::byte* LlamaModel::bounce(bool zeroed) const {
  if (bounce_.empty()) {
    bounce_.assign(kBounceBytes + 4096, std::byte{0});  // zero: the first zero write needs no fill
    bounce_zero_ = true;
  }
  std::byte* p = bounce_.data() + (4096 - reinterpret_cast<uintptr_t>(bounce_.data()) % 4096) % 4096;
  if (zeroed && !bounce_zero_) std::memset(p, 0, kBounceBytes);
  bounce_zero_ = zeroed;
  return p;
}

void LlamaModel::read_state_disk(size_t off, void* dst, size_t bytes, const std::string& cls) const {
  STRATA_CHECK(state_disk_ != nullptr, "read_state_disk: no state file");
  // A file that moves no bytes (the sim's) takes the same requests without a buffer, and reads zeros.
  const bool moves = state_disk_->moves_bytes();
  std::byte* buf = moves ? bounce(true) : nullptr;
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kBounceBytes), padded = host_align(n);
    if (moves) bounce_zero_ = false;  // the read fills it
    try {
      state_disk_->wait(state_disk_->read_async(off + done, buf, padded));
    } catch (const Error& e) {
      throw_state_disk_error(cls, false, e.what());
    }
    if (buf)
      std::memcpy(static_cast<std::byte*>(dst) + done, buf, n);
    else
      std::memset(static_cast<std::byte*>(dst) + done, 0, n);
    done += n;
  }
}

void LlamaModel::write_state_disk(size_t off, const void* src, size_t bytes, const std::string& cls) const {
  STRATA_CHECK(state_disk_ != nullptr, "write_state_disk: no state file");
  std::byte* buf = state_disk_->moves_bytes() ? bounce(src == nullptr) : nullptr;  // the sim's: requests alone
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kBounceBytes), padded = host_align(n);
    if (src && buf) {
      std::memcpy(buf, static_cast<const std::byte*>(src) + done, n);
      std::memset(buf + n, 0, padded - n);  // the array's last page: its padding
    }
    try {
      state_disk_->wait(state_disk_->write_async(off + done, buf, padded));
    } catch (const Error& e) {
      throw_state_disk_error(cls, true, e.what());
    }
    done += n;
  }
}

}  // namespace strata
