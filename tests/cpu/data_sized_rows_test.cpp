// Rows sized to the data (model/data/row_data.h): a batch is as long as its longest row rounded up,
// not sequence_len. Padding positions count in no loss and, attention being causal, change nothing
// before them, so a run of data-sized batches trains exactly as the padded run: the same losses
// and weights bit for bit on cpu.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/data/datasets.h"
#include "model/data/row_data.h"
#include "model/plan/arena_sizing.h"
#include "model/run/forecast_request.h"
#include "model/run/job.h"
#include "tests/cpu/rank_threads.h"
#include "tests/cpu/tool_runner.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

const std::string kTokDir = std::string(STRATA_TEST_DATA) + "/tokenizer";

class DataSizedRows : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { s_.create("strata_data_sized_rows"); }
  static void TearDownTestSuite() { s_.remove(); }
  static std::string path(const std::string& name) { return s_.path(name); }
  static tool_test::Scratch s_;
};
tool_test::Scratch DataSizedRows::s_;

// Alpaca examples from a few tokens to a couple of hundred: rows of several lengths.
std::string write_examples(const std::string& file, int n) {
  std::ofstream o(file);
  for (int i = 0; i < n; ++i) {
    std::string out;
    const int words = i % 3 == 0 ? 2 : i % 3 == 1 ? 30 : 60;
    for (int w = 0; w < words; ++w) out += fmt::format("w{} ", (i * 7 + w) % 23);
    o << nlohmann::json{{"instruction", fmt::format("Say {} things.", words)}, {"output", out}}.dump() << "\n";
  }
  return file;
}

struct RunOut {
  LoopResult result;
  std::vector<std::vector<std::byte>> state;
  std::vector<size_t> tokens;  // per step
};

// The loop on the dataset's rows with cfg.batch_lengths as given (empty: padded to seq), on `comm`'s ranks.
RunOut train(const TrainConfig& c, DatasetRows dr, Communicator* comm = nullptr) {
  io::LlamaConfig mc = test_util::tiny_config();
  mc.vocab_size = 3008;  // the llama3 test tokenizer's
  test_util::Rig r;
  r.be = make_cpu_backend(size_t(256) << 20);
  r.model = std::make_unique<LlamaModel>(*r.be, mc, model_options(c));
  r.model->init_random(11);
  TrainOptions to = train_options(c);
  to.comm = comm;
  r.trainer = std::make_unique<Trainer>(*r.be, *r.model, to);
  RunOut run;
  LoopOptions lo = test_util::quiet();
  lo.on_step = [&](const StepStats& s) { run.tokens.push_back(s.tokens); };
  TokenRows rows = c.sample_packing ? TokenRows(std::move(dr.inputs), std::move(dr.targets), std::move(dr.positions),
                                                c.seq, dr.examples)
                                    : TokenRows(std::move(dr.inputs), std::move(dr.targets), c.seq);
  r.loop = std::make_unique<TrainLoop>(c, *r.be, *r.model, *r.trainer, std::move(rows), lo);
  run.result = r.loop->run();
  run.state = test_util::state_bytes(*r.model);
  return run;
}

RunOut train(const TrainConfig& c) {
  return train(c, build_dataset_rows(dataset_options(c), kTokDir + "/llama3", nullptr));
}

}  // namespace

