#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "engine/json_limits.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"

namespace strata::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors and token files are little-endian");

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
constexpr size_t kMaxHeaderBytes = size_t(100) << 20;  // the reference implementation's limit
constexpr size_t kMaxIndexBytes = size_t(100) << 20;   // an index lists names only: a 405B model's is ~100 KiB
constexpr const char* kIndexName = "model.safetensors.index.json";

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// Records, in file order, the keys of the top-level object (`member` empty) or of its member
// `member`; builds no values. (The parser's callback mode cannot do this: it rescans the parent
// object after every child, quadratic again.)
struct KeyOrder : nlohmann::json_sax<json> {
  const std::string& member;
  std::vector<std::string>& keys;
  int depth = 0;           // open objects and arrays
  bool in_member = false;  // inside the top-level value of `member`
  int member_seen = 0;     // times `member` appears as a top-level key
  KeyOrder(const std::string& m, std::vector<std::string>& k) : member(m), keys(k) {}

  bool key(string_t& k) override {
    if (member.empty() ? depth == 1 : depth == 2 && in_member) keys.push_back(k);
    if (depth == 1) {
      in_member = !member.empty() && k == member;
      member_seen += in_member;
    }
    return true;
  }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

// Parses JSON into std::map-backed objects (O(log n) per key: ordered_json's linear key search made
// a 100k-entry header take minutes), then a second, value-free pass returns in `keys`, in file
// order, the keys of the top-level object (`member` empty) or of its object member `member`. A key
// repeated there is a FormatError naming it: the parser would silently keep only the last one.
// `what` names the text in parse errors ("header JSON", "JSON").
json parse_keeping_order(const char* begin, const char* end, const std::string& path, const char* what,
                         const std::string& field, const std::string& member, std::vector<std::string>& keys) {
  json j;
  if (auto deep = json_nesting_error(std::string_view(begin, size_t(end - begin))))
    STRATA_THROW(FormatError, fmt::format("{}: {}: {}", path, what, *deep), path, field);
  try {
    j = json::parse(begin, end);
  } catch (const nlohmann::json::exception& ex) {
    STRATA_THROW(FormatError, fmt::format("{}: invalid {}: {}", path, what, ex.what()), path, field);
  }
  keys.clear();
  KeyOrder order(member, keys);
  json::sax_parse(begin, end, &order);  // cannot fail: the same text just parsed
  // A repeated member would mix the keys of every copy while the parser keeps only the last one.
  if (order.member_seen > 1)
    STRATA_THROW(FormatError, fmt::format("{}: key '{}' appears more than once", path, member), path, member);
  const json* obj = &j;
  if (!member.empty() && j.is_object()) {
    auto it = j.find(member);
    obj = it == j.end() ? nullptr : &*it;
  }
  if (obj && obj->is_object() && obj->size() != keys.size()) {
    std::set<std::string_view> seen;
    for (const auto& k : keys)
      if (!seen.insert(k).second) {
        std::string where = member.empty() ? k : member + "." + k;
        STRATA_THROW(FormatError, fmt::format("{}: key '{}' appears more than once", path, where), path, where);
      }
  }
  return j;
}

// Validates one header entry and returns its TensorInfo (offsets not yet range-checked).
TensorInfo parse_entry(const std::string& path, const std::string& name, const json& e) {
  auto fail = [&](const std::string& field, const std::string& msg) {
    STRATA_THROW(FormatError, fmt::format("{}: tensor '{}': {}", path, name, msg), path, field);
  };
  if (!e.is_object()) fail(name, fmt::format("header entry is a {}, expected an object", e.type_name()));
  TensorInfo t;
  t.name = name;

  auto d = e.find("dtype");
  if (d == e.end() || !d->is_string()) fail(name + ".dtype", "missing or non-string 'dtype'");
  std::string ds = d->get<std::string>();
  auto dt = parse_dtype(ds);
  // parse_dtype also takes engine names ("f32"); the file must use the safetensors spelling.
  if (!dt || dtype_safetensors_name(*dt) != ds)
    fail(name + ".dtype", fmt::format("unknown dtype '{}' (supported: F32, BF16, F16, I32, I16, U8)", ds));
  t.dtype = *dt;

  auto s = e.find("shape");
  if (s == e.end() || !s->is_array()) fail(name + ".shape", "missing or non-array 'shape'");
  size_t numel = 1;
  for (const auto& v : *s) {
    if (!v.is_number_unsigned())
      fail(name + ".shape", fmt::format("shape entry {} is not a non-negative integer", v.dump()));
    uint64_t dim = v.get<uint64_t>();
    if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, size_t(dim), &numel))
      fail(name + ".shape", fmt::format("shape {} overflows", s->dump()));
    t.shape.push_back(int64_t(dim));
  }
  size_t want_bytes;
  if (__builtin_mul_overflow(numel, dtype_size(t.dtype), &want_bytes))
    fail(name + ".shape", fmt::format("shape {} overflows", s->dump()));

  auto o = e.find("data_offsets");
  if (o == e.end() || !o->is_array() || o->size() != 2 || !(*o)[0].is_number_unsigned() ||
      !(*o)[1].is_number_unsigned())
    fail(name + ".data_offsets", "missing 'data_offsets' or not a pair of non-negative integers");
  uint64_t begin = (*o)[0].get<uint64_t>(), end = (*o)[1].get<uint64_t>();
  if (end < begin) fail(name + ".data_offsets", fmt::format("data_offsets [{}, {}] end before begin", begin, end));
  if (end - begin != want_bytes)
    fail(name + ".data_offsets", fmt::format("data_offsets [{}, {}] span {} bytes but shape {} of {} needs {} bytes",
                                             begin, end, end - begin, shape_str(t.shape), ds, want_bytes));
  t.offset = size_t(begin);
  t.bytes = want_bytes;
  return t;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// ---------------------------------------------------------------- SafetensorsFile

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  size_t size = 0;
  int fd = open_regular_file(path, "safetensors file", &size);
  if (size < 8) {
    ::close(fd);
    STRATA_THROW(FormatError, fmt::format("{}: truncated: {} bytes, shorter than the 8-byte header length", path, size),
                 path, "header_length");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) STRATA_THROW(IoError, fmt::format("{}: mmap failed: {}", path, std::strerror(e)), path);
  f.map_ = m;
  f.map_bytes_ = size;
  const auto* base = static_cast<const std::byte*>(m);

  uint64_t n;
  std::memcpy(&n, base, 8);
  if (n > size - 8)
    STRATA_THROW(FormatError,
                 fmt::format("{}: header length {} runs past the end of the file ({} bytes)", path, n, size), path,
                 "header_length");
  if (n > kMaxHeaderBytes)
    STRATA_THROW(FormatError, fmt::format("{}: header length {} exceeds the {} byte limit", path, n, kMaxHeaderBytes),
                 path, "header_length");
  const char* hbegin = reinterpret_cast<const char*>(base + 8);
  std::vector<std::string> keys;  // header order
  json header = parse_keeping_order(hbegin, hbegin + n, path, "header JSON", "header", "", keys);
  if (!header.is_object())
    STRATA_THROW(FormatError, fmt::format("{}: header JSON is a {}, expected an object", path, header.type_name()),
                 path, "header");

  f.data_ = base + 8 + n;
  size_t data_bytes = size - 8 - size_t(n);
  f.tensors_.reserve(keys.size());
  for (const auto& key : keys) {
    const json& val = *header.find(key);
    if (key == "__metadata__") {
      if (!val.is_object())
        STRATA_THROW(FormatError, fmt::format("{}: __metadata__ is a {}, expected an object", path, val.type_name()),
                     path, "__metadata__");
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          STRATA_THROW(FormatError,
                       fmt::format("{}: __metadata__.{} is a {}, expected a string", path, mk, mv.type_name()), path,
                       "__metadata__." + mk);
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorInfo t = parse_entry(path, key, val);
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
      STRATA_THROW(FormatError,
                   fmt::format("{}: tensor '{}': data_offsets [{}, {}] out of range of the {}-byte data section", path,
                               key, t.offset, t.offset + t.bytes, data_bytes),
                   path, key + ".data_offsets");
    f.by_name_[key] = f.tensors_.size();
    f.tensors_.push_back(std::move(t));
  }

  // Overlap check: sorted by begin, each tensor must start at or after the previous one's end.
  std::vector<const TensorInfo*> order;
  for (const auto& t : f.tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](auto* a, auto* b) { return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo *a = order[i - 1], *b = order[i];
    if (b->offset < a->offset + a->bytes)
      STRATA_THROW(FormatError,
                   fmt::format("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path, a->name, a->offset,
                               a->offset + a->bytes, b->name, b->offset, b->offset + b->bytes),
                   path, b->name + ".data_offsets");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

void SafetensorsFile::unmap() noexcept {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
}

void SafetensorsFile::release() noexcept {
  if (!map_) return;
  unmap();  // mapped pages are not dropped
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void Checkpoint::release() noexcept {
  for (SafetensorsFile& f : shards_) f.release();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      data_(o.data_),
      tensors_(std::move(o.tensors_)),
      by_name_(std::move(o.by_name_)),
      metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
  o.data_ = nullptr;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    data_ = o.data_;
    tensors_ = std::move(o.tensors_);
    by_name_ = std::move(o.by_name_);
    metadata_ = std::move(o.metadata_);
    o.map_ = nullptr;
    o.data_ = nullptr;
  }
  return *this;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------- Checkpoint

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    STRATA_THROW(IoError, fmt::format("{}: checkpoint directory not found", dir), dir);
  Checkpoint c;
  c.dir_ = dir;
  std::string index_path = join(dir, kIndexName);
  std::string single_path = join(dir, "model.safetensors");

  if (!exists(index_path)) {
    if (!exists(single_path))
      STRATA_THROW(IoError, fmt::format("{}: neither model.safetensors nor {} found", dir, kIndexName), dir);
    c.source_ = single_path;
    c.shards_.push_back(SafetensorsFile::open(single_path));
    for (size_t i = 0; i < c.shards_[0].tensors().size(); ++i) {
      const auto& name = c.shards_[0].tensors()[i].name;
      c.names_.push_back(name);
      c.entries_[name] = Entry{0, i};
    }
    return c;
  }

  c.source_ = index_path;
  auto bad = [&](const std::string& field, const std::string& msg) {
    STRATA_THROW(FormatError, fmt::format("{}: {}", index_path, msg), index_path, field);
  };
  std::string text = read_regular_file(index_path, "checkpoint index", kMaxIndexBytes);
  std::vector<std::string> names;  // weight_map order
  json index =
      parse_keeping_order(text.data(), text.data() + text.size(), index_path, "JSON", "index", "weight_map", names);
  if (!index.is_object()) bad("index", "expected a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    bad("weight_map", "missing 'weight_map' object (tensor name -> shard file)");
  if (wm->empty()) bad("weight_map", "'weight_map' is empty");

  std::map<std::string, size_t> shard_index;
  for (const auto& name : names) {
    auto found = wm->find(name);
    if (found == wm->end()) bad("weight_map." + name, fmt::format("weight_map lost key '{}' while parsing", name));
    const json& file = *found;
    if (!file.is_string() || file.get<std::string>().empty())
      bad("weight_map." + name,
          fmt::format("weight_map['{}'] is a {}, expected a shard file name", name, file.type_name()));
    std::string shard = file.get<std::string>();
    // A plain file name in this directory: `../x`, `/etc/x`, `a/b` and an embedded NUL (which
    // the file system would cut the name at) would read a file the checkpoint does not hold. The
    // file itself may be a symlink, as the Hugging Face cache makes them.
    if (shard.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos || shard == "." || shard == "..")
      bad("weight_map." + name,
          fmt::format("weight_map['{}'] is {}, expected a plain file name in the checkpoint directory (no '/', '\\', "
                      "'..' or NUL)",
                      name, json(shard).dump()));
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      std::string sp = join(dir, shard);
      if (!exists(sp))
        STRATA_THROW(IoError, fmt::format("{}: shard listed in {} (weight_map['{}']) not found", sp, kIndexName, name),
                     sp);
      it = shard_index.emplace(shard, c.shards_.size()).first;
      c.shards_.push_back(SafetensorsFile::open(sp));
    }
    const SafetensorsFile& sf = c.shards_[it->second];
    const TensorInfo* t = sf.find(name);
    if (!t)
      STRATA_THROW(FormatError,
                   fmt::format("{}: tensor '{}' listed in {} is not in this shard", sf.path(), name, kIndexName),
                   sf.path(), name);
    c.names_.push_back(name);
    c.entries_[name] = Entry{it->second, size_t(t - sf.tensors().data())};
  }
  return c;
}

bool Checkpoint::has(std::string_view name) const {
  return entries_.find(name) != entries_.end();
}

std::vector<std::string> Checkpoint::names() const {
  return names_;
}

const Checkpoint::Entry& Checkpoint::entry(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    STRATA_THROW(FormatError, fmt::format("{}: tensor '{}' not found", source_, name), source_, std::string(name));
  return it->second;
}

const TensorInfo& Checkpoint::info(std::string_view name) const {
  const Entry& e = entry(name);
  return shards_[e.shard].tensors()[e.tensor];
}

void Checkpoint::read_f32(std::string_view name, const std::vector<int64_t>& expected, float* dst) const {
  const Entry& e = entry(name);
  const SafetensorsFile& sf = shards_[e.shard];
  const TensorInfo& t = sf.tensors()[e.tensor];
  if (sf.released())
    STRATA_THROW(Error, fmt::format("{}: tensor '{}' read after the checkpoint was released", sf.path(), t.name));
  if (t.shape != expected)
    STRATA_THROW(FormatError,
                 fmt::format("{}: tensor '{}' has shape {}, expected {}", sf.path(), t.name, shape_str(t.shape),
                             shape_str(expected)),
                 sf.path(), t.name);
  // A weight is floating point: integers converted to floats would load a different model silently.
  if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
    STRATA_THROW(FormatError,
                 fmt::format("{}: tensor '{}' is stored as {}, expected a floating-point weight (F32, BF16 or F16)",
                             sf.path(), t.name, dtype_safetensors_name(t.dtype)),
                 sf.path(), t.name);
  size_t n = t.bytes / dtype_size(t.dtype);
  const std::byte* src = sf.data(t);
  // The data section has no alignment guarantee; convert_to_f32 reads typed pointers.
  if (reinterpret_cast<uintptr_t>(src) % dtype_size(t.dtype) != 0) {
    std::vector<std::byte> aligned(src, src + t.bytes);
    convert_to_f32(dst, aligned.data(), t.dtype, n);
  } else {
    convert_to_f32(dst, src, t.dtype, n);
  }
  // A NaN or inf weight would only surface steps later as "training diverged"; name it here. The
  // exponent test does not depend on -ffinite-math-only.
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, dst + i, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u)
      STRATA_THROW(FormatError,
                   fmt::format("{}: tensor '{}' holds a non-finite value ({}) at index {} of {}: the checkpoint is "
                               "corrupt",
                               sf.path(), t.name, dst[i], i, n),
                   sf.path(), t.name);
  }
}

