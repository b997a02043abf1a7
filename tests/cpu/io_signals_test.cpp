// SIGINT and SIGTERM during a save (issue 15): the handler the tools install
// (io::remove_temps_on_signals) unlinks the temp file of every save in progress, then the signal
// ends the process as it would have; the previous file stays byte for byte. The saves run in
// strata-interrupted-save (tests/cpu/interrupted_save.cpp), which waits on stdin mid-save.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "tests/cpu/spawn_util.h"

namespace strata::io {
namespace {

using namespace std::chrono_literals;
using strata::test_util::Child;

const std::string kHelper = std::string(STRATA_BUILD_DIR) + "/tests/strata-interrupted-save";

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class io_signals : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "strata_io_signals_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
    ASSERT_TRUE(std::filesystem::exists(kHelper)) << kHelper << " is missing: build the tests first";
    std::ofstream(target()) << "old contents";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string target() const { return dir_ + "/model.safetensors"; }

  // Starts a save of target() and returns once its temp exists (the path it printed).
  std::unique_ptr<Child> start_save(const std::vector<std::string>& extra, std::string& temp) {
    std::vector<std::string> argv = {kHelper, target()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv);
    EXPECT_TRUE(c->ok()) << kHelper;
    EXPECT_TRUE(c->ok() && c->read_line(temp, 10s)) << "the save did not reach its wait";
    EXPECT_TRUE(std::filesystem::exists(temp)) << temp;
    EXPECT_TRUE(temp.starts_with(target() + ".tmp.")) << temp;
    return c;
  }

  std::string dir_;
};

TEST_F(io_signals, SigtermOrSigintMidSaveRemoveTheTempAndStillKill) {
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(strsignal(sig));
    std::string temp;
    auto c = start_save({}, temp);
    ASSERT_TRUE(c->ok());
    ASSERT_EQ(::kill(c->pid(), sig), 0);
    const int status = c->wait(10s);
    ASSERT_NE(status, -1) << "the save did not end on the signal";
    EXPECT_TRUE(WIFSIGNALED(status)) << "the exit status must say killed by the signal, got " << status;
    EXPECT_EQ(WIFSIGNALED(status) ? WTERMSIG(status) : 0, sig);
    EXPECT_FALSE(std::filesystem::exists(temp)) << "the temp survived the signal: " << temp;
    EXPECT_EQ(slurp(target()), "old contents");
    EXPECT_EQ(list_dir(dir_), std::set<std::string>{"model.safetensors"});
  }
}

// The control: without the handler the same signal leaves the temp (the next save removes it).
TEST_F(io_signals, WithoutTheHandlerTheTempStays) {
  std::string temp;
  auto c = start_save({"--no-handler"}, temp);
  ASSERT_TRUE(c->ok());
  ASSERT_EQ(::kill(c->pid(), SIGTERM), 0);
  const int status = c->wait(10s);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(std::filesystem::exists(temp)) << temp;
  EXPECT_EQ(slurp(target()), "old contents");
}

// An ignored SIGINT (nohup, `cmd &` in a script) stays ignored: the save goes on and commits.
TEST_F(io_signals, AnIgnoredSigintStaysIgnored) {
  std::string temp;
  auto c = start_save({"--ignore-sigint"}, temp);
  ASSERT_TRUE(c->ok());
  ASSERT_EQ(::kill(c->pid(), SIGINT), 0);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(std::filesystem::exists(temp)) << "the ignored SIGINT removed the temp";
  ASSERT_TRUE(c->send("go"));
  const int status = c->wait(10s);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(slurp(target()), "new contents");
  EXPECT_EQ(list_dir(dir_), std::set<std::string>{"model.safetensors"});
}

// The handler's table, without signals: every live temp is listed, and each save's entry goes
// when it commits or is abandoned, so the table never fills over a run of saves.
TEST_F(io_signals, TheTableHoldsTheLiveTempsOnly) {
  EXPECT_EQ(unlink_live_temps(), 0);
  {
    AtomicFile a(dir_ + "/a.bin"), b(dir_ + "/b.bin");
    a.write("a", 1);
    EXPECT_EQ(unlink_live_temps(), 2);
    EXPECT_FALSE(std::filesystem::exists(a.temp_path()));
    EXPECT_FALSE(std::filesystem::exists(b.temp_path()));
  }  // abandoned: their entries go
  EXPECT_EQ(unlink_live_temps(), 0);
  for (int i = 0; i < 100; ++i) {
    AtomicFile f(dir_ + "/c.bin");
    f.write("c", 1);
    if (i % 2) f.commit();
  }
  EXPECT_EQ(unlink_live_temps(), 0);
  EXPECT_EQ(slurp(dir_ + "/c.bin"), "c");

  // A move hands the entry over; more saves than entries still work, the extra ones unlisted.
  std::vector<AtomicFile> many;
  for (int i = 0; i < 40; ++i) many.emplace_back(dir_ + "/m" + std::to_string(i) + ".bin");
  EXPECT_EQ(unlink_live_temps(), 32);
  many.clear();
  EXPECT_EQ(unlink_live_temps(), 0);
  AtomicFile last(dir_ + "/last.bin");
  EXPECT_EQ(unlink_live_temps(), 1);
}

}  // namespace
}  // namespace strata::io