TEST_F(DataSizedRows, LengthsBucketsAndBatches) {
  // Rows of 3, 5 (the last counted target decides, not the padding) and 9 tokens in rows of 16.
  std::vector<int32_t> in(48, 0), tg(48, -1);
  tg[1] = 4;        // row 0: last counted target at 1 -> length 2
  tg[16 + 4] = 4;   // row 1: length 5
  tg[32 + 8] = 4;   // row 2: length 9
  in[32 + 12] = 7;  // an input past the last counted target is cut with the padding
  TokenRows rows(in, tg, 16);
  EXPECT_EQ(rows.row_len(0), 2);
  EXPECT_EQ(rows.row_len(1), 5);
  EXPECT_EQ(rows.row_len(2), 9);
  EXPECT_EQ(rows.longest_row(), 9);
  EXPECT_EQ(rows.bucket_lengths(4), (std::vector<int>{4, 8, 12}));
  EXPECT_EQ(rows.bucket_lengths(8), (std::vector<int>{8, 16}));
  EXPECT_EQ(rows.bucket_lengths(128), (std::vector<int>{16}));  // never above sequence_len
  EXPECT_EQ(rows.batch_lengths(), (std::vector<int>{16}));      // by default: padded to seq
  rows.set_batch_lengths({4, 8, 12});
  RowSampler s({0, 1, 2}, 1, /*shuffle=*/false);
  const Batch a = s.next(rows, 1), b = s.next(rows, 2);
  EXPECT_EQ(a.T, 4);
  EXPECT_EQ(b.T, 12);  // rows 1 and 2: the longest of the two, rounded
  EXPECT_EQ(b.inputs.size(), 24u);
  EXPECT_EQ(b.targets[4], 4);
  EXPECT_EQ(b.targets[12 + 8], 4);
  const std::vector<Batch> ev = eval_batches(rows, {0, 1}, 2);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].T, 8);
  EXPECT_THROW(rows.set_batch_lengths({4, 8}), Error);  // does not hold the longest row
  rows.set_batch_lengths({4, 12});  // 8 left out (it did not fit a budget): its batches take the next longer length
  RowSampler one({1}, 1, /*shuffle=*/false);
  EXPECT_EQ(one.next(rows, 1).T, 12);
  EXPECT_EQ(row_multiple(1), 128);
  EXPECT_EQ(row_multiple(4), 128);
  EXPECT_EQ(row_multiple(3), 384);  // every rank of a sequence-parallel group holds T / 3 tokens
}

// The padded run and the data-sized runs (multiples of 128, and of 1: every length its own) give the same losses,
// held-out losses and final weights and moments, bit for bit; the data-sized steps run fewer tokens. Bit for bit
// needs the LM head's loss chunk to hold a whole micro-batch: its weight gradient is summed chunk by chunk, and
// padding moves the chunks' boundaries (LossChunksRoundOnly).
TEST_F(DataSizedRows, LossesAndWeightsMatchPaddedRows) {
  TrainConfig cfg;
  cfg.seq = 512;
  cfg.batch = 2;
  cfg.grad_accum = 2;
  cfg.steps = 5;
  cfg.steps_given = true;
  cfg.val_set_size = 3;
  cfg.eval_steps = 2;
  cfg.loss_chunk_tokens = 8192;
  cfg.datasets = {{write_examples(path("mixed.jsonl"), 15), "alpaca", ""}};
  const RunOut padded = train(cfg);

  DatasetRows dr = build_dataset_rows(dataset_options(cfg), kTokDir + "/llama3", nullptr);
  const TokenRows rows(dr.inputs, dr.targets, cfg.seq);
  ASSERT_LT(rows.longest_row(), 256);  // the data's longest row is well under sequence_len
  for (int mult : {128, 1}) {
    TrainConfig c = cfg;
    c.batch_lengths = rows.bucket_lengths(mult);
    ASSERT_GT(c.batch_lengths.size(), 1u) << mult;
    const RunOut sized = train(c);
    ASSERT_EQ(sized.result.losses.size(), padded.result.losses.size());
    for (size_t i = 0; i < sized.result.losses.size(); ++i)
      EXPECT_EQ(std::memcmp(&sized.result.losses[i], &padded.result.losses[i], 4), 0)
          << "multiple " << mult << " step " << i + 1 << ": " << sized.result.losses[i] << " vs "
          << padded.result.losses[i];
    ASSERT_EQ(sized.result.eval_loss.size(), padded.result.eval_loss.size());
    for (size_t i = 0; i < sized.result.eval_loss.size(); ++i)
      EXPECT_EQ(std::memcmp(&sized.result.eval_loss[i].second, &padded.result.eval_loss[i].second, 4), 0)
          << "multiple " << mult << " eval " << i;
    EXPECT_TRUE(sized.state == padded.state) << "multiple " << mult << ": the weights or moments differ";
    size_t want = 0, got = 0;
    for (size_t t : padded.tokens) want += t;
    for (size_t t : sized.tokens) got += t;
    EXPECT_EQ(want, size_t(5 * 2 * 2 * 512));
    EXPECT_LE(got, want / 2) << "multiple " << mult;
  }
}

