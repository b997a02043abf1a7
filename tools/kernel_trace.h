// GPU time per kernel name over a stretch of a run, from CUPTI's activity records: the kernels of
// cuBLASLt and cuDNN included, each timed where it ran in the step (not serialized as Nsight
// Compute does). torch.profiler reads the same records, so strata-bench's table can be set beside
// `tools/bench/hf_bench.py --profile`. libcupti is loaded at run time: $STRATA_CUPTI_LIB, else
// libcupti.so.13 / libcupti.so on the loader's path, else the CUDA toolkit's copy.
#pragma once
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

 private:
  KernelTrace() = default;
  std::string library_;
  bool running_ = false;
};

}  // namespace strata::tools
