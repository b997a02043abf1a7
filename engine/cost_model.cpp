#include "engine/cost_model.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "engine/json_limits.h"

namespace strata {

namespace {

using json = nlohmann::ordered_json;

const char* kDatasheetSource =
    "datasheet/anchors, not calibrated: GEMM fitted to the bf16 788-799 TFLOP/s measured on the H200 host "
    "(shared/ANCHORS.md; the H100 is the same GH100 chip), HBM from the datasheet, pinned copies 55 GB/s "
    "measured on the H200 host, attention throughput assumed from published FlashAttention-3/cuDNN numbers; "
    "cuDNN 9.14 attention plan workspaces measured on the H200 host (tests/gpu/sim_gpu_test.cpp)";

// The disk tier: docs/BENCHMARKS.md ("Memory tiers"), measured in the same command as the tier benchmarks.
const char* kH200HostDisk =
    "O_DIRECT on the H200 host's local disk, strata-bench --measure-disk (4 MiB requests, queue depth 8), "
    "2026-11-26: 2.43 GB/s write, 2.14 GB/s read (docs/BENCHMARKS.md)";

DeviceProfile hopper(std::string name, std::string match, size_t memory_bytes, double hbm_gbps,
                     std::string disk_source) {
  DeviceProfile p;
  p.name = std::move(name);
  p.match = std::move(match);
  p.source = kDatasheetSource;
  p.memory_bytes = memory_bytes;
  p.context_bytes = size_t(512) << 20;
  p.matmul_tflops = 850;
  p.matmul_half_dim = 128;
  p.attention_tflops = 500;
  p.attention_bwd_tflops = 380;
  p.hbm_gbps = hbm_gbps;
  p.h2d_gbps = 55;
  p.d2h_gbps = 55;
  // Both directions at once: 85.0-89.0 GB/s in total on the H100 and the H200 hosts (strata-calibrate
  // --quick, 2026-11-27; docs/BENCHMARKS.md), not 110: the link is 0.8 duplex.
  p.copy_both_gbps = 88;
  p.launch_overhead_us = 3;
  p.adamw_q8_gelems = 64;  // measured on an H100 (1B and 3B steps); the H200 has the same SMs and clocks
  p.disk_write_gbps = 2.43;
  p.disk_read_gbps = 2.14;
  p.disk_source = std::move(disk_source);
  p.attention_plan_ws_fwd_bytes = 256;
  p.attention_plan_ws_bwd_bytes = 256;
  p.attention_plan_ws_bwd_gqa_copies = 1;
  return p;
}

template <class T>
T field(const json& j, const char* key, const std::string& where, bool required = true, T def = T()) {
  if (!j.contains(key)) {
    if (!required) return def;
    STRATA_THROW(ConfigError, fmt::format("{}: device profile field '{}' is missing", where, key), where, key);
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    STRATA_THROW(ConfigError, fmt::format("{}: device profile field '{}' has the wrong type", where, key), where, key);
  }
}

// "attention_long": [{"tokens": T, "fwd_tflops": F, "bwd_tflops": B}, ...], T past the fit's range and rising,
// both rates > 0. Missing: empty.
std::vector<DeviceProfile::AttentionRate> attention_long_from(const json& j, const std::string& where) {
  std::vector<DeviceProfile::AttentionRate> out;
  if (!j.contains("attention_long")) return out;
  const json& a = j.at("attention_long");
  const auto bad = [&](const std::string& what) {
    STRATA_THROW(ConfigError, fmt::format("{}: device profile field 'attention_long' {}", where, what), where,
                 "attention_long");
  };
  if (!a.is_array()) bad("must be a list of {tokens, fwd_tflops, bwd_tflops} objects");
  for (size_t i = 0; i < a.size(); i++) {
    const json& e = a[i];
    DeviceProfile::AttentionRate r;
    const auto number = [&](const char* key, double& v) {
      if (!e.is_object() || !e.contains(key) || !e.at(key).is_number()) return false;
      v = e.at(key).get<double>();
      return true;
    };
    if (!number("tokens", r.tokens) || !number("fwd_tflops", r.fwd_tflops) || !number("bwd_tflops", r.bwd_tflops))
      bad(fmt::format("entry {} must be an object with numbers 'tokens', 'fwd_tflops' and 'bwd_tflops'", i));
    const double after = out.empty() ? DeviceProfile::kAttentionFitMaxT : out.back().tokens;
    if (!(r.tokens > after))
      bad(fmt::format("entry {}: tokens must exceed {:.0f} (the {}), got {}", i, after,
                      out.empty() ? "fit's longest length" : "previous entry's", r.tokens));
    if (!(r.fwd_tflops > 0) || !(r.bwd_tflops > 0) || !std::isfinite(r.fwd_tflops) || !std::isfinite(r.bwd_tflops))
      bad(fmt::format("entry {}: fwd_tflops and bwd_tflops must be finite and > 0, got {} and {}", i, r.fwd_tflops,
                      r.bwd_tflops));
    out.push_back(r);
  }
  return out;
}

}  // namespace

size_t DeviceProfile::default_arena_bytes() const {
  const size_t headroom = size_t(2) << 30;  // what the cuda backend leaves free (backend_cuda.cpp)
  size_t free_b = memory_bytes > context_bytes ? memory_bytes - context_bytes : 0;
  return free_b > headroom ? free_b - headroom : free_b / 2;
}

std::string profile_to_json(const DeviceProfile& p) {
  json j;
  j["name"] = p.name;
  j["match"] = p.match;
  j["source"] = p.source;
  j["memory_bytes"] = p.memory_bytes;
  j["context_bytes"] = p.context_bytes;
  j["matmul_tflops"] = p.matmul_tflops;
  if (p.matmul_fp8_tflops > 0) j["matmul_fp8_tflops"] = p.matmul_fp8_tflops;
  if (p.fp8_cast_gbps > 0) j["fp8_cast_gbps"] = p.fp8_cast_gbps;
  j["matmul_half_dim"] = p.matmul_half_dim;
  j["matmul_unaligned_factor"] = p.matmul_unaligned_factor;
  j["attention_flash_tflops"] = p.attention_flash_tflops;
  j["attention_tflops"] = p.attention_tflops;
  j["attention_bwd_tflops"] = p.attention_bwd_tflops;
  j["attention_half_tokens"] = p.attention_half_tokens;
  j["attention_half_dim"] = p.attention_half_dim;
  if (!p.attention_long.empty()) {
    json pts = json::array();
    for (const auto& r : p.attention_long)
      pts.push_back({{"tokens", r.tokens}, {"fwd_tflops", r.fwd_tflops}, {"bwd_tflops", r.bwd_tflops}});
    j["attention_long"] = pts;
  }
  j["hbm_gbps"] = p.hbm_gbps;
  j["h2d_gbps"] = p.h2d_gbps;
  j["d2h_gbps"] = p.d2h_gbps;
  j["copy_both_gbps"] = p.copy_both_gbps;
  j["adamw_q8_gelems"] = p.adamw_q8_gelems;
  j["launch_overhead_us"] = p.launch_overhead_us;
  j["nccl_busbw_gbps"] = p.nccl_busbw_gbps;
  j["nccl_latency_us"] = p.nccl_latency_us;
  j["nccl_compute_overlap"] = p.nccl_compute_overlap;
  j["disk_write_gbps"] = p.disk_write_gbps;
  j["disk_read_gbps"] = p.disk_read_gbps;
  j["disk_source"] = p.disk_source;
  j["pinned_alloc_gbps"] = p.pinned_alloc_gbps;
  j["first_step_tuning_s"] = p.first_step_tuning_s;
  if (p.pinned_first_touch_gbps > 0) j["pinned_first_touch_gbps"] = p.pinned_first_touch_gbps;
  j["attention_tune_candidates_fwd"] = p.attention_tune_candidates_fwd;
  j["attention_tune_candidates_bwd"] = p.attention_tune_candidates_bwd;
  j["attention_plan_build_s"] = p.attention_plan_build_s;
  j["attention_stand_in_build_s"] = p.attention_stand_in_build_s;
  j["attention_plan_ws_fwd_bytes"] = p.attention_plan_ws_fwd_bytes;
  j["attention_plan_ws_bwd_bytes"] = p.attention_plan_ws_bwd_bytes;
  j["attention_plan_ws_bwd_gqa_copies"] = p.attention_plan_ws_bwd_gqa_copies;
  j["attention_dq_accum"] = p.attention_dq_accum;
  return j.dump(2) + "\n";
}

DeviceProfile profile_from_json(const std::string& text, const std::string& where) {
  json j;
  if (auto deep = json_nesting_error(text)) STRATA_THROW(ConfigError, fmt::format("{}: {}", where, *deep), where, "");
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    STRATA_THROW(ConfigError, fmt::format("{}: not valid JSON: {}", where, e.what()), where, "");
  }
  if (!j.is_object()) STRATA_THROW(ConfigError, fmt::format("{}: a device profile is a JSON object", where), where, "");
  DeviceProfile p;
  p.name = field<std::string>(j, "name", where);
  p.match = field<std::string>(j, "match", where, false, p.name);
  p.source = field<std::string>(j, "source", where, false, "unknown");
  p.memory_bytes = field<size_t>(j, "memory_bytes", where);
  p.context_bytes = field<size_t>(j, "context_bytes", where, false, 0);
  p.matmul_tflops = field<double>(j, "matmul_tflops", where);
  p.matmul_half_dim = field<double>(j, "matmul_half_dim", where, false, 0.0);
  p.matmul_fp8_tflops = field<double>(j, "matmul_fp8_tflops", where, false, 0.0);
  p.fp8_cast_gbps = field<double>(j, "fp8_cast_gbps", where, false, 0.0);
  if (!(p.fp8_cast_gbps >= 0))
    STRATA_THROW(ConfigError,
                 fmt::format("{}: device profile field 'fp8_cast_gbps' must be >= 0 (0: hbm_gbps), got {}", where,
                             p.fp8_cast_gbps),
                 where, "fp8_cast_gbps");
  if (!(p.matmul_fp8_tflops >= 0))
    STRATA_THROW(ConfigError,
                 fmt::format("{}: device profile field 'matmul_fp8_tflops' must be >= 0 (0: not measured), got {}",
                             where, p.matmul_fp8_tflops),
                 where, "matmul_fp8_tflops");
  p.attention_flash_tflops =
      field<double>(j, "attention_flash_tflops", where, false, DeviceProfile{}.attention_flash_tflops);
  if (!(p.attention_flash_tflops >= 0))
    STRATA_THROW(
        ConfigError,
        fmt::format("{}: device profile field 'attention_flash_tflops' must be >= 0 (0 = attention_tflops), got {}",
                    where, p.attention_flash_tflops),
        where, "attention_flash_tflops");
  p.matmul_unaligned_factor =
      field<double>(j, "matmul_unaligned_factor", where, false, DeviceProfile{}.matmul_unaligned_factor);
  if (!(p.matmul_unaligned_factor > 0 && p.matmul_unaligned_factor <= 1))
    STRATA_THROW(ConfigError,
                 fmt::format("{}: device profile field 'matmul_unaligned_factor' must be in (0, 1], got {}", where,
                             p.matmul_unaligned_factor),
                 where, "matmul_unaligned_factor");
  p.attention_tflops = field<double>(j, "attention_tflops", where);
  p.attention_bwd_tflops = field<double>(j, "attention_bwd_tflops", where, false, 0.0);
  p.attention_half_tokens = field<double>(j, "attention_half_tokens", where, false, 0.0);
  p.attention_half_dim = field<double>(j, "attention_half_dim", where, false, 0.0);
  p.attention_long = attention_long_from(j, where);
  p.hbm_gbps = field<double>(j, "hbm_gbps", where);
  p.h2d_gbps = field<double>(j, "h2d_gbps", where);
  p.d2h_gbps = field<double>(j, "d2h_gbps", where);
  p.copy_both_gbps = field<double>(j, "copy_both_gbps", where, false, 0.0);
  p.adamw_q8_gelems = field<double>(j, "adamw_q8_gelems", where, false, 0.0);
  p.launch_overhead_us = field<double>(j, "launch_overhead_us", where, false, 0.0);
  p.nccl_busbw_gbps = field<double>(j, "nccl_busbw_gbps", where, false, DeviceProfile{}.nccl_busbw_gbps);
  p.nccl_latency_us = field<double>(j, "nccl_latency_us", where, false, DeviceProfile{}.nccl_latency_us);
  p.nccl_compute_overlap = field<double>(j, "nccl_compute_overlap", where, false, DeviceProfile{}.nccl_compute_overlap);
  if (!(p.nccl_compute_overlap >= 0 && p.nccl_compute_overlap <= 1))
    STRATA_THROW(ConfigError,
                 fmt::format("{}: device profile field 'nccl_compute_overlap' must be in [0, 1], got {}", where,
                             p.nccl_compute_overlap),
                 where, "nccl_compute_overlap");
  p.disk_write_gbps = field<double>(j, "disk_write_gbps", where, false, 0.0);
  p.disk_read_gbps = field<double>(j, "disk_read_gbps", where, false, 0.0);
  p.disk_source = field<std::string>(j, "disk_source", where, false, "");
  p.pinned_alloc_gbps = field<double>(j, "pinned_alloc_gbps", where, false, DeviceProfile{}.pinned_alloc_gbps);
  p.first_step_tuning_s = field<double>(j, "first_step_tuning_s", where, false, DeviceProfile{}.first_step_tuning_s);
  p.pinned_first_touch_gbps = field<double>(j, "pinned_first_touch_gbps", where, false, 0.0);
  if (!(p.pinned_first_touch_gbps >= 0) || !std::isfinite(p.pinned_first_touch_gbps))
    STRATA_THROW(
        ConfigError,
        fmt::format("{}: device profile field 'pinned_first_touch_gbps' must be >= 0 (0: not measured), got {}", where,
                    p.pinned_first_touch_gbps),
        where, "pinned_first_touch_gbps");
  p.attention_tune_candidates_fwd =
      field<int>(j, "attention_tune_candidates_fwd", where, false, DeviceProfile{}.attention_tune_candidates_fwd);
  p.attention_tune_candidates_bwd =
      field<int>(j, "attention_tune_candidates_bwd", where, false, DeviceProfile{}.attention_tune_candidates_bwd);
  p.attention_plan_build_s =
      field<double>(j, "attention_plan_build_s", where, false, DeviceProfile{}.attention_plan_build_s);
  p.attention_stand_in_build_s =
      field<double>(j, "attention_stand_in_build_s", where, false, DeviceProfile{}.attention_stand_in_build_s);
  for (auto [key, v] : {std::pair{"attention_tune_candidates_fwd", p.attention_tune_candidates_fwd},
                        {"attention_tune_candidates_bwd", p.attention_tune_candidates_bwd}})
    if (v < 1)
      STRATA_THROW(ConfigError,
                   fmt::format("{}: device profile field '{}' must be >= 1 (cuDNN's own plan), got {}", where, key, v),
                   where, key);
  if (!(p.pinned_alloc_gbps > 0))
    STRATA_THROW(
        ConfigError,
        fmt::format("{}: device profile field 'pinned_alloc_gbps' must be > 0, got {}", where, p.pinned_alloc_gbps),
        where, "pinned_alloc_gbps");
  p.attention_plan_ws_fwd_bytes = field<size_t>(j, "attention_plan_ws_fwd_bytes", where, false, 0);
  p.attention_plan_ws_bwd_bytes = field<size_t>(j, "attention_plan_ws_bwd_bytes", where, false, 0);
  p.attention_plan_ws_bwd_gqa_copies = field<int>(j, "attention_plan_ws_bwd_gqa_copies", where, false, 0);
  p.attention_dq_accum = field<bool>(j, "attention_dq_accum", where, false, true);
  for (auto [key, v] : {std::pair{"matmul_tflops", p.matmul_tflops},
                        {"attention_tflops", p.attention_tflops},
                        {"hbm_gbps", p.hbm_gbps},
                        {"h2d_gbps", p.h2d_gbps},
                        {"d2h_gbps", p.d2h_gbps},
                        {"nccl_busbw_gbps", p.nccl_busbw_gbps}})
    if (!(v > 0))
      STRATA_THROW(ConfigError, fmt::format("{}: device profile field '{}' must be > 0, got {}", where, key, v), where,
                   key);
  // Optional: 0 = not measured (a disk-tier forecast then says how to measure it).
  for (auto [key, v] : {std::pair{"disk_write_gbps", p.disk_write_gbps},
                        {"disk_read_gbps", p.disk_read_gbps},
                        {"copy_both_gbps", p.copy_both_gbps},
                        {"adamw_q8_gelems", p.adamw_q8_gelems},
                        {"attention_half_tokens", p.attention_half_tokens},
                        {"attention_half_dim", p.attention_half_dim},
                        {"nccl_latency_us", p.nccl_latency_us},
                        {"first_step_tuning_s", p.first_step_tuning_s},
                        {"attention_plan_build_s", p.attention_plan_build_s},
                        {"attention_stand_in_build_s", p.attention_stand_in_build_s}})
    if (!(v >= 0))
      STRATA_THROW(ConfigError,
                   fmt::format("{}: device profile field '{}' must be >= 0 (0 = not measured), got {}", where, key, v),
                   where, key);
  return p;
}