// With loss chunks smaller than a micro-batch the head's weight gradient is summed in other groups, so the
// weights differ in rounding only: the losses agree to float precision step after step.
TEST_F(DataSizedRows, LossChunksRoundOnly) {
  TrainConfig cfg;
  cfg.seq = 512;
  cfg.batch = 2;
  cfg.steps = 6;
  cfg.steps_given = true;
  cfg.loss_chunk_tokens = 128;
  cfg.datasets = {{write_examples(path("chunks.jsonl"), 12), "alpaca", ""}};
  const RunOut padded = train(cfg);
  DatasetRows dr = build_dataset_rows(dataset_options(cfg), kTokDir + "/llama3", nullptr);
  TrainConfig c = cfg;
  c.batch_lengths = TokenRows(dr.inputs, dr.targets, cfg.seq).bucket_lengths(kRowMultiple);
  const RunOut sized = train(c);
  ASSERT_EQ(sized.result.losses.size(), 6u);
  EXPECT_EQ(std::memcmp(&sized.result.losses[0], &padded.result.losses[0], 4), 0);  // the same weights yet
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(sized.result.losses[i], padded.result.losses[i], 1e-5 * padded.result.losses[i]) << "step " << i + 1;
}

// Sample packing: the rows' padding after the last example is cut the same way, with the same losses and weights.
TEST_F(DataSizedRows, PackedRowsMatchPaddedRows) {
  TrainConfig cfg;
  cfg.seq = 1024;
  cfg.batch = 1;
  cfg.steps = 3;
  cfg.steps_given = true;
  cfg.sample_packing = true;
  cfg.datasets = {{write_examples(path("packed.jsonl"), 9), "alpaca", ""}};
  const RunOut padded = train(cfg);
  DatasetRows dr = build_dataset_rows(dataset_options(cfg), kTokDir + "/llama3", nullptr);
  const TokenRows rows(dr.inputs, dr.targets, dr.positions, cfg.seq, dr.examples);
  TrainConfig c = cfg;
  c.batch_lengths = rows.bucket_lengths(128);
  ASSERT_LT(c.batch_lengths.front(), cfg.seq);
  const RunOut sized = train(c);
  ASSERT_EQ(sized.result.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(&sized.result.losses[i], &padded.result.losses[i], 4), 0) << "step " << i + 1;
  EXPECT_TRUE(sized.state == padded.state);
}

// The forecast of a data-sized run is the longest batch's, with the batch blocks of the longest; the arena of
// several lengths is the highest high-water among them, and a shorter batch's step stays within it.
TEST_F(DataSizedRows, ForecastAndArenaFollowTheLongestBatch) {
  TrainConfig c;
  c.seq = 4096;
  c.batch = 2;
  c.batch_lengths = {128, 384, 512};
  const io::LlamaConfig mc = resolve_model("tiny");
  const ForecastRequest req = train_forecast_request(c, mc, SimMirror::cuda, find_profile("h100_80gb"));
  EXPECT_EQ(req.seq, 512);
  EXPECT_EQ(req.batch_tokens, 2 * 512);
  const ArenaSizing all = arena_for_lengths(req, c.batch_lengths);
  const ArenaSizing longest = arena_for_plan(req);
  EXPECT_GE(all.high_water, longest.high_water);
  for (int t : c.batch_lengths) {
    ForecastRequest r = req;
    r.seq = t;
    r.budget = all.bytes;
    const Forecast f = forecast(r);
    EXPECT_TRUE(f.fits) << t;
    EXPECT_LE(f.high_water_bytes, all.high_water) << t;
  }
  // Under a budget: every length that fits stays, and the longest (the planned one) always does.
  TrainConfig b = c;
  EXPECT_EQ(batch_lengths_within(b, mc, "cuda", "H100", "", 1, 0, all.bytes), c.batch_lengths);
  const std::vector<int> none = batch_lengths_within(b, mc, "cuda", "H100", "", 1, 0, 1);
  EXPECT_EQ(none, std::vector<int>{512});
  // Padded to sequence_len, the forecast is of sequence_len.
  TrainConfig p = c;
  p.batch_lengths.clear();
  EXPECT_EQ(train_forecast_request(p, mc, SimMirror::cuda, find_profile("h100_80gb")).seq, 4096);
}

