#include "model/run/train_config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/arena.h"
#include "io/regular_file.h"

namespace strata {

size_t parse_bytes(const std::string& s, const std::string& where) {
  size_t i = 0;
  double v = 0;
  try {
    v = std::stod(s, &i);
  } catch (...) {
    STRATA_THROW(ConfigError, fmt::format("{}: '{}' is not a size (expected e.g. 20GiB, 512MiB, 1e9)", where, s), where,
                 s);
  }
  std::string unit = s.substr(i);
  unit.erase(0, unit.find_first_not_of(' '));
  double mul = 1;
  if (unit.empty() || unit == "B")
    mul = 1;
  else if (unit == "KiB" || unit == "K")
    mul = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mul = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    mul = 1e3;
  else if (unit == "MB")
    mul = 1e6;
  else if (unit == "GB")
    mul = 1e9;
  else if (unit == "TB")
    mul = 1e12;
  else
    STRATA_THROW(ConfigError,
                 fmt::format("{}: unknown size unit '{}' in '{}' (expected B, KiB, MiB, GiB, TiB, KB, "
                             "MB, GB or TB)",
                             where, unit, s),
                 where, s);
  if (!(v >= 0) || !std::isfinite(v))
    STRATA_THROW(ConfigError, fmt::format("{}: size '{}' must be non-negative", where, s), where, s);
  // Converting a double at or above 2^64 to size_t is undefined behaviour.
  if (v * mul >= 18446744073709551616.0)
    STRATA_THROW(ConfigError, fmt::format("{}: size '{}' is too large", where, s), where, s);
  return size_t(v * mul);
}

int longest_batch_len(const TrainConfig& c) {
  return c.batch_lengths.empty() ? c.seq : c.batch_lengths.back();
}

DatasetOptions dataset_options(const TrainConfig& c) {
  return DatasetOptions{c.datasets, c.seq, c.train_on_inputs, c.drop_excess, c.sample_packing};
}

float check_number(double v, NumberRule rule, const Origin& o) {
  const char* want = rule == NumberRule::positive       ? "a positive finite number"
                     : rule == NumberRule::non_negative ? "a finite number >= 0"
                                                        : "a number in [0, 1)";
  const bool ok = std::isfinite(v) && std::fabs(v) <= double(std::numeric_limits<float>::max()) &&
                  (rule == NumberRule::positive       ? v > 0
                   : rule == NumberRule::non_negative ? v >= 0
                                                      : v >= 0 && v < 1);
  // The float conversion would round a tiny positive value to 0.
  if (!ok || (v > 0 && float(v) == 0.0f))
    throw ConfigError(fmt::format("{} must be {}, got {}", o.where, want, v), o.file, o.field);
  return float(v);
}

int check_int(long long v, int lo, const Origin& o) {
  constexpr long long hi = std::numeric_limits<int>::max();
  if (v < lo || v > hi)
    throw ConfigError(fmt::format("{} must be an integer >= {} (at most {}), got {}", o.where, lo, hi, v), o.file,
                      o.field);
  return int(v);
}

int parse_zero_stage(long long v, const Origin& o) {
  if (v < 0 || v > 3)
    throw ConfigError(fmt::format("{} must be 0 (no sharding), 1 (optimizer state sharded), 2 (gradients too) or 3 "
                                  "(layer weights too), got {}",
                                  o.where, v),
                      o.file, o.field);
  return int(v);
}

void check_grad_reduce(const TrainConfig& c) {
  if (c.recipe.gradients != GradPrecision::bf16 || c.grad_reduce != DType::f32 || c.grad_reduce_origin.where.empty())
    return;
  throw ConfigError(fmt::format("{} is fp32, but gradients: bf16 keeps the gradients in bf16 and the ranks sum them in "
                                "bf16 as they are (there is no fp32 gradient to sum); drop grad_reduce_dtype "
                                "(--grad-reduce), or set gradients: fp32",
                                c.grad_reduce_origin.where),
                    c.grad_reduce_origin.file, c.grad_reduce_origin.field);
}

DType effective_grad_reduce(const TrainConfig& c) {
  return c.recipe.gradients == GradPrecision::bf16 ? DType::bf16 : c.grad_reduce;
}

DType parse_grad_reduce(const std::string& s, const Origin& o) {
  if (auto t = parse_name(kGradReduceNames, s)) return *t;
  throw ConfigError(fmt::format("{} must be {}, got '{}'", o.where, name_choices(kGradReduceNames), s), o.file,
                    o.field);
}

int check_pad_vocab(long long v, const Origin& o) {
  if (v < 1 || v > 65536)
    throw ConfigError(fmt::format("{} must be an integer from 1 (no padding) to 65536, got {}", o.where, v), o.file,
                      o.field);
  return int(v);
}

int parse_mlp_tiles(const std::string& s, const Origin& o) {
  if (s == "auto") return 0;
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || v < 1 || v > (1 << 20))
    throw ConfigError(
        fmt::format("{} must be auto or a whole number of tiles from 1 (untiled) to {}, got '{}'", o.where, 1 << 20, s),
        o.file, o.field);
  return int(v);
}