DeviceProfile load_profile(const std::string& path) {
  // O_NONBLOCK, then fstat: a FIFO or device named by --profile is refused at once instead of waited on
  // (engine sits below io/regular_file.h, so the check is restated here). At most 1 MiB.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    STRATA_THROW(IoError, fmt::format("{}: cannot open the device profile: {}", path, std::strerror(errno)), path);
  struct stat st {};
  std::string text;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  constexpr off_t kMax = off_t(1) << 20;
  if (regular && st.st_size <= kMax) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t k = ::read(fd, text.data() + got, text.size() - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += size_t(k);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!regular)
    STRATA_THROW(
        IoError,
        fmt::format("{}: the device profile is not a regular file (a FIFO, device, socket or directory)", path), path);
  if (st.st_size > kMax)
    STRATA_THROW(IoError,
                 fmt::format("{}: the device profile is {} bytes, over the 1 MiB a profile can be", path, st.st_size),
                 path);
  return profile_from_json(text, path);
}

void save_profile(const DeviceProfile& p, const std::string& path) {
  std::ofstream f(path, std::ios::trunc);
  f << profile_to_json(p);
  if (!f) STRATA_THROW(IoError, fmt::format("{}: cannot write the device profile", path), path);
}

const std::vector<std::pair<std::string, DeviceProfile>>& builtin_profiles() {
  // Totals as the driver reports them (81559 MiB and 143771 MiB).
  static const std::vector<std::pair<std::string, DeviceProfile>> profiles = {
      {"h100_80gb", hopper("NVIDIA H100 80GB HBM3", "H100", size_t(81559) << 20, 3350,
                           std::string(kH200HostDisk) +
                               "; the H100 host's disk was not measured: run strata-calibrate --disk DIR there")},
      {"h200", hopper("NVIDIA H200", "H200", size_t(143771) << 20, 4800, kH200HostDisk)},
  };
  return profiles;
}

