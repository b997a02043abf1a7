// The disk tier's io_uring file: byte-exact round trips, bounded concurrency, alignment and capacity checks,
// injected and real (EFBIG) write failures, the buffered fallback, and that the file never outlives its owner.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include "engine/error.h"
#include "engine/uring_file.h"
#include "tests/cpu/expect_error.h"

namespace strata {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;
namespace fs = std::filesystem;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buf = std::unique_ptr<char, FreeDeleter>;

Buf aligned(size_t bytes) {
  return Buf(static_cast<char*>(std::aligned_alloc(UringFile::kAlign, std::max(bytes, UringFile::kAlign))));
}

Buf random_buf(size_t bytes, uint32_t seed) {
  Buf b = aligned(bytes);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < bytes; ++i) b.get()[i] = char(rng());
  return b;
}

// Index of the first differing byte, or -1.
long first_mismatch(const char* a, const char* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return long(i);
  return -1;
}

using strata::test_util::catch_as;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string make_temp_dir(const std::string& parent) {
  std::string dir = parent + (parent.back() == '/' ? "" : "/") + "strata_uring_XXXXXX";
  return ::mkdtemp(dir.data()) ? dir : std::string();
}

class io_uring_file : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = make_temp_dir(::testing::TempDir());
    ASSERT_FALSE(dir.empty()) << std::strerror(errno);
  }
  void TearDown() override { fs::remove_all(dir); }

  // Writes `bytes` of fresh random data at `offset`, reads it back into a zeroed buffer, compares every byte.
  void round_trip(UringFile& f, size_t offset, size_t bytes, uint32_t seed) {
    Buf src = random_buf(bytes, seed), dst = aligned(bytes);
    std::memset(dst.get(), 0, bytes);
    f.wait(f.write_async(offset, src.get(), bytes));
    f.wait(f.read_async(offset, dst.get(), bytes));
    EXPECT_EQ(first_mismatch(src.get(), dst.get(), bytes), -1) << bytes << " bytes at offset " << offset;
  }
  std::string dir;
};

TEST_F(io_uring_file, RoundTripsSeveralSizesAtSeveralOffsets) {
  const size_t cap = 64 * MiB;
  UringFile f(dir + "/nested/offload", cap, 8);  // directory created on demand
  EXPECT_TRUE(f.direct()) << "ext4 under " << dir << " should take O_DIRECT: " << f.note();
  EXPECT_TRUE(fs::is_empty(dir + "/nested/offload")) << "the file has no name a kill could leave behind";
  EXPECT_TRUE(fs::path(f.path()).filename().string().starts_with("strata-offload-" + std::to_string(::getpid()) + "-"));
  EXPECT_TRUE(contains(f.path(), "(unlinked)")) << f.path();
  size_t moved = 0;
  uint32_t seed = 1;
  for (size_t bytes : {4 * KiB, MiB + 4 * KiB, 9 * MiB})
    for (size_t offset : {size_t(0), 4 * KiB, 13 * MiB + 20 * KiB, cap - bytes}) {
      round_trip(f, offset, bytes, seed++);
      moved += bytes;
    }
  EXPECT_EQ(f.bytes_written(), moved);
  EXPECT_EQ(f.bytes_read(), moved);
}

TEST_F(io_uring_file, ManyConcurrentRequestsAboveQueueDepth) {
  // 48 tickets (some split into 3 requests) against a queue depth of 4, written without waiting in between.
  const unsigned n = 48;
  const size_t stride = 3 * MiB;
  UringFile f(dir, n * stride, 4);
  std::vector<Buf> src, dst;
  std::vector<size_t> sizes;
  std::vector<UringFile::Ticket> tickets;
  for (unsigned i = 0; i < n; ++i) {
    sizes.push_back(i % 3 == 0 ? 3 * MiB : (i % 3 == 1 ? 64 * KiB : 1 * MiB + 8 * KiB));
    src.push_back(random_buf(sizes[i], 100 + i));
    dst.push_back(aligned(sizes[i]));
    std::memset(dst.back().get(), 0, sizes[i]);
    tickets.push_back(f.write_async(i * stride, src[i].get(), sizes[i]));
  }
  unsigned polled = 0;
  for (auto t : tickets) polled += f.done(t) ? 1 : 0;  // non-blocking; some may already be done
  f.wait_all();
  for (auto t : tickets) EXPECT_TRUE(f.done(t));
  tickets.clear();
  for (unsigned i = n; i-- > 0;) tickets.push_back(f.read_async(i * stride, dst[i].get(), sizes[i]));
  for (auto t : tickets) f.wait(t);
  for (unsigned i = 0; i < n; ++i)
    EXPECT_EQ(first_mismatch(src[i].get(), dst[i].get(), sizes[i]), -1) << "ticket " << i;
  EXPECT_EQ(f.bytes_written(), f.bytes_read());
  RecordProperty("done_before_wait_all", int(polled));
}