LrScheduler parse_lr_scheduler(const std::string& s, const Origin& o) {
  if (auto v = parse_name(kLrSchedulers, s)) return *v;
  throw ConfigError(fmt::format("{}: unknown scheduler '{}' (expected {})", o.where, s, name_choices(kLrSchedulers)),
                    o.file, o.field);
}

std::string parse_resume(const std::string& s) {
  if (s == "true" || s == "True" || s == "auto") return "auto";
  if (s == "false" || s == "False") return "";
  return s;
}

void check_lora_targets(const std::vector<std::string>& modules, const Origin& o) {
  static const std::vector<std::string> known = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  const std::string list = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj";
  if (modules.empty())
    throw ConfigError(fmt::format("{} is empty: LoRA would train nothing (expected some of {})", o.where, list), o.file,
                      o.field);
  for (size_t i = 0; i < modules.size(); ++i) {
    if (std::find(known.begin(), known.end(), modules[i]) == known.end())
      throw ConfigError(fmt::format("{}: unknown module '{}' (expected {})", o.where, modules[i], list), o.file,
                        o.field);
    if (std::find(modules.begin(), modules.begin() + long(i), modules[i]) != modules.begin() + long(i))
      throw ConfigError(fmt::format("{}: module '{}' is listed twice", o.where, modules[i]), o.file, o.field);
  }
}

void check_save_dir(const std::string& dir, size_t bytes, const std::vector<std::string>& files) {
  auto fail = [&](const std::string& why) {
    throw IoError(fmt::format("{}: cannot save the trained model there: {} (checked before training, so no run "
                              "is lost; choose another --save / output_dir)",
                              dir, why),
                  dir);
  };
  if (dir.empty()) fail("the directory name is empty");
  // The nearest existing ancestor: the directory itself, or where create_directories starts.
  std::error_code ec;
  const std::filesystem::path full = std::filesystem::absolute(dir, ec);
  std::filesystem::path cur = ec ? std::filesystem::path(dir) : full;
  struct stat st {};
  while (::stat(cur.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) fail(fmt::format("{}: {}", cur.string(), std::strerror(errno)));
    if (!cur.has_relative_path()) fail("no part of the path exists");
    cur = cur.parent_path();
  }
  if (!S_ISDIR(st.st_mode))
    fail(cur == full ? std::string("it is not a directory")
                     : fmt::format("{} is not a directory, so it cannot be created", cur.string()));
  const std::string probe = (cur / fmt::format(".strata-save-probe.{}", ::getpid())).string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(fmt::format("cannot create a file in {}: {}", cur.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs vfs {};
  if (::statvfs(cur.c_str(), &vfs) == 0) {
    const double avail = double(vfs.f_bavail) * double(vfs.f_frsize);
    if (avail < double(bytes))
      fail(fmt::format("the checkpoint needs about {} and {} has {} free", format_bytes(bytes), cur.string(),
                       format_bytes(size_t(avail))));
  }
  if (cur != full) return;  // the directory will be created: nothing in it yet
  for (const std::string& name : files) {
    struct stat fs {};
    const std::string p = (cur / name).string();
    if (::lstat(p.c_str(), &fs) == 0 && !S_ISREG(fs.st_mode))
      fail(fmt::format("{} is there and is not a regular file, so it cannot be replaced", p));
  }
}

}  // namespace strata