// Data parallel: every rank takes its rows of the same global batch, whose length is the longest of all the
// ranks' rows, so the ranks run the same shapes; two ranks sized to the data give the padded two ranks' losses
// and weights bit for bit, and the ranks agree.
TEST_F(DataSizedRows, TwoRanksMatchTheirPaddedRun) {
  TrainConfig cfg;
  cfg.seq = 512;
  cfg.batch = 2;
  cfg.steps = 4;
  cfg.steps_given = true;
  cfg.loss_chunk_tokens = 8192;
  cfg.datasets = {{write_examples(path("ranks.jsonl"), 16), "alpaca", ""}};
  const DatasetRows dr = build_dataset_rows(dataset_options(cfg), kTokDir + "/llama3", nullptr);
  TrainConfig sized = cfg;
  sized.batch_lengths = TokenRows(dr.inputs, dr.targets, cfg.seq).bucket_lengths(kRowMultiple);
  ASSERT_GT(sized.batch_lengths.size(), 1u);
  auto ranks = [&](const TrainConfig& c) {
    return test_util::run_rank_threads<RunOut>(2, [&](Communicator* comm, int) { return train(c, dr, comm); });
  };
  const std::vector<RunOut> a = ranks(cfg), b = ranks(sized);
  ASSERT_EQ(a[0].result.losses.size(), 4u);
  ASSERT_EQ(b[0].result.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::memcmp(&a[0].result.losses[i], &b[0].result.losses[i], 4), 0) << "step " << i + 1;
  EXPECT_TRUE(a[0].state == b[0].state);
  EXPECT_TRUE(b[0].state == b[1].state);
  EXPECT_EQ(b[0].tokens, b[1].tokens);  // the same batch lengths on both ranks
  size_t padded = 0, sized_tokens = 0;
  for (size_t t : a[0].tokens) padded += t;
  for (size_t t : b[0].tokens) sized_tokens += t;
  EXPECT_LT(sized_tokens, padded);
}