DeviceProfile find_profile(const std::string& name_or_path) {
  for (auto& [name, p] : builtin_profiles())
    if (name == name_or_path) return p;
  if (std::filesystem::exists(name_or_path)) return load_profile(name_or_path);
  std::string known;
  for (auto& [name, p] : builtin_profiles()) known += (known.empty() ? "" : ", ") + name;
  STRATA_THROW(ConfigError,
               fmt::format("device profile '{}' is neither a built-in profile ({}) nor a file", name_or_path, known),
               "command line", "profile");
}

double CostModel::floor(double s) const {
  return std::max(s, p_.launch_overhead_us * 1e-6);
}

namespace {
double gemm_at(const DeviceProfile& p, double tflops, double m, double n, double k, double bytes) {
  auto eff = [&](double d) { return p.matmul_half_dim > 0 ? d / (d + p.matmul_half_dim) : 1.0; };
  // A whole multiple of 8 (d / 8 is exact: fmod's result, at a fraction of its cost in a planner's search).
  auto aligned = [](double d) { return std::floor(d / 8.0) == d / 8.0; };
  const double share = aligned(m) && aligned(n) && aligned(k) ? 1.0 : p.matmul_unaligned_factor;
  const double tput = tflops * 1e12 * eff(m) * eff(n) * eff(k) * share;
  return std::max(2.0 * m * n * k / tput, bytes / (p.hbm_gbps * 1e9));
}
}  // namespace

