// expect_refuses_fifo: a reader pointed at a named pipe must fail at once with an IoError naming
// the path, never block in open() waiting for a writer. Should it block, the test writes to the
// pipe to release it (so the test fails instead of hanging).
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "engine/error.h"

namespace strata::test_util {

// Makes a FIFO at `fifo_path`, runs `read` (which must open that path) and checks it throws an
// IoError naming `fifo_path` within `limit`.
inline void expect_refuses_fifo(const std::string& fifo_path, const std::function<void()>& read,
                                std::chrono::seconds limit = std::chrono::seconds(5)) {
  ::unlink(fifo_path.c_str());
  ASSERT_EQ(::mkfifo(fifo_path.c_str(), 0600), 0) << fifo_path;
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      read();
    } catch (const IoError& e) {
      return e.file == fifo_path && std::string(e.what()).find(fifo_path) != std::string::npos
                 ? std::string()
                 : "IoError not naming " + fifo_path + ": " + e.what();
    } catch (const std::exception& e) {
      return std::string("not an IoError: ") + e.what();
    }
    return "no error";
  });
  if (result.wait_for(limit) == std::future_status::timeout) {
    ADD_FAILURE() << "reader blocked on the FIFO " << fifo_path << " for " << limit.count() << " s";
    for (;;) {  // a writer that opens and closes at once gives the blocked reader EOF
      int w = ::open(fifo_path.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) {
        ::close(w);
        if (result.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready) break;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  std::string err = result.get();
  EXPECT_EQ(err, "") << fifo_path;
  ::unlink(fifo_path.c_str());
}

}  // namespace strata::test_util
