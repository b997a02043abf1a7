// Shared by the tests that run strata's command-line tools: where the tools are, a scratch
// directory per suite, and a shell runner that captures stdout, stderr and the exit code.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strata::tool_test {

inline const std::string kMakeTiny = std::string(STRATA_BUILD_DIR) + "/tools/strata-make-tiny";
inline const std::string kTrain = std::string(STRATA_BUILD_DIR) + "/tools/strata-train";
inline const std::string kBench = std::string(STRATA_BUILD_DIR) + "/tools/strata-bench";
inline const std::string kPlan = std::string(STRATA_BUILD_DIR) + "/tools/strata-plan";

struct Proc {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Single-quotes a word for the shell.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// A scratch directory (mkdtemp) that a suite creates once and removes at the end.
class Scratch {
 public:
  void create(const std::string& prefix) {
    root_ = ::testing::TempDir() + prefix + "_XXXXXX";
    if (!::mkdtemp(root_.data())) root_.clear();
  }
  void remove() {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  bool ok() const { return !root_.empty(); }
  std::string path(const std::string& name) const { return root_ + "/" + name; }

  // Runs a shell command, capturing stdout, stderr and the exit code (files in the scratch dir).
  Proc run(const std::string& cmd) {
    std::string o = path("out" + std::to_string(n_)), e = path("err" + std::to_string(n_));
    ++n_;
    int st = std::system((cmd + " >" + quote(o) + " 2>" + quote(e)).c_str());
    Proc r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(o);
    r.err = slurp(e);
    return r;
  }

 private:
  std::string root_;
  int n_ = 0;
};

// Fails (never skips) when the tools were not built next to the tests.
inline ::testing::AssertionResult tools_built() {
  for (const std::string& bin : {kMakeTiny, kTrain, kBench, kPlan})
    if (!std::filesystem::exists(bin))
      return ::testing::AssertionFailure() << bin << " is missing: build the whole project first (cmake --build "
                                           << STRATA_BUILD_DIR << ") so the tools exist next to the tests";
  return ::testing::AssertionSuccess();
}

}  // namespace strata::tool_test