double CostModel::gemm(double m, double n, double k, double bytes) const {
  return floor(gemm_at(p_, p_.matmul_tflops, m, n, k, bytes));
}

double CostModel::fp8_cast(double bytes) const {
  return floor(bytes / ((p_.fp8_cast_gbps > 0 ? p_.fp8_cast_gbps : p_.hbm_gbps) * 1e9));
}

double CostModel::gemm_fp8(double m, double n, double k, double bytes) const {
  const double tflops =
      p_.matmul_fp8_tflops > 0 ? p_.matmul_fp8_tflops : DeviceProfile::kFp8OverBf16 * p_.matmul_tflops;
  return floor(gemm_at(p_, tflops, m, n, k, bytes));
}

double CostModel::attention_rate(double t, double d, bool backward) const {
  const double asym = (backward && p_.attention_bwd_tflops > 0 ? p_.attention_bwd_tflops : p_.attention_tflops) * 1e12;
  const auto eff_t = [&](double x) { return x / (x + p_.attention_half_tokens); };
  const auto eff_d = [&](double x) { return x / (x + p_.attention_half_dim); };
  const auto& pts = p_.attention_long;
  if (pts.empty() || t <= DeviceProfile::kAttentionFitMaxT || !(d > 0)) return asym * eff_t(t) * eff_d(d);
  // At D = 128 from here: the fit's rate at its longest length, then each point's.
  const double long_d = DeviceProfile::kAttentionLongD, d_share = eff_d(d) / eff_d(long_d);
  double t0 = DeviceProfile::kAttentionFitMaxT, r0 = asym * eff_t(t0) * eff_d(long_d);
  for (const auto& pt : pts) {
    const double r1 = (backward ? pt.bwd_tflops : pt.fwd_tflops) * 1e12;
    if (t <= pt.tokens) {
      const double w = std::log(t / t0) / std::log(pt.tokens / t0);
      return std::exp((1 - w) * std::log(r0) + w * std::log(r1)) * d_share;
    }
    t0 = pt.tokens, r0 = r1;
  }
  return r0 * d_share;
}