// The tools: strata-train says the batch length it chose and why (and trains at it), --preview-data shows the rows
// by length, and strata-plan of the dataset config forecasts the longest batch, keeping sequence_len in the config
// it writes.
TEST_F(DataSizedRows, ToolsSayAndUseTheBatchLength) {
  using namespace strata::tool_test;
  for (const std::string& bin : {kMakeTiny, kTrain, kPlan})
    ASSERT_TRUE(fs::exists(bin)) << bin << " is missing: build the tools next to the tests";
  const std::string model = path("tools_model");
  Proc mk = s_.run(kMakeTiny + " " + quote(model) +
                   " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 3008 --tokens 100");
  ASSERT_EQ(mk.code, 0) << mk.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kTokDir + "/llama3/" + f, model + "/" + f, fs::copy_options::overwrite_existing);
  const std::string data = write_examples(path("tools.jsonl"), 9);
  const std::string cfg = path("tools.yaml");
  std::ofstream(cfg) << fmt::format(
      "base_model: {}\ndatasets:\n  - path: {}\n    type: alpaca\nsequence_len: 2048\nmicro_batch_size: 3\n"
      "max_steps: 3\n",
      model, data);
  const std::regex chosen(
      R"(batches: sized to the data: the longest row is (\d+) tokens, so batches are at most (\d+) tokens \(sequence_len 2048\); each batch is as long as its longest row rounded up to a multiple of 128)");
  Proc pv = s_.run(kTrain + " --config " + quote(cfg) + " --preview-data 1");
  ASSERT_EQ(pv.code, 0) << pv.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(pv.out, m, chosen)) << pv.out;
  const int longest = std::stoi(m[1]), batch_len = std::stoi(m[2]);
  EXPECT_EQ(batch_len, (longest + 127) / 128 * 128);
  EXPECT_LT(batch_len, 2048);
  EXPECT_NE(pv.out.find("rows by length (a row alone in its batch): "), std::string::npos) << pv.out;
  EXPECT_NE(pv.out.find(fmt::format("against {} padded to sequence_len", 9 * 2048)), std::string::npos) << pv.out;

  Proc tr = s_.run(kTrain + " --config " + quote(cfg) + " --json");
  ASSERT_EQ(tr.code, 0) << tr.err;
  const std::string said = tr.out + tr.err;
  ASSERT_TRUE(std::regex_search(said, m, chosen)) << said;
  EXPECT_NE(said.find(fmt::format("batch 3 x seq {} at most (sized to the data; sequence_len 2048)", batch_len)),
            std::string::npos)
      << said;
  std::vector<double> sized_losses;
  for (const std::string& l : lines(tr.out)) {
    if (l.rfind("{\"step\"", 0) != 0) continue;
    const auto j = nlohmann::json::parse(l);
    sized_losses.push_back(double(j["loss"]));
    EXPECT_GT(double(j["tokens_per_s"]), 0.0);
  }
  EXPECT_EQ(sized_losses.size(), 3u);

  // pad_to_sequence_len: true (axolotl's key) pads every batch to sequence_len: said, planned and trained so,
  // with the sized run's losses (the padding is never a target; float rounding aside).
  const std::string padded_cfg = path("tools_padded.yaml");
  std::ofstream(padded_cfg) << fmt::format(
      "base_model: {}\ndatasets:\n  - path: {}\n    type: alpaca\nsequence_len: 2048\nmicro_batch_size: 3\n"
      "max_steps: 3\npad_to_sequence_len: true\n",
      model, data);
  Proc tp = s_.run(kTrain + " --config " + quote(padded_cfg) + " --json");
  ASSERT_EQ(tp.code, 0) << tp.err;
  EXPECT_NE((tp.out + tp.err).find("batches: 2048 tokens a row (sequence_len; pad_to_sequence_len: true)"),
            std::string::npos)
      << tp.out + tp.err;
  EXPECT_FALSE(std::regex_search(tp.out + tp.err, chosen));
  std::vector<double> padded_losses;
  for (const std::string& l : lines(tp.out))
    if (l.rfind("{\"step\"", 0) == 0) padded_losses.push_back(double(nlohmann::json::parse(l)["loss"]));
  ASSERT_EQ(padded_losses.size(), sized_losses.size());
  for (size_t i = 0; i < padded_losses.size(); ++i) EXPECT_NEAR(padded_losses[i], sized_losses[i], 1e-4) << i;
  Proc pp = s_.run(kPlan + " --config " + quote(padded_cfg) + " --model " + quote(model));
  ASSERT_EQ(pp.code, 0) << pp.err;
  EXPECT_NE(pp.out.find("| seq 2048 x batch 3 |"), std::string::npos) << pp.out;

  Proc pl = s_.run(kPlan + " --config " + quote(cfg) + " --model " + quote(model));
  ASSERT_EQ(pl.code, 0) << pl.err;
  EXPECT_NE(pl.out.find(fmt::format("| seq {} x batch 3 |", batch_len)), std::string::npos) << pl.out;
  EXPECT_TRUE(std::regex_search(pl.out, m, chosen)) << pl.out;
  Proc pb = s_.run(kPlan + " --config " + quote(cfg) + " --model " + quote(model) + " --budget 1GiB");
  ASSERT_EQ(pb.code, 0) << pb.err;
  EXPECT_NE(pb.out.find(fmt::format("sequence_len: 2048  # batches sized to the data: at most {} tokens", batch_len)),
            std::string::npos)
      << pb.out;
  Proc ps = s_.run(kPlan + " --config " + quote(cfg) + " --model " + quote(model) + " --seq 2048");
  ASSERT_EQ(ps.code, 0) << ps.err;
  EXPECT_NE(ps.out.find("| seq 2048 x batch 3 |"), std::string::npos) << ps.out;
  // A dataset config with a built-in model name has no tokenizer to size the rows with: said, naming the flag.
  Proc nb = s_.run(kPlan + " --config " + quote(cfg) + " --model tiny");
  EXPECT_EQ(nb.code, 2);
  EXPECT_NE(nb.err.find("need a tokenizer to size the rows"), std::string::npos) << nb.err;
}