TEST_F(io_uring_file, RejectsMisalignedRequestsAndCapacityOverflow) {
  UringFile f(dir, 8 * MiB, 4);
  Buf b = aligned(2 * MiB);
  auto misaligned = [&](auto&& call, const std::string& what) {
    auto e = catch_as<IoError>(call);
    if (!e) return;
    EXPECT_TRUE(contains(e->what(), "misaligned")) << e->what();
    EXPECT_TRUE(contains(e->what(), what)) << e->what();
    EXPECT_EQ(e->file, f.path());
  };
  misaligned([&] { f.write_async(512, b.get(), 4 * KiB); }, "offset 512");
  misaligned([&] { f.write_async(0, b.get(), 4 * KiB + 1); }, "size 4097");
  misaligned([&] { f.read_async(0, b.get() + 8, 4 * KiB); }, "buffer");
  for (auto [offset, bytes] : {std::pair{8 * MiB - 4 * KiB, 8 * KiB}, std::pair{8 * MiB + 4 * KiB, 4 * KiB},
                               std::pair{~size_t(0) - 4095, 8 * KiB}}) {  // the last one wraps offset + bytes
    auto e = catch_as<IoError>([&] { f.write_async(offset, b.get(), bytes); });
    if (e) {
      EXPECT_TRUE(contains(e->what(), "capacity")) << e->what();
    }
  }
  EXPECT_EQ(f.bytes_written(), 0u);
  round_trip(f, 8 * MiB - 2 * MiB, 2 * MiB, 7);          // still usable; the last byte of capacity is reachable
  EXPECT_THROW(f.wait(12345), Error);                    // never issued
  EXPECT_THROW({ UringFile g(dir, MiB, 0); }, IoError);  // queue_depth 0
}

TEST_F(io_uring_file, BadDirectoryIsAnIoErrorNamingIt) {
  std::string file = dir + "/plain";
  { std::ofstream(file) << "x"; }
  auto e = catch_as<IoError>([&] { UringFile f(file + "/sub", MiB); });
  if (e) {
    EXPECT_TRUE(contains(e->what(), file)) << e->what();
  }
}

TEST_F(io_uring_file, InjectedFailureNamesFileOffsetAndErrnoThenFileIsRemoved) {
  std::string path;
  {
    UringFile f(dir, 16 * MiB, 4);
    path = f.path();
    Buf src = random_buf(3 * MiB, 3);
    // Write requests from now: #1 = ticket a, #2..#4 = ticket b's three pieces; #3 fails (b's second MiB).
    f.inject_write_failure(3, EIO);
    auto a = f.write_async(0, src.get(), 4 * KiB);
    auto b = f.write_async(4 * MiB, src.get(), 3 * MiB);
    auto c = f.write_async(8 * MiB, src.get(), 64 * KiB);
    f.wait(a);
    auto e = catch_as<IoError>([&] { f.wait(b); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->file, path);
    EXPECT_TRUE(contains(e->what(), path)) << e->what();
    EXPECT_TRUE(contains(e->what(), "offset " + std::to_string(5 * MiB))) << e->what();
    EXPECT_TRUE(contains(e->what(), std::strerror(EIO))) << e->what();
    EXPECT_THROW(f.done(b), IoError);  // the failure sticks to its ticket
    f.wait(c);                         // other tickets are unaffected
    EXPECT_NO_THROW(f.wait_all());     // already reported through wait(b)

    // An unreported failure surfaces from wait_all; ENOSPC this time, on the next request.
    f.inject_write_failure(1, ENOSPC);
    f.write_async(12 * MiB, src.get(), 4 * KiB);
    auto e2 = catch_as<IoError>([&] { f.wait_all(); });
    if (e2) {
      EXPECT_TRUE(contains(e2->what(), std::strerror(ENOSPC))) << e2->what();
    }
    EXPECT_TRUE(fs::is_empty(dir));
  }
  EXPECT_TRUE(fs::is_empty(dir)) << "nothing may remain after a failure";
}

TEST_F(io_uring_file, DestructorRemovesFileEvenWithRequestsInFlight) {
  std::string path;
  Buf src = random_buf(8 * MiB, 5);
  {
    UringFile f(dir, 32 * MiB);
    path = f.path();
    for (size_t off = 0; off < 32 * MiB; off += 8 * MiB) f.write_async(off, src.get(), 8 * MiB);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir));
}

