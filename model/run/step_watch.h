// Progress lines while one training step runs long: a step of a long context takes minutes (the 8B at 262,144
// tokens about 3.5, its first step more), and without them a run says nothing until the step ends.
#pragma once
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace strata {

// While alive, prints "LABEL: running for H:MM:SS (forward, op N of M)" to `out` every `interval_s` seconds, from
// where the tape is (engine/step_progress.h). No thread at all when out is null or interval_s <= 0.
class StepWatch {
 public:
  StepWatch(std::FILE* out, std::string label, double interval_s);
  ~StepWatch();
  StepWatch(const StepWatch&) = delete;
  StepWatch& operator=(const StepWatch&) = delete;

 private:
  void run();
  std::FILE* out_;
  std::string label_;
  double interval_s_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The line StepWatch prints after `elapsed_s` seconds.
std::string step_watch_line(const std::string& label, double elapsed_s);

}  // namespace strata
