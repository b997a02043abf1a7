// N ranks as threads of one cpu communicator group (engine/comm.h), for the tests of the parallel modes; and
// what those tests' rank runs share: each rank's rows of a global batch, its checkpoints, the files they leave.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm.h"
#include "model/data/row_data.h"
#include "model/llama/llama.h"
#include "model/run/checkpoint.h"
#include "model/train/trainer.h"

namespace strata::test_util {

// Runs f(comm, rank) on `world` threads, each with its own communicator of one CpuGroup, and returns each
// rank's result. errors == nullptr: a rank that throws aborts the group (the others fail at their next
// collective instead of waiting out the timeout) and the first rank's exception is rethrown once every
// thread has joined. Otherwise `errors` gets each rank's message ("" where it returned) and nothing aborts
// or rethrows (for ranks that are meant to fail together).
template <class R>
std::vector<R> run_rank_threads(int world, const std::function<R(Communicator*, int)>& f,
                                std::vector<std::string>* errors = nullptr, double timeout_s = 60) {
  CpuGroup group(world, timeout_s);
  std::vector<R> out(static_cast<size_t>(world));
  std::vector<std::exception_ptr> err(static_cast<size_t>(world));
  std::vector<std::string> msg(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = make_cpu_communicator(group, r);
        out[size_t(r)] = f(comm.get(), r);
      } catch (const std::exception& e) {
        err[size_t(r)] = std::current_exception();
        msg[size_t(r)] = e.what();
        if (!errors) group.abort("rank failed");
      }
    });
  for (auto& t : threads) t.join();
  if (errors) {
    *errors = msg;
    return out;
  }
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  return out;
}

// Weights of N ranks against one rank's after a few steps (per parameter, per element): the ranks' sums
// of the gradient are another summation order, and Adam moves an element whose gradient is near 0 by up
// to lr whatever its rounding (as gradient accumulation's test), so the worst element is bounded loosely
// (2e-4) and the root mean square tightly (2e-6).
inline void expect_weights_close(const std::vector<std::vector<float>>& one,
                                 const std::vector<std::vector<float>>& many, const std::string& what) {
  ASSERT_EQ(one.size(), many.size()) << what;
  double worst = 0, sum_sq = 0;
  long n = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), many[i].size()) << what << ", parameter " << i;
    for (size_t e = 0; e < one[i].size(); ++e) {
      const double d = std::fabs(double(one[i][e]) - many[i][e]);
      worst = std::max(worst, d);
      sum_sq += d * d;
      ++n;
    }
  }
  EXPECT_LT(worst, 2e-4) << what;
  EXPECT_LT(std::sqrt(sum_sq / double(std::max(n, 1L))), 2e-6) << what;
}

// run_rank_threads for ranks that may fail together: each rank's message into `errors` where given; otherwise
// every rank must return ("" expected, naming `what`).
template <class R>
std::vector<R> run_ranks_reporting(int world, const std::function<R(Communicator*, int)>& f,
                                   std::vector<std::string>* errors = nullptr, const std::string& what = "") {
  std::vector<std::string> errs;
  std::vector<R> runs = run_rank_threads<R>(world, f, &errs);
  if (errors) {
    *errors = errs;
  } else {
    for (auto& e : errs) EXPECT_EQ(e, "") << what;
  }
  return runs;
}

// Rows [first, first + n) of step `step`'s global batch (`per_step` rows of `seq` tokens a step) as one batch:
// a rank's share, or one micro-batch of it. Row r of the global batch has its first r * ignored_per_row
// targets ignored (unequal token counts between ranks and micro-batches).
inline Batch global_rows(const TokenRows& rows, int seq, int per_step, int step, int first, int n,
                         int ignored_per_row = 0) {
  Batch b{n, seq, std::vector<int32_t>(size_t(n) * seq), std::vector<int32_t>(size_t(n) * seq), {}};
  for (int i = 0; i < n; ++i) {
    const int r = first + i;
    rows.row(long(step) * per_step + r, b.inputs.data() + i * seq, b.targets.data() + i * seq);
    for (int t = 0; t < ignored_per_row * r; ++t) b.targets[size_t(i * seq + t)] = -1;
  }
  return b;
}

// A resumed rank against the same rank's uninterrupted run (anything with `losses` and `weights`): its losses
// are the straight run's from step `from` on, and its final weights the same, bit for bit.
template <class Run>
void expect_resumed_bit_identical(const Run& straight, size_t from, const Run& resumed, const std::string& what) {
  ASSERT_EQ(straight.losses.size(), from + resumed.losses.size()) << what;
  EXPECT_EQ(std::memcmp(straight.losses.data() + from, resumed.losses.data(), resumed.losses.size() * sizeof(float)), 0)
      << what << ": losses";
  ASSERT_EQ(straight.weights.size(), resumed.weights.size()) << what;
  for (size_t i = 0; i < straight.weights.size(); ++i) {
    ASSERT_EQ(straight.weights[i].size(), resumed.weights[i].size()) << what << ", parameter " << i;
    if (straight.weights[i].empty())
      continue;  // a rank holding none of it (ZeRO-3); memcmp's pointers must not be null
    EXPECT_EQ(
        std::memcmp(straight.weights[i].data(), resumed.weights[i].data(), straight.weights[i].size() * sizeof(float)),
        0)
        << what << ", parameter " << i;
  }
}

// One rank's checkpoints in `dir`/checkpoint-<step>, as TrainLoop takes them: with ZeRO sharding every rank
// saves and loads together (through the trainer's sum over ranks); unsharded, every rank holds the same state
// and rank 0 alone saves it. `config_json`: the run's train_config.json (checkpoint_config_json).
class RankCheckpoints {
 public:
  RankCheckpoints(Backend& be, LlamaModel& model, Trainer& tr, std::string config_json)
      : be_(be), model_(model), tr_(tr), cfg_(std::move(config_json)) {}
  bool saves() const { return sharded() || model_.options().zero.rank == 0; }
  // The checkpoint's path; "" on a rank that does not save.
  std::string save(const std::string& dir, int step, const std::function<void(const std::string&)>& after_file = {}) {
    if (!saves()) return "";
    CheckpointState st;
    st.step = step;
    CheckpointWrite w;
    w.config_json = cfg_;
    w.after_file = after_file;
    return save_checkpoint(dir, be_, model_, st, w, sharded() ? sum() : RankSum());
  }
  // Loads dir's checkpoint-<step> and sets the trainer's step count to the one saved; returns it.
  int resume(const std::string& dir, int step) {
    const CheckpointState st = load_checkpoint(fmt::format("{}/checkpoint-{}", dir, step), be_, model_, cfg_, sum());
    tr_.set_steps_done(st.step);
    return st.step;
  }

 private:
  bool sharded() const { return model_.options().zero.sharded(); }
  RankSum sum() const {
    return [&tr = tr_](float v) { return tr.sum_over_ranks(v); };
  }
  Backend& be_;
  LlamaModel& model_;
  Trainer& tr_;
  std::string cfg_;
};

// ::testing::TempDir() + "/" + name, removed if it was there.
inline std::string fresh_temp_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

// A file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace strata::test_util