double CostModel::attention(double b, double t, double heads, double d, bool backward) const {
  const double fwd_flops = 4.0 * b * heads * t * t * d / 2.0;  // QK^T and PV, causal half
  return floor((backward ? 2.5 : 1.0) * fwd_flops / attention_rate(t, d, backward));
}

double CostModel::attention_pairs(double tokens, double pairs, double heads, double d, bool backward) const {
  const double fwd_flops = 4.0 * heads * pairs * d;  // QK^T and PV over the attended pairs
  const double t = tokens > 0 ? 2.0 * pairs / tokens : 0.0;
  if (!(t > 0) || !(d > 0)) return 0;
  const double tput = p_.attention_flash_tflops > 0 ? p_.attention_flash_tflops * 1e12 : attention_rate(t, d, backward);
  return floor((backward ? 2.5 : 1.0) * fwd_flops / tput);
}

double CostModel::memory(double bytes) const {
  return floor(bytes / (p_.hbm_gbps * 1e9));
}
double CostModel::h2d(double bytes) const {
  return floor(bytes / (p_.h2d_gbps * 1e9));
}
double CostModel::d2h(double bytes) const {
  return floor(bytes / (p_.d2h_gbps * 1e9));
}
double CostModel::duplex_share() const {
  const double both = p_.h2d_gbps + p_.d2h_gbps;
  return p_.copy_both_gbps > 0 && both > 0 ? std::min(1.0, p_.copy_both_gbps / both) : 1.0;
}

