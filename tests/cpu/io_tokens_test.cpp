// Token files: round trips at both widths and one case per class of malformed file.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <optional>

#include "engine/error.h"
#include "io/tokens.h"
#include "tests/cpu/expect_error.h"

namespace strata::io {
namespace {

using strata::test_util::catch_as;

class io_tokens : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ::testing::TempDir() + "strata_tok_XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  }
  std::string p(const std::string& name) const { return dir + "/" + name; }

  // A token file with the given header fields and raw payload.
  std::string make(const std::string& name, const char* magic, uint32_t width, uint32_t reserved,
                   const std::string& payload) {
    std::string s(magic, 8);
    s.append(reinterpret_cast<const char*>(&width), 4);
    s.append(reinterpret_cast<const char*>(&reserved), 4);
    s += payload;
    std::ofstream(p(name), std::ios::binary).write(s.data(), std::streamsize(s.size()));
    return p(name);
  }
  template <class T>
  static std::string payload(std::vector<T> ids) {
    return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T));
  }

  void expect_error(const std::string& path, int vocab, long min_tokens, const std::string& field,
                    std::vector<std::string> words) {
    auto e = catch_as<FormatError>([&] { read_tokens(path, vocab, min_tokens); });
    if (!e) return;
    EXPECT_EQ(e->file, path);
    EXPECT_EQ(e->field, field) << e->what();
    std::string what = e->what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  }

  std::string dir;
};

TEST_F(io_tokens, RoundTrip4Bytes) {
  std::vector<int32_t> ids = {0, 1, 127999, 128255, 5, 5, 42};
  write_tokens(p("t.tok"), ids);
  EXPECT_EQ(read_tokens(p("t.tok"), 128256, 7), ids);
  std::ifstream in(p("t.tok"), std::ios::binary | std::ios::ate);
  EXPECT_EQ(size_t(in.tellg()), 16 + ids.size() * 4);

  write_tokens(p("empty.tok"), {});
  EXPECT_TRUE(read_tokens(p("empty.tok"), 10, 0).empty());

  // No temp files remain after atomic writes.
  int entries = 0;
  DIR* d = ::opendir(dir.c_str());
  while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(entries, 2);
}

TEST_F(io_tokens, Reads2ByteTokens) {
  std::vector<uint16_t> ids = {0, 65535, 300, 7};
  auto path = make("t.tok", "STRATOK1", 2, 0, payload(ids));
  EXPECT_EQ(read_tokens(path, 65536, 4), (std::vector<int32_t>{0, 65535, 300, 7}));
}

TEST_F(io_tokens, TruncatedHeader) {
  std::ofstream(p("t.tok"), std::ios::binary) << "STRATOK1";
  expect_error(p("t.tok"), 100, 0, "header", {"truncated", "16-byte header"});
}

TEST_F(io_tokens, BadMagic) {
  auto path = make("t.tok", "GPT2TOK1", 4, 0, payload<int32_t>({1, 2}));
  expect_error(path, 100, 0, "magic", {"bad magic", "STRATOK1"});
}

TEST_F(io_tokens, BadWidth) {
  auto path = make("t.tok", "STRATOK1", 3, 0, "abcdef");
  expect_error(path, 100, 0, "bytes_per_token", {"bytes_per_token is 3", "expected 2 or 4"});
}

TEST_F(io_tokens, NonZeroReserved) {
  auto path = make("t.tok", "STRATOK1", 4, 7, payload<int32_t>({1}));
  expect_error(path, 100, 0, "reserved", {"reserved"});
}

TEST_F(io_tokens, SizeNotAMultipleOfWidth) {
  auto path = make("t.tok", "STRATOK1", 4, 0, payload<int32_t>({1, 2}) + "xy");
  expect_error(path, 100, 0, "size", {"10 payload bytes", "not a multiple of bytes_per_token 4"});
}

TEST_F(io_tokens, TokenIdOutOfVocab) {
  auto path = make("t.tok", "STRATOK1", 4, 0, payload<int32_t>({1, 2, 99, 100, 3}));
  expect_error(path, 100, 0, "tokens[3]", {"index 3", "is 100", "vocab_size 100 from config.json"});
  // Ids past INT32_MAX in a 4-byte file are out of vocab too, not negative tokens.
  auto big = make("b.tok", "STRATOK1", 4, 0, payload<uint32_t>({0xffffffffu}));
  expect_error(big, 100, 0, "tokens[0]", {"4294967295"});
  auto two = make("s.tok", "STRATOK1", 2, 0, payload<uint16_t>({1, 50000}));
  expect_error(two, 32000, 0, "tokens[1]", {"index 1", "50000", "vocab_size 32000 from config.json"});
}

TEST_F(io_tokens, TooFewTokens) {
  write_tokens(p("t.tok"), {1, 2, 3, 4, 5});
  expect_error(p("t.tok"), 100, 129, "size", {"has 5 tokens", "needs at least 129 tokens (one sequence of seq+1)"});
}

TEST_F(io_tokens, MissingFileIsIoError) {
  auto e = catch_as<IoError>([&] { read_tokens(p("missing.tok"), 100, 0); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("missing.tok"));
}

TEST_F(io_tokens, WriteRejectsNegativeIds) {
  EXPECT_THROW(write_tokens(p("n.tok"), {1, -1}), Error);
  std::ifstream in(p("n.tok"));
  EXPECT_FALSE(in.good()) << "nothing is written when the ids are invalid";
}

}  // namespace
}  // namespace strata::io
