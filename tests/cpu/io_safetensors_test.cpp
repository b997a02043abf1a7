// Safetensors reader/writer, checkpoint directories and atomic saves, incl. one case per class of
// malformed input: each must throw the typed error naming the file and the field.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "tests/cpu/expect_error.h"

namespace strata::io {
namespace {

std::string make_temp_dir() {
  std::string tmpl = ::testing::TempDir() + "strata_io_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file with a hand-written header and `data_bytes` bytes of data section.
std::string make_st(const std::string& path, const std::string& header, size_t data_bytes) {
  uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  s += header;
  s.append(data_bytes, '\x01');
  write_raw(path, s);
  return path;
}

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  while (dirent* e = d ? ::readdir(d) : nullptr)
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.insert(e->d_name);
  if (d) ::closedir(d);
  return out;
}

using strata::test_util::catch_as;

// The error must carry the file and field, and its message must mention the file and `words`.
void expect_format_error(const std::string& path, const std::string& field, std::vector<std::string> words) {
  auto e = catch_as<FormatError>([&] { SafetensorsFile::open(path); });
  if (!e) return;
  EXPECT_EQ(e->file, path);
  EXPECT_EQ(e->field, field) << e->what();
  std::string what = e->what();
  EXPECT_NE(what.find(path), std::string::npos) << what;
  for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
}

class io_safetensors : public ::testing::Test {
 protected:
  void SetUp() override { dir = make_temp_dir(); }
  std::string p(const std::string& name) const { return dir + "/" + name; }
  std::string dir;
};

// ------------------------------------------------------------------ malformed files

TEST_F(io_safetensors, TruncatedShorterThanHeaderLength) {
  write_raw(p("t.safetensors"), "\x10\x00\x00");
  expect_format_error(p("t.safetensors"), "header_length", {"truncated", "header length"});
}

TEST_F(io_safetensors, HeaderLengthPastEndOfFile) {
  uint64_t n = 1000;
  write_raw(p("t.safetensors"), std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
  expect_format_error(p("t.safetensors"), "header_length", {"header length 1000", "past the end"});
}

TEST_F(io_safetensors, InvalidHeaderJson) {
  make_st(p("t.safetensors"), R"({"a": {"dtype": "F32", )", 0);
  expect_format_error(p("t.safetensors"), "header", {"invalid header JSON"});
}

TEST_F(io_safetensors, HeaderNotAnObject) {
  make_st(p("t.safetensors"), "[1, 2]", 0);
  expect_format_error(p("t.safetensors"), "header", {"expected an object"});
}

TEST_F(io_safetensors, UnknownDtypeNamesTensorAndDtype) {
  make_st(p("t.safetensors"), R"({"w.weight": {"dtype": "Q4K", "shape": [2], "data_offsets": [0, 8]}})", 8);
  expect_format_error(p("t.safetensors"), "w.weight.dtype", {"'w.weight'", "unknown dtype 'Q4K'"});
  // Engine spellings are not safetensors spellings.
  make_st(p("u.safetensors"), R"({"w": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}})", 8);
  expect_format_error(p("u.safetensors"), "w.dtype", {"unknown dtype 'f32'"});
}

TEST_F(io_safetensors, ShapeOffsetMismatch) {
  make_st(p("t.safetensors"), R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
  expect_format_error(p("t.safetensors"), "w.data_offsets", {"'w'", "[2, 3]", "24 bytes", "20 bytes"});
}

TEST_F(io_safetensors, BadShapeEntry) {
  make_st(p("t.safetensors"), R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 24]}})", 24);
  expect_format_error(p("t.safetensors"), "w.shape", {"'w'", "non-negative"});
}

TEST_F(io_safetensors, DataOffsetsOutOfRange) {
  make_st(p("t.safetensors"), R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 16);
  expect_format_error(p("t.safetensors"), "w.data_offsets", {"'w'", "out of range", "16-byte data section"});
}

TEST_F(io_safetensors, DataOffsetsEndBeforeBegin) {
  make_st(p("t.safetensors"), R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16);
  expect_format_error(p("t.safetensors"), "w.data_offsets", {"end before begin"});
}

TEST_F(io_safetensors, OverlappingTensors) {
  make_st(p("t.safetensors"),
          R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
          16);
  expect_format_error(p("t.safetensors"), "b.data_offsets", {"'a'", "'b'", "overlap"});
}

TEST_F(io_safetensors, NonObjectEntry) {
  make_st(p("t.safetensors"), R"({"w": [0, 4]})", 4);
  expect_format_error(p("t.safetensors"), "w", {"'w'", "expected an object"});
}

TEST_F(io_safetensors, MissingDataOffsets) {
  make_st(p("t.safetensors"), R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  expect_format_error(p("t.safetensors"), "w.data_offsets", {"data_offsets"});
}

TEST_F(io_safetensors, NonStringMetadata) {
  make_st(p("t.safetensors"), R"({"__metadata__": {"step": 3}})", 0);
  expect_format_error(p("t.safetensors"), "__metadata__.step", {"__metadata__.step", "expected a string"});
}

TEST_F(io_safetensors, MissingFileIsIoError) {
  auto e = catch_as<IoError>([&] { SafetensorsFile::open(p("nope.safetensors")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("nope.safetensors"));
  EXPECT_NE(std::string(e->what()).find("nope.safetensors"), std::string::npos);
}

// ------------------------------------------------------------------ round trips

TEST_F(io_safetensors, RoundTripDtypesAndShapes) {
  std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> b = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(3.0f)};
  std::vector<int32_t> i = {7, -8, 2147483647, 0};
  float scalar = 42.0f;
  std::vector<TensorToWrite> ts = {
      {"f", DType::f32, {2, 3}, f.data()},    {"b", DType::bf16, {3}, b.data()},
      {"i", DType::i32, {2, 1, 2}, i.data()}, {"scalar", DType::f32, {}, &scalar},
      {"empty", DType::f32, {0, 5}, nullptr}, {"u", DType::u8, {3}, "xyz"},
  };
  std::string path = p("rt.safetensors");
  save_safetensors(path, ts, {{"step", "12"}});

  std::string raw = read_all(path);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header is padded so the data section is 8-byte aligned";
  EXPECT_EQ(raw.substr(8, 16), R"({"__metadata__":)");

  auto st = SafetensorsFile::open(path);
  EXPECT_EQ(st.path(), path);
  ASSERT_EQ(st.tensors().size(), ts.size());
  size_t expect_offset = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const TensorInfo& t = st.tensors()[k];
    EXPECT_EQ(t.name, ts[k].name) << "header order is write order";
    EXPECT_EQ(t.dtype, ts[k].dtype);
    EXPECT_EQ(t.shape, ts[k].shape);
    EXPECT_EQ(t.offset, expect_offset) << "tensors are laid out in the given order";
    if (t.bytes) {
      EXPECT_EQ(std::memcmp(st.data(t), ts[k].data, t.bytes), 0) << t.name;
    }
    expect_offset += t.bytes;
  }
  EXPECT_EQ(st.find("scalar")->bytes, 4u);
  EXPECT_EQ(st.find("empty")->bytes, 0u);
  EXPECT_EQ(st.find("missing"), nullptr);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("step"), "12");

  // Move keeps the mapping valid.
  SafetensorsFile moved = std::move(st);
  EXPECT_EQ(std::memcmp(moved.data(*moved.find("f")), f.data(), 24), 0);
}

TEST_F(io_safetensors, CheckpointSingleFileReadF32) {
  std::vector<uint16_t> b = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(3.0f), f32_to_bf16(8.0f)};
  std::vector<uint16_t> h = {0x3c00, 0xc000};  // f16 1.0, -2.0
  std::vector<float> f = {0.25f, 0.5f};
  save_safetensors(
      p("model.safetensors"),
      {{"w", DType::bf16, {2, 2}, b.data()}, {"h", DType::f16, {2}, h.data()}, {"f", DType::f32, {1, 2}, f.data()}});
  auto ck = Checkpoint::open_dir(dir);
  EXPECT_EQ(ck.dir(), dir);
  EXPECT_TRUE(ck.has("w"));
  EXPECT_FALSE(ck.has("x"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"w", "h", "f"}));
  std::vector<float> out(4);
  ck.read_f32("w", {2, 2}, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -0.5f, 3.0f, 8.0f}));
  ck.read_f32("h", {2}, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  ck.read_f32("f", {1, 2}, out.data());
  EXPECT_EQ(out[1], 0.5f);

  auto e = catch_as<FormatError>([&] { ck.read_f32("w", {4}, out.data()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("model.safetensors"));
  EXPECT_EQ(e->field, "w");
  std::string what = e->what();
  for (std::string w :
       {p("model.safetensors"), std::string("'w'"), std::string("shape [2, 2]"), std::string("expected [4]")})
    EXPECT_NE(what.find(w), std::string::npos) << w << " not in " << what;

  auto missing = catch_as<FormatError>([&] { ck.read_f32("nope", {1}, out.data()); });
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->field, "nope");

  // Released (the model holds the weights): the names stay, a read is refused naming the file, and the file is
  // untouched for the next reader.
  ck.release();
  ck.release();  // twice: nothing left to do
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"w", "h", "f"}));
  try {
    ck.read_f32("w", {2, 2}, out.data());
    ADD_FAILURE() << "a released checkpoint read";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(p("model.safetensors")), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("released"), std::string::npos) << err.what();
  }
  auto again = Checkpoint::open_dir(dir);
  again.read_f32("w", {2, 2}, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -0.5f, 3.0f, 8.0f}));
}