// RLIMIT_FSIZE is per process, so the real EFBIG happens in a child; its exit code carries the verdict.
TEST_F(io_uring_file, WritePastFileSizeLimitIsEfbig) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    std::string path;
    try {
      std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills us instead of returning EFBIG
      UringFile f(dir, 8 * MiB, 4);   // sized before the limit applies
      path = f.path();
      rlimit lim{MiB + 512 * KiB, MiB + 512 * KiB};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(10);
      Buf src = random_buf(2 * MiB, 9);
      // Piece 2 (1..2 MiB) comes back short at the limit; its resubmitted rest then fails with EFBIG.
      f.write_async(0, src.get(), 2 * MiB);
      try {
        f.wait_all();
        code = 11;  // no error at all
      } catch (const IoError& e) {
        std::string what = e.what();
        if (!contains(what, std::strerror(EFBIG)))
          code = 12;
        else if (!contains(what, path))
          code = 13;
        else if (!contains(what, "offset " + std::to_string(MiB + 512 * KiB)))
          code = 14;
        if (code) std::fprintf(stderr, "child: %s\n", e.what());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(15);
    }
    if (code == 0 && fs::exists(path)) code = 16;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died from signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "11 no error, 12 not EFBIG, 13 no path, 14 wrong offset, 15 other, 16 file left";
  EXPECT_TRUE(fs::is_empty(dir));
}

// SIGKILL runs no destructor: the file must never have had a name in the directory to begin with.
TEST_F(io_uring_file, SigkillLeavesNoFileBehind) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(ready[0]);
    try {
      UringFile f(dir + "/offload", 8 * MiB, 4);
      Buf src = random_buf(4 * MiB, 17);
      f.wait(f.write_async(0, src.get(), 4 * MiB));
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1) ::_exit(2);
      for (;;) ::pause();  // killed here, file open and written
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(1);
    }
  }
  ::close(ready[1]);
  char c = 0;
  ssize_t n = ::read(ready[0], &c, 1);
  ::close(ready[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_EQ(n, 1) << "child failed before it was ready (exit " << WEXITSTATUS(status) << ")";
  ASSERT_TRUE(WIFSIGNALED(status));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/offload")) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << "left behind: " << (left.empty() ? "" : left[0]);
}

// tmpfs takes O_DIRECT since Linux 6.6; before that (and on other filesystems without it) we fall back.
TEST(io_uring_file_tmpfs, DevShmWorksDirectOrBuffered) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  std::string dir = make_temp_dir("/dev/shm");
  ASSERT_FALSE(dir.empty());
  {
    UringFile f(dir, 16 * MiB, 4);
    EXPECT_EQ(f.direct(), f.note().empty()) << f.note();
    if (!f.direct()) {
      EXPECT_TRUE(contains(f.note(), "O_DIRECT")) << f.note();
    }
    std::cout << "[ info ] /dev/shm: " << (f.direct() ? "O_DIRECT accepted" : f.note()) << "\n";
    Buf src = random_buf(9 * MiB, 11), dst = aligned(9 * MiB);
    f.wait(f.write_async(4 * KiB, src.get(), 9 * MiB));
    f.wait(f.read_async(4 * KiB, dst.get(), 9 * MiB));
    EXPECT_EQ(first_mismatch(src.get(), dst.get(), 9 * MiB), -1);
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// ramfs never takes O_DIRECT: mount one in a private user+mount namespace (a child) to force the fallback.
TEST_F(io_uring_file, RamfsFallsBackToBufferedIo) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    uid_t uid = ::getuid();
    gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
      // Map ourselves, else files we create have no representable owner (EOVERFLOW).
      auto put = [](const char* file, const std::string& text) {
        return bool(std::ofstream(file) << text << std::flush);
      };
      put("/proc/self/setgroups", "deny");
      if (!put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") ||
          !put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n"))
        ::_exit(77);
    } else if (uid != 0 || ::unshare(CLONE_NEWNS) != 0) {
      ::_exit(77);
    }
    // Private first, so the ramfs cannot propagate back into the parent's namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    if (::mount("none", dir.c_str(), "ramfs", 0, nullptr) != 0) ::_exit(77);
    try {
      UringFile f(dir + "/sub", 4 * MiB, 4);
      if (f.direct()) ::_exit(20);
      if (!contains(f.note(), "O_DIRECT") || !contains(f.note(), dir)) ::_exit(21);
      Buf src = random_buf(MiB + 4 * KiB, 13), dst = aligned(MiB + 4 * KiB);
      f.wait(f.write_async(8 * KiB, src.get(), MiB + 4 * KiB));
      f.wait(f.read_async(8 * KiB, dst.get(), MiB + 4 * KiB));
      if (first_mismatch(src.get(), dst.get(), MiB + 4 * KiB) != -1) ::_exit(22);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(23);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount ramfs here (no user namespaces)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "20 direct on ramfs, 21 bad note, 22 data mismatch, 23 exception";
}

TEST_F(io_uring_file, MeasureDirectBandwidthIsPositive) {
  auto [write_gbps, read_gbps] = measure_direct_bandwidth(dir, 64 * MiB);
  std::cout << "[ info ] " << dir << ": write " << write_gbps << " GB/s, read " << read_gbps << " GB/s\n";
  EXPECT_GT(write_gbps, 0.0);
  EXPECT_GT(read_gbps, 0.0);
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace strata
