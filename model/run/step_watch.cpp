#include "model/run/step_watch.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "engine/step_progress.h"

namespace strata {

std::string step_watch_line(const std::string& label, double elapsed_s) {
  const long t = std::isfinite(elapsed_s) && elapsed_s > 0 ? long(elapsed_s + 0.5) : 0;
  const StepProgress p = step_progress();
  // The tape's position is where the host has queued to: on the GPU the kernels run behind it, so between passes
  // may also be the GPU finishing a pass already queued.
  const std::string where =
      p.phase == StepPhase::idle || p.nodes <= 0
          ? std::string("between passes, or the GPU finishing the queued ops")
          : fmt::format("queued to {} op {} of {}", step_phase_name(p.phase), p.node + 1, p.nodes);
  return fmt::format("{}: running for {}:{:02}:{:02} ({})", label, t / 3600, (t / 60) % 60, t % 60, where);
}

StepWatch::StepWatch(std::FILE* out, std::string label, double interval_s)
    : out_(out), label_(std::move(label)), interval_s_(interval_s) {
  if (out_ && interval_s_ > 0) thread_ = std::thread([this] { run(); });
}

StepWatch::~StepWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(m_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepWatch::run() {
  const auto start = std::chrono::steady_clock::now();
  const auto every = std::chrono::duration<double>(interval_s_);
  std::unique_lock<std::mutex> lock(m_);
  for (int n = 1;; ++n) {
    const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(every * n);
    if (cv_.wait_until(lock, due, [this] { return done_; })) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(out_, "%s\n", step_watch_line(label_, elapsed).c_str());
    std::fflush(out_);
  }
}

}  // namespace strata