// ---------------------------------------------------------------- writer

void save_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // The header text is built entry by entry: inserting into an ordered_json is a linear search
  // per key, quadratic over a checkpoint's tensors.
  ojson meta = ojson::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  std::string text = R"({"__metadata__":)" + meta.dump();

  std::set<std::string_view> seen;
  std::vector<size_t> sizes;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !seen.insert(t.name).second)
      STRATA_THROW(Error, fmt::format("{}: bad or duplicate tensor name '{}'", path, t.name));
    size_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        STRATA_THROW(Error, fmt::format("{}: tensor '{}' has negative shape {}", path, t.name, shape_str(t.shape)));
      numel *= size_t(d);
    }
    size_t bytes = numel * dtype_size(t.dtype);
    if (bytes > 0 && !t.data) STRATA_THROW(Error, fmt::format("{}: tensor '{}' has no data", path, t.name));
    // One format call: `"," + std::string` trips GCC 12's -Wrestrict (a false positive).
    text += fmt::format(R"(,{}:{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}})", json(t.name).dump(),
                        dtype_safetensors_name(t.dtype), fmt::join(t.shape, ","), offset, offset + bytes);
    sizes.push_back(bytes);
    offset += bytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  uint64_t n = text.size();

  AtomicFile f(path);
  f.write(&n, 8);
  f.write(text.data(), text.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i]) f.write(tensors[i].data, sizes[i]);
  f.commit();
}

}  // namespace strata::io
