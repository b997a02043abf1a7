// The hardening of strata-train's settings (issue 15): YAML keys that are not plain strings,
// values out of range (each a ConfigError naming the file and the key, never a crash, a
// truncation or a silent default), config paths that are not files, and the --save directory
// check that runs before training.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "model/run/train_config.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/fifo_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using strata::test_util::catch_as;

const std::string kPath = "/configs/hostile.yaml";

// apply_yaml_text must throw a ConfigError on `file`=kPath, `field`, with every word in `words`.
void expect_rejected(const std::string& yaml, const std::string& field, const std::vector<std::string>& words) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, yaml, kPath); });
  if (!e) {
    ADD_FAILURE() << "accepted: " << yaml;
    return;
  }
  const std::string what = e->what();
  EXPECT_EQ(what.rfind(kPath, 0), 0u) << "message does not start with the file: " << what;
  EXPECT_EQ(e->file, kPath) << what;
  EXPECT_EQ(e->field, field) << what;
  for (auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  EXPECT_EQ(what.find("--"), std::string::npos) << "a YAML error names no flag: " << what;
}

// Before: YAML::TypedBadConversion escaped apply_yaml_text (SIGABRT in strata-train).
TEST(config_checks, keys_that_are_not_plain_strings_are_config_errors) {
  expect_rejected("[a, b]: 1\n", "[a, b]", {":1: the key", "[a, b]", "a sequence", "plain string key"});
  expect_rejected("sequence_len: 16\n? {a: 1}\n: 2\n", "{a: 1}", {":2: the key", "a mapping", "plain string key"});
  expect_rejected("~: 1\n", "~", {"null", "plain string key"});
  expect_rejected("plan: {[a, b]: keep}\n", "plan.[a, b]", {"in 'plan'", "a sequence"});
  expect_rejected("gradient_checkpointing: {[every]: 2}\n", "gradient_checkpointing.[every]", {"a sequence"});
  expect_rejected("gradient_checkpointing: {every: 2, often: 1}\n", "gradient_checkpointing", {"{every: N}"});
}

TEST(config_checks, integers_are_range_checked_never_truncated) {
  // 4294967312 = 2^32 + 16: read as 16 before.
  expect_rejected("sequence_len: 4294967312\n", "sequence_len", {"4294967312", ">= 1 (at most 16777216)"});
  expect_rejected("micro_batch_size: 4294967312\n", "micro_batch_size", {"4294967312"});
  expect_rejected("max_steps: 4294967312\n", "max_steps", {"4294967312"});
  expect_rejected("max_steps: -1\n", "max_steps", {">= 0", "-1"});
  expect_rejected("sequence_len: 0\n", "sequence_len", {">= 1 (at most 16777216)"});
  expect_rejected("micro_batch_size: -2\n", "micro_batch_size", {"-2"});
  expect_rejected("warmup_steps: -5\n", "warmup_steps", {"-5"});
  expect_rejected("gradient_checkpointing: {every: 0}\n", "gradient_checkpointing.every", {">= 1"});
  expect_rejected("seed: -1\n", "seed", {"non-negative integer"});
}

TEST(config_checks, loss_chunk_tokens_is_checked_at_parse_time) {
  expect_rejected("loss_chunk_tokens: 0\n", "loss_chunk_tokens", {"loss_chunk_tokens", ">= 1"});
  expect_rejected("loss_chunk_tokens: -512\n", "loss_chunk_tokens", {"-512"});
}

TEST(config_checks, lora_settings_that_would_train_something_else) {
  // Before: a negative rank silently trained the whole model; [] trained nothing.
  expect_rejected("adapter: lora\nlora_r: -4\n", "lora_r", {"-4", ">= 1"});
  expect_rejected("lora_r: 0\nadapter: lora\n", "lora_r", {">= 1"});
  expect_rejected("lora_target_modules: []\n", "lora_target_modules", {"empty", "q_proj"});
  expect_rejected("lora_target_modules: [q_proj, qkv]\n", "lora_target_modules", {"'qkv'", "down_proj"});
  expect_rejected("lora_target_modules: [q_proj, q_proj]\n", "lora_target_modules", {"twice"});
  expect_rejected("lora_alpha: -16\n", "lora_alpha", {"positive"});
  expect_rejected("lora_alpha: .nan\n", "lora_alpha", {"positive"});
  TrainConfig c;
  apply_yaml_text(c, "adapter: lora\nlora_target_modules: [gate_proj, up_proj, down_proj]\n", kPath);
  EXPECT_EQ(c.lora.rank, 8);
  EXPECT_EQ(c.lora.target_modules.size(), 3u);
}