void CostModel::require_disk() const {
  for (auto [key, v] : {std::pair{"disk_write_gbps", p_.disk_write_gbps}, {"disk_read_gbps", p_.disk_read_gbps}})
    if (!(v > 0))
      STRATA_THROW(ConfigError,
                   fmt::format("device profile '{}': field '{}' is {} (the disk was not measured), but the plan sends "
                               "slots to the disk tier; run strata-calibrate --disk DIR on the training host (DIR on "
                               "the disk that offload_dir points to) or set disk_write_gbps and disk_read_gbps "
                               "(GB/s) in the profile",
                               p_.name, key, v),
                   p_.name, key);
}
double CostModel::disk_write(double bytes) const {
  require_disk();
  return bytes / (p_.disk_write_gbps * 1e9);
}
double CostModel::disk_read(double bytes) const {
  require_disk();
  return bytes / (p_.disk_read_gbps * 1e9);
}

AttentionFit fit_attention(const std::vector<AttentionSample>& samples) {
  STRATA_CHECK(!samples.empty(), "fit_attention: no samples");
  auto eff = [](const AttentionSample& a, double hT, double hD) { return a.T / (a.T + hT) * (a.D / (a.D + hD)); };
  // The asymptotes for (hT, hD) and the model's squared log error.
  auto fit = [&](double hT, double hD, double& rf, double& rb) {
    double mf = 0, mb = 0, sf = 0, sb = 0;
    for (auto& a : samples) {
      const double e = eff(a, hT, hD);
      mf += a.F / e, mb += 2.5 * a.F / e, sf += a.t_fwd, sb += a.t_bwd;
    }
    rf = mf / sf, rb = mb / sb;
    double err = 0;
    for (auto& a : samples) {
      const double e = eff(a, hT, hD);
      err += std::pow(std::log(a.F / (rf * e) / a.t_fwd), 2) + std::pow(std::log(2.5 * a.F / (rb * e) / a.t_bwd), 2);
    }
    return err;
  };
  AttentionFit out;
  double rf = 0, rb = 0;
  const double n = 2.0 * double(samples.size());
  double best = fit(0, 0, rf, rb);
  out.rms_log_error_flat = std::sqrt(best / n);
  std::vector<double> hts{0};
  for (double hT = 64; hT <= 65536; hT *= 1.1) hts.push_back(hT);
  for (double hT : hts)
    for (double hD = 0; hD <= 256; hD += 2) {
      const double err = fit(hT, hD, rf, rb);
      if (err < best) best = err, out.half_tokens = hT, out.half_dim = hD;
    }
  // A finer pass around the best grid point.
  const double t0 = out.half_tokens, d0 = out.half_dim;
  for (double hT = t0 > 0 ? t0 / 1.1 : 0; hT <= t0 * 1.1; hT = hT > 0 ? hT * 1.005 : 1e300)
    for (double hD = std::max(0.0, d0 - 2); hD <= d0 + 2; hD += 0.1) {
      const double err = fit(hT, hD, rf, rb);
      if (err < best) best = err, out.half_tokens = hT, out.half_dim = hD;
    }
  fit(out.half_tokens, out.half_dim, rf, rb);
  out.fwd_tflops = rf / 1e12, out.bwd_tflops = rb / 1e12;
  out.rms_log_error = std::sqrt(best / n);
  return out;
}

}  // namespace strata