TEST_F(io_safetensors, ReadF32FromUnalignedData) {
  // A 1-byte-longer header leaves the data section (and the bf16 tensor) at an odd address.
  std::string hdr = R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}} )";
  if (hdr.size() % 2 == 0) hdr += " ";
  uint64_t n = hdr.size();
  uint16_t v[2] = {f32_to_bf16(1.5f), f32_to_bf16(-3.0f)};
  write_raw(p("model.safetensors"),
            std::string(reinterpret_cast<const char*>(&n), 8) + hdr + std::string(reinterpret_cast<char*>(v), 4));
  auto ck = Checkpoint::open_dir(dir);
  float out[2];
  ck.read_f32("w", {2}, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -3.0f);
}

TEST_F(io_safetensors, ShardedIndexRoundTrip) {
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c = {7};
  save_safetensors(p("model-00001-of-00002.safetensors"), {{"a", DType::f32, {2, 2}, a.data()}});
  save_safetensors(p("model-00002-of-00002.safetensors"),
                   {{"b", DType::f32, {2}, b.data()}, {"c", DType::f32, {}, c.data()}});
  write_file_atomic(p("model.safetensors.index.json"), R"({"metadata": {"total_size": 28}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::open_dir(dir + "/");
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  std::vector<float> out(4);
  ck.read_f32("a", {2, 2}, out.data());
  EXPECT_EQ(out, a);
  ck.read_f32("b", {2}, out.data());
  EXPECT_EQ(out[1], 6.0f);
  ck.read_f32("c", {}, out.data());
  EXPECT_EQ(out[0], 7.0f);
  auto e = catch_as<FormatError>([&] { ck.read_f32("b", {1, 2}, out.data()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("model-00002-of-00002.safetensors")) << "shape errors name the shard";
}

TEST_F(io_safetensors, IndexErrorsNameIndexAndField) {
  std::vector<float> a = {1};
  save_safetensors(p("s1.safetensors"), {{"a", DType::f32, {1}, a.data()}});
  const std::string idx = p("model.safetensors.index.json");
  auto check = [&](const std::string& json, const std::string& field, const std::string& word) {
    write_file_atomic(idx, json);
    auto e = catch_as<FormatError>([&] { Checkpoint::open_dir(dir); });
    ASSERT_TRUE(e) << json;
    EXPECT_EQ(e->file, idx);
    EXPECT_EQ(e->field, field);
    std::string what = e->what();
    EXPECT_NE(what.find("model.safetensors.index.json"), std::string::npos) << what;
    EXPECT_NE(what.find(word), std::string::npos) << what;
  };
  check("{not json", "index", "invalid JSON");
  check(R"({"metadata": {}})", "weight_map", "weight_map");
  check(R"({"weight_map": {"a": 3}})", "weight_map.a", "weight_map['a']");

  // A tensor the index places in a shard that does not hold it: names the shard and tensor.
  write_file_atomic(idx, R"({"weight_map": {"zz": "s1.safetensors"}})");
  auto e = catch_as<FormatError>([&] { Checkpoint::open_dir(dir); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("s1.safetensors"));
  EXPECT_EQ(e->field, "zz");
}

TEST_F(io_safetensors, MissingShardNamesShardFile) {
  write_file_atomic(p("model.safetensors.index.json"), R"({"weight_map": {"a": "model-00009-of-00009.safetensors"}})");
  auto e = catch_as<IoError>([&] { Checkpoint::open_dir(dir); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("model-00009-of-00009.safetensors"));
  EXPECT_NE(std::string(e->what()).find("model-00009-of-00009.safetensors"), std::string::npos);
}

TEST_F(io_safetensors, MissingDirectoryOrModelIsIoError) {
  auto e = catch_as<IoError>([&] { Checkpoint::open_dir(p("no_such_dir")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p("no_such_dir"));
  auto e2 = catch_as<IoError>([&] { Checkpoint::open_dir(dir); });  // exists, but empty
  ASSERT_TRUE(e2);
  EXPECT_NE(std::string(e2->what()).find("model.safetensors"), std::string::npos);
}

// ------------------------------------------------------------------ atomic saves

TEST_F(io_safetensors, FailedSaveLeavesPreviousFileIntact) {
  std::vector<float> old = {1, 2, 3};
  const std::string path = p("model.safetensors");
  save_safetensors(path, {{"w", DType::f32, {3}, old.data()}});
  const std::string before = read_all(path);
  const auto files_before = list_dir(dir);

  // In a child, cap the file size so the save's write fails with EFBIG midway through the data.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::vector<float> big(1 << 16, 9.0f);
    int rc = 3;
    try {
      save_safetensors(path, {{"w", DType::f32, {int64_t(big.size())}, big.data()}});
      rc = 1;  // should not have succeeded
    } catch (const IoError&) {
      rc = 0;
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "save under RLIMIT_FSIZE must throw IoError";
  EXPECT_EQ(read_all(path), before) << "previous file must be intact byte for byte";
  EXPECT_EQ(list_dir(dir), files_before) << "no temp file may remain";
}

TEST_F(io_safetensors, SaveIntoMissingDirectoryIsIoError) {
  const std::string path = p("missing/sub/model.safetensors");
  float x = 1;
  auto e = catch_as<IoError>([&] { save_safetensors(path, {{"x", DType::f32, {1}, &x}}); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, path);
  EXPECT_TRUE(list_dir(dir).empty());
}

TEST_F(io_safetensors, InvalidTensorListLeavesNoFile) {
  float x = 1;
  EXPECT_THROW(save_safetensors(p("d.safetensors"), {{"x", DType::f32, {1}, &x}, {"x", DType::f32, {1}, &x}}), Error);
  EXPECT_THROW(save_safetensors(p("d.safetensors"), {{"x", DType::f32, {2}, nullptr}}), Error);
  EXPECT_TRUE(list_dir(dir).empty());
}

TEST_F(io_safetensors, WriteFileAtomicOverwrites) {
  write_file_atomic(p("a.txt"), "first");
  write_file_atomic(p("a.txt"), "second, longer");
  EXPECT_EQ(read_all(p("a.txt")), "second, longer");
  EXPECT_EQ(list_dir(dir), (std::set<std::string>{"a.txt"}));
}

}  // namespace
}  // namespace strata::io