TEST(config_checks, optimizer_values_out_of_range) {
  expect_rejected("weight_decay: -0.1\n", "weight_decay", {">= 0", "-0.1"});
  expect_rejected("weight_decay: .nan\n", "weight_decay", {"nan"});
  expect_rejected("weight_decay: .inf\n", "weight_decay", {"finite"});
  expect_rejected("adam_beta1: 1.0\n", "adam_beta1", {"[0, 1)"});
  expect_rejected("adam_beta1: -0.1\n", "adam_beta1", {"[0, 1)"});
  expect_rejected("adam_beta2: 1.5\n", "adam_beta2", {"[0, 1)"});
  expect_rejected("adam_epsilon: -1.0e-8\n", "adam_epsilon", {"positive"});
  expect_rejected("adam_epsilon: 1.0e-60\n", "adam_epsilon", {"positive"});  // 0 as a float
  expect_rejected("max_grad_norm: .nan\n", "max_grad_norm", {">= 0"});
  expect_rejected("max_grad_norm: -1\n", "max_grad_norm", {">= 0"});
  expect_rejected("learning_rate: 0\n", "learning_rate", {"positive"});
  expect_rejected("learning_rate: 1.0e+300\n", "learning_rate", {"positive finite"});
  // The edges that are allowed.
  TrainConfig c;
  apply_yaml_text(c, "weight_decay: 0\nadam_beta1: 0\nadam_beta2: 0.999\nmax_grad_norm: 0\nwarmup_steps: 0\n", kPath);
  EXPECT_EQ(c.beta1, 0.0f);
  EXPECT_EQ(c.max_grad_norm, 0.0f);
}

TEST(config_checks, memory_budget_zero_is_refused_as_the_flag_is) {
  expect_rejected("memory_budget: 0\n", "memory_budget", {"above 0"});
  expect_rejected("memory_budget: 0GiB\n", "memory_budget", {"above 0"});
}

