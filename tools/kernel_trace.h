// GPU time per kernel name over a stretch of a run, from CUPTI's activity records: the kernels of
// cuBLASLt and cuDNN included, each timed where it ran in the step (not serialized as Nsight
// Compute does). torch.profiler reads the same records, so strata-bench's table can be set beside
// `tools/bench/hf_bench.py --profile`. libcupti is loaded at run time: $STRATA_CUPTI_LIB, else
// libcupti.so.13 / libcupti.so on the loader's path, else the CUDA toolkit's copy.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata::tools {

struct KernelTime {
  std::string name;
  double ms = 0;  // summed over every launch
  long launches = 0;
};

// Totals per name -> rows sorted by time, longest first (ties by name).
std::vector<KernelTime> summarize_kernels(const std::map<std::string, std::pair<double, long>>& totals);

// "  12.345 ms  41.2%    16  name" per row, per step (ms / steps), the `top` longest, after a
// header line with the total; names cut at 110 characters.
std::string format_kernel_table(const std::vector<KernelTime>& rows, int steps, int top);

// When the GPU was busy: the union of the kernels' [start, end) intervals (ns), against the span
// from the first start to the last end. Idle = span - busy: launch gaps, host work between
// kernels, and synchronisations (what a denser schedule or CUDA graphs could reclaim).
struct KernelSpan {
  uint64_t start = 0, end = 0;        // ns
  const std::string* name = nullptr;  // may be null
};
struct Timeline {
  struct Gap {
    double ms = 0;
    std::string before, after;  // the kernels that end before and start after it
  };
  double span_ms = 0, busy_ms = 0, idle_ms = 0;
  long gaps_over_20us = 0;       // idle stretches longer than 20 us
  double gaps_over_20us_ms = 0;  // their total
  double longest_gap_ms = 0;
  std::vector<Gap> longest;  // the kLongest longest gaps, longest first
  static constexpr size_t kLongest = 6;
};
Timeline summarize_timeline(std::vector<KernelSpan> spans);
// "span, busy, idle" per step, one line; then one line per gap of `longest` (names cut at 60).
std::string format_timeline(const Timeline& t, int steps);

class KernelTrace {
 public:
  // Starts recording kernel activity. nullptr, with *why set, when CUPTI cannot be loaded or
  // refuses (no GPU, another profiler attached, a build without CUDA).
  static std::unique_ptr<KernelTrace> start(std::string* why);
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  // Flushes and stops recording; the kernels seen since start().
  std::vector<KernelTime> stop();
  const std::string& library() const { return library_; }
  // The busy/idle summary of the kernels stop() returned.
  const Timeline& timeline() const { return timeline_; }

 private:
  KernelTrace() = default;
  std::string library_;
  bool running_ = false;
  Timeline timeline_;
};

}  // namespace strata::tools
