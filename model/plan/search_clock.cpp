// The search's clock (planner_search.h SearchClock): its limit and progress lines, on the thread that runs
// the outermost entry point.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <string>

#include "model/plan/planner_search.h"

namespace strata::planner_detail {

namespace {

// The current search's clock (planner_search.h SearchClock), on the thread that runs the search.
struct ClockState {
  int depth = 0;  // nested entry points share the outermost one's clock
  std::chrono::steady_clock::time_point start, next_report;
  planner_detail::Deadline deadline = planner_detail::Deadline::max();
  double limit_s = 0;
  bool stopped = false;
  int runs = 0;
  std::string best;  // the fastest fitting plan reported so far, at best_s
  double best_s = 0;
  long epoch = 0;  // search_epoch: counts the outermost searches on this thread
  std::function<void(const std::string&)> progress;
};
thread_local ClockState search_clock;
constexpr auto kProgressEvery = std::chrono::seconds(10);

}  // namespace

SearchClock::SearchClock(const ForecastRequest& r) {
  ClockState& c = search_clock;
  outermost_ = c.depth++ == 0;
  if (!outermost_) return;
  c.start = std::chrono::steady_clock::now();
  c.next_report = c.start + kProgressEvery;
  c.limit_s = r.plan_time_limit_s;
  c.deadline = r.plan_time_limit_s > 0 ? c.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(r.plan_time_limit_s))
                                       : Deadline::max();
  c.stopped = false;
  c.runs = 0;
  c.best.clear();
  c.best_s = 0;
  ++c.epoch;
  c.progress = r.plan_progress;
}

SearchClock::~SearchClock() {
  ClockState& c = search_clock;
  if (--c.depth == 0) {
    c.deadline = Deadline::max();
    c.progress = nullptr;
  }
}

void SearchClock::finish(PlanResult& pr) const {
  const ClockState& c = search_clock;
  if (!c.stopped) return;
  pr.stopped = true;
  if (outermost_ && c.progress)
    c.progress(fmt::format(
        "planner: stopped at its time limit of {} s (plan_time_limit, --plan-time-limit) after {} sim runs: {}",
        c.limit_s, c.runs,
        pr.found ? "the plan is the fastest found by then, not necessarily the fastest there is"
                 : "no plan was found to fit by then; a longer limit may find one"));
}

Deadline search_deadline() {
  return search_clock.deadline;
}

bool out_of_time() {
  ClockState& c = search_clock;
  if (!c.stopped && c.deadline != Deadline::max() && std::chrono::steady_clock::now() > c.deadline) c.stopped = true;
  return c.stopped;
}

long search_epoch() {
  return search_clock.depth > 0 ? search_clock.epoch : 0;
}

bool search_stopped() {
  return search_clock.stopped;
}

void search_progress(int runs, const std::string& best, double best_step_s) {
  ClockState& c = search_clock;
  c.runs += runs;
  if (!best.empty() && (c.best.empty() || best_step_s < c.best_s)) c.best = best, c.best_s = best_step_s;
  const auto now = std::chrono::steady_clock::now();
  if (!c.progress || now < c.next_report) return;
  c.next_report = now + kProgressEvery;
  const double s = std::chrono::duration<double>(now - c.start).count();
  c.progress(fmt::format("planner: {:.0f} s{}, {} sim runs; {}", s,
                         c.limit_s > 0 ? fmt::format(" of at most {}", c.limit_s) : std::string(), c.runs,
                         c.best.empty()
                             ? std::string("no plan fits yet")
                             : fmt::format("fastest fitting so far: {} ({:.4g} s a step)", c.best, c.best_s)));
}

}  // namespace strata::planner_detail