TEST(config_checks, flag_origins_name_the_flag) {
  auto e = catch_as<ConfigError>([] { check_int(4294967312LL, 1, Origin::flag("seq")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(std::string(e->what()).rfind("--seq must be", 0), 0u) << e->what();
  EXPECT_EQ(e->file, "command line");
  EXPECT_EQ(e->field, "seq");
  auto w =
      catch_as<ConfigError>([] { check_number(1.0 / 0.0, NumberRule::non_negative, Origin::flag("weight-decay")); });
  ASSERT_TRUE(w);
  EXPECT_NE(std::string(w->what()).find("--weight-decay must be a finite number >= 0, got inf"), std::string::npos)
      << w->what();
  EXPECT_EQ(check_int(16, 1, Origin::flag("seq")), 16);
  EXPECT_EQ(check_number(0.5, NumberRule::unit_open, Origin::flag("x")), 0.5f);
}

class config_files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "strata_cfgchk_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string dir_;
};

// Before: a directory read as an empty config, so every setting silently kept its default.
TEST_F(config_files, a_directory_is_not_a_config) {
  TrainConfig c;
  auto e = catch_as<IoError>([&] { apply_yaml(c, dir_); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, dir_);
  EXPECT_NE(std::string(e->what()).find("is a directory"), std::string::npos) << e->what();
}

TEST_F(config_files, an_oversized_config_is_refused) {
  const std::string big = dir_ + "/big.yaml";
  {
    std::ofstream f(big);
    const std::string line = "# " + std::string(1022, 'x') + "\n";
    for (int i = 0; i < 17 * 1024; ++i) f << line;
  }
  TrainConfig c;
  auto e = catch_as<IoError>([&] { apply_yaml(c, big); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("16 MiB"), std::string::npos) << e->what();
}

// Before: open() of a FIFO waited for a writer forever (`--config /some/fifo` hung strata-train).
TEST_F(config_files, a_fifo_is_refused_without_blocking) {
  TrainConfig c;
  const std::string fifo = dir_ + "/run.yaml";
  test_util::expect_refuses_fifo(fifo, [&] { apply_yaml(c, fifo); });
}

// Before: /dev/null read as an empty config, every setting silently at its default.
TEST_F(config_files, a_device_is_not_a_config) {
  for (const std::string dev : {"/dev/null", "/dev/zero"}) {
    TrainConfig c;
    auto e = catch_as<IoError>([&] { apply_yaml(c, dev); });
    ASSERT_TRUE(e) << dev;
    EXPECT_EQ(e->file, dev);
    EXPECT_NE(std::string(e->what()).find("a character device"), std::string::npos) << e->what();
  }
}

TEST_F(config_files, a_file_error_names_the_file_and_the_key) {
  const std::string p = dir_ + "/run.yaml";
  std::ofstream(p) << "sequence_len: 64\nplan: {[a, b]: keep}\n";
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml(c, p); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, p);
  EXPECT_EQ(std::string(e->what()).rfind(p + ":2: ", 0), 0u) << e->what();
}

// ---- check_save_dir: before the first step, not after the last.

TEST_F(config_files, save_dir_that_exists_or_can_be_created_passes_and_nothing_stays) {
  EXPECT_NO_THROW(check_save_dir(dir_, 1024));
  EXPECT_NO_THROW(check_save_dir(dir_ + "/new/deeper/out", 1024));
  EXPECT_FALSE(fs::exists(dir_ + "/new"));  // the check creates nothing
  EXPECT_TRUE(fs::is_empty(dir_));          // the probe file is gone
}

TEST_F(config_files, save_dir_under_a_file_is_refused_naming_it) {
  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "x";
  for (const std::string& d : {file, file + "/out", file + "/out/deeper"}) {
    auto e = catch_as<IoError>([&] { check_save_dir(d, 1024); });
    ASSERT_TRUE(e) << d;
    EXPECT_EQ(e->file, d);
    EXPECT_EQ(std::string(e->what()).rfind(d + ": cannot save", 0), 0u) << e->what();
    EXPECT_NE(std::string(e->what()).find("not a directory"), std::string::npos) << e->what();
  }
}

TEST_F(config_files, save_dir_that_cannot_be_written_is_refused) {
  // /proc takes no new files, even for root.
  auto e = catch_as<IoError>([&] { check_save_dir("/proc/strata_cannot_save_here/out", 1024); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("cannot create a file in /proc"), std::string::npos) << e->what();
  if (::geteuid() == 0) return;  // root writes into a read-only mode directory anyway
  const std::string ro = dir_ + "/ro";
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  auto r = catch_as<IoError>([&] { check_save_dir(ro + "/out", 1024); });
  ASSERT_TRUE(r);
  EXPECT_NE(std::string(r->what()).find("Permission denied"), std::string::npos) << r->what();
  fs::permissions(ro, fs::perms::owner_all);
}

TEST_F(config_files, save_dir_holding_a_directory_where_the_checkpoint_goes_is_refused) {
  // The save would fail only at its rename, after training ("rename ...: Is a directory").
  fs::create_directories(dir_ + "/out/model.safetensors");
  std::ofstream(dir_ + "/out/config.json") << "{}";  // a regular file is replaced: fine
  auto e = catch_as<IoError>([&] { check_save_dir(dir_ + "/out", 1024, {"model.safetensors", "config.json"}); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("model.safetensors is there and is not a regular file"), std::string::npos)
      << e->what();
  EXPECT_NO_THROW(check_save_dir(dir_ + "/out", 1024, {"config.json"}));
}

TEST_F(config_files, save_dir_without_room_for_the_checkpoint_is_refused) {
  const size_t exabyte = size_t(1) << 60;
  auto e = catch_as<IoError>([&] { check_save_dir(dir_ + "/out", exabyte); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("free"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("needs about"), std::string::npos) << e->what();
}

}  // namespace
}  // namespace strata
