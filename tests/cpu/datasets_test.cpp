// Datasets for strata-train (model/data/datasets.h): each format renders and tokenises to the ids the
// Tokenizer gives for the expected text; prompt masking; truncate and drop; the cache (hit,
// invalidated by the source or the tokenizer); bad rows named by file, line and field; the YAML
// keys; and strata-train on a small jsonl end to end, with an exact resume.
#include "model/data/datasets.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/data/chat_template.h"
#include "model/run/checkpoint.h"
#include "tests/cpu/tool_runner.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

const std::string kTokDir = std::string(STRATA_TEST_DATA) + "/tokenizer";

class Datasets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { s_.create("strata_datasets"); }
  static void TearDownTestSuite() { s_.remove(); }
  static std::string path(const std::string& name) { return s_.path(name); }
  static std::string write(const std::string& name, const std::string& text) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static tool_test::Scratch s_;
};
tool_test::Scratch Datasets::s_;

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The ids of `text` without BOS/EOS.
std::vector<int32_t> ids(const text::Tokenizer& tok, const std::string& text) {
  return tok.encode(text, false);
}

// An example from its prompt and response ids as the docs state it: BOS + prompt + response + EOS.
Example expected(const text::Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<int32_t>& response,
                 bool eos = true) {
  Example e;
  e.ids = cat({{tok.bos_id()}, prompt, response});
  e.trained.assign(e.ids.size(), 0);
  std::fill(e.trained.begin() + long(1 + prompt.size()), e.trained.end(), 1);
  if (eos) {
    e.ids.push_back(tok.eos_id());
    e.trained.push_back(1);
  }
  return e;
}

}  // namespace

TEST_F(Datasets, CompletionJsonlTxtAndField) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  ASSERT_EQ(tok.bos_id(), 3000);
  ASSERT_EQ(tok.eos_id(), 3004);
  const std::string a = "Hello world, this is text.", b = "Second line \u00e9\u00e8 emoji \U0001F600";
  const std::string jl = write(
      "c.jsonl", nlohmann::json{{"text", a}}.dump() + "\n\n" + nlohmann::json{{"text", b}, {"other", 1}}.dump() + "\n");
  auto ex = tokenize_dataset({jl, "completion", ""}, tool_test::slurp(jl), tok);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0], expected(tok, {}, ids(tok, a)));
  EXPECT_EQ(ex[1], expected(tok, {}, ids(tok, b)));
  EXPECT_EQ(ex[0].ids, cat({tok.encode(a, true), {3004}}));  // BOS as the tokenizer's template adds it

  const std::string jf = write("c_field.jsonl", nlohmann::json{{"body", a}}.dump() + "\n");
  ex = tokenize_dataset({jf, "completion", "body"}, tool_test::slurp(jf), tok);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0], expected(tok, {}, ids(tok, a)));

  const std::string txt = write("c.txt", a + "\n\n" + b + "\n");
  ex = tokenize_dataset({txt, "completion", ""}, tool_test::slurp(txt), tok);
  ASSERT_EQ(ex.size(), 1u);  // one document per .txt file
  EXPECT_EQ(ex[0], expected(tok, {}, ids(tok, a + "\n\n" + b + "\n")));
}

TEST_F(Datasets, AlpacaWithAndWithoutInput) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  const std::string f = write("a.jsonl", R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
{"instruction": "Say hi.", "output": "Hi!"}
{"instruction": "Say hi.", "input": "", "output": "Hi!"}
)");
  const auto ex = tokenize_dataset({f, "alpaca", ""}, tool_test::slurp(f), tok);
  ASSERT_EQ(ex.size(), 3u);
  const std::string with_input =
      "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
      "response that appropriately completes the request.\n\n### Instruction:\nAdd the numbers.\n\n### Input:\n2 "
      "and 3\n\n### Response:\n";
  const std::string no_input =
      "Below is an instruction that describes a task. Write a response that appropriately completes the "
      "request.\n\n### Instruction:\nSay hi.\n\n### Response:\n";
  EXPECT_EQ(ex[0], expected(tok, ids(tok, with_input), ids(tok, "5")));
  EXPECT_EQ(ex[1], expected(tok, ids(tok, no_input), ids(tok, "Hi!")));
  EXPECT_EQ(ex[2], ex[1]);
}

TEST_F(Datasets, ChatLlama3Template) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  ASSERT_EQ(chat_template_for(tok), ChatTemplate::llama3);
  const std::string f = write(
      "chat3.jsonl",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": " Bye\n"}, {"role": "assistant", "content": "Goodbye.  "}]}
)");
  const auto ex = tokenize_dataset({f, "chat", ""}, tool_test::slurp(f), tok);
  ASSERT_EQ(ex.size(), 1u);
  const std::string h = "<|start_header_id|>", e = "<|end_header_id|>\n\n", eot = "<|eot_id|>";
  Example want;
  auto add = [&](const std::string& text, bool trained) {
    const auto t = ids(tok, text);
    want.ids.insert(want.ids.end(), t.begin(), t.end());
    want.trained.insert(want.trained.end(), t.size(), uint8_t(trained));
  };
  want.ids = {3000};
  want.trained = {0};
  add(h + "system" + e + "Be brief." + eot + h + "user" + e + "Hi there" + eot + h + "assistant" + e, false);
  add("Hello!" + eot, true);
  add(h + "user" + e + "Bye" + eot + h + "assistant" + e, false);
  add("Goodbye." + eot, true);  // ends in <|eot_id|>, the EOS: no second one
  EXPECT_EQ(ex[0], want);
  EXPECT_EQ(want.ids.back(), 3004);
  // The rendered text as one string gives the same ids here (special tokens split it anyway).
  EXPECT_EQ(ex[0].ids, tok.encode("<|begin_of_text|>" + h + "system" + e + "Be brief." + eot + h + "user" + e +
                                      "Hi there" + eot + h + "assistant" + e + "Hello!" + eot + h + "user" + e + "Bye" +
                                      eot + h + "assistant" + e + "Goodbye." + eot,
                                  false));
}

TEST_F(Datasets, ChatSimpleTemplate) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama2");
  ASSERT_EQ(chat_template_for(tok), ChatTemplate::simple);
  ASSERT_EQ(tok.bos_id(), 1);
  ASSERT_EQ(tok.eos_id(), 2);
  const std::string f =
      write("chat2.jsonl",
            R"({"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}]})");
  const auto ex = tokenize_dataset({f, "chat", ""}, tool_test::slurp(f), tok);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0], expected(tok, ids(tok, "<|user|>\nHi there\n<|assistant|>\n"), ids(tok, "Hello!\n")));
}

TEST_F(Datasets, PromptMaskingAndPadding) {
  Example e;
  e.ids = {1, 10, 11, 12, 20, 21, 2};  // BOS, prompt x3, response x2, EOS
  e.trained = {0, 0, 0, 0, 1, 1, 1};
  std::vector<int32_t> in, tg;
  RowStats st = lay_rows({e}, 10, 99, false, false, in, tg);
  EXPECT_EQ(st.rows, 1);
  EXPECT_EQ(st.trained_targets, 3);
  EXPECT_EQ(in, (std::vector<int32_t>{1, 10, 11, 12, 20, 21, 2, 99, 99, 99}));
  // Input i predicts token i + 1: -1 exactly where that token is a prompt token or padding.
  EXPECT_EQ(tg, (std::vector<int32_t>{-1, -1, -1, 20, 21, 2, -1, -1, -1, -1}));
  in.clear();
  tg.clear();
  st = lay_rows({e}, 10, 99, true, false, in, tg);
  EXPECT_EQ(st.trained_targets, 6);
  EXPECT_EQ(tg, (std::vector<int32_t>{10, 11, 12, 20, 21, 2, -1, -1, -1, -1}));
}

TEST_F(Datasets, PlainTextIsCutIntoConsecutiveRowsNotTruncated) {
  // One 25-token document, rows of 10: windows [0, 11), [10, 21), [20, 25); every token after the
  // first is a target exactly once, whatever the truncation or drop setting.
  Example e;
  for (int i = 0; i < 25; ++i) {
    e.ids.push_back(100 + i);
    e.trained.push_back(1);
  }
  for (bool drop : {false, true}) {
    std::vector<int32_t> in, tg;
    const RowStats st = lay_rows({e}, 10, 7, false, drop, in, tg, true);
    EXPECT_EQ(st.rows, 3);
    EXPECT_EQ(st.truncated, 0);
    EXPECT_EQ(st.dropped, 0);
    EXPECT_EQ(st.trained_targets, 24);
    ASSERT_EQ(in.size(), 30u);
    ASSERT_EQ(tg.size(), 30u);
    for (int i = 0; i < 24; ++i) {
      EXPECT_EQ(in[size_t(i)], 100 + i) << i;
      EXPECT_EQ(tg[size_t(i)], 101 + i) << i;
    }
    EXPECT_EQ(in[24], 124);
    for (size_t i = 25; i < 30; ++i) EXPECT_EQ(in[i], 7) << "padding";
    for (size_t i = 24; i < 30; ++i) EXPECT_EQ(tg[i], -1) << "nothing after the last token";
  }
  // A document no longer than a row is laid out as before.
  Example shortdoc;
  shortdoc.ids = {1, 2, 3};
  shortdoc.trained = {1, 1, 1};
  std::vector<int32_t> a_in, a_tg, b_in, b_tg;
  lay_rows({shortdoc}, 10, 7, false, false, a_in, a_tg, true);
  lay_rows({shortdoc}, 10, 7, false, false, b_in, b_tg);
  EXPECT_EQ(a_in, b_in);
  EXPECT_EQ(a_tg, b_tg);
  EXPECT_TRUE(chunks_rows({"x/c.txt", "completion", ""}));
  EXPECT_FALSE(chunks_rows({"x/c.jsonl", "completion", ""}));
  EXPECT_FALSE(chunks_rows({"x/c.txt", "chat", ""}));
}

TEST_F(Datasets, TruncateOrDropCounts) {
  auto ex = [](int n, int prompt) {
    Example e;
    for (int i = 0; i < n; ++i) {
      e.ids.push_back(i + 1);
      e.trained.push_back(i >= prompt);
    }
    return e;
  };
  const std::vector<Example> all = {ex(4, 1), ex(9, 2), ex(6, 1), ex(12, 8), ex(5, 1)};
  std::vector<int32_t> in, tg;
  RowStats st = lay_rows(all, 6, 0, false, false, in, tg);
  EXPECT_EQ(st.examples, 5);
  EXPECT_EQ(st.truncated, 1);  // the 9: cut to 6; the 12 keeps only prompt tokens: untrained
  EXPECT_EQ(st.untrained, 1);
  EXPECT_EQ(st.dropped, 0);
  EXPECT_EQ(st.rows, 4);
  ASSERT_EQ(in.size(), 24u);
  EXPECT_EQ(std::vector<int32_t>(in.begin() + 6, in.begin() + 12), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(std::vector<int32_t>(tg.begin() + 6, tg.begin() + 12), (std::vector<int32_t>{-1, 3, 4, 5, 6, -1}));
  in.clear();
  tg.clear();
  st = lay_rows(all, 6, 0, false, true, in, tg);
  EXPECT_EQ(st.truncated, 0);
  EXPECT_EQ(st.dropped, 2);
  EXPECT_EQ(st.rows, 3);
  EXPECT_EQ(in.size(), 18u);
}

TEST_F(Datasets, CacheHitAndInvalidation) {
  const std::string tokdir = path("tok_copy");
  fs::create_directories(tokdir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kTokDir + "/llama3/" + f, tokdir + "/" + f, fs::copy_options::overwrite_existing);
  const text::Tokenizer tok = text::Tokenizer::load(tokdir);
  const std::string f = write("cache.jsonl", R"({"instruction": "Name a colour.", "output": "Blue."}
{"instruction": "Name a fruit.", "input": "red", "output": "Apple."}
)");
  const DatasetSpec d{f, "alpaca", ""};
  const DatasetLoad first = load_dataset(d, tok, tokdir, nullptr);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_TRUE(fs::is_regular_file(first.cache_file)) << first.cache_file;
  EXPECT_EQ(fs::path(first.cache_file).parent_path().string(), f + ".strata-cache");
  const DatasetLoad second = load_dataset(d, tok, tokdir, nullptr);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.cache_file, first.cache_file);
  EXPECT_EQ(second.examples, first.examples);
  // Rows built from the cached examples are the same rows.
  std::vector<int32_t> i1, t1, i2, t2;
  lay_rows(first.examples, 64, 3005, false, false, i1, t1);
  lay_rows(second.examples, 64, 3005, false, false, i2, t2);
  EXPECT_EQ(i1, i2);
  EXPECT_EQ(t1, t2);
  // Another type of the same file is another cache entry.
  EXPECT_FALSE(load_dataset({f, "completion", "output"}, tok, tokdir, nullptr).cache_hit);

  // The source changes: a miss, and the new row is in the examples.
  std::ofstream(f, std::ios::app) << R"({"instruction": "Name a tree.", "output": "Oak."})"
                                  << "\n";
  const DatasetLoad changed = load_dataset(d, tok, tokdir, nullptr);
  EXPECT_FALSE(changed.cache_hit);
  EXPECT_NE(changed.cache_file, first.cache_file);
  EXPECT_EQ(changed.examples.size(), 3u);
  EXPECT_TRUE(load_dataset(d, tok, tokdir, nullptr).cache_hit);

  // The tokenizer changes (here its config): a miss.
  std::ofstream(tokdir + "/tokenizer_config.json", std::ios::app) << "\n";
  const DatasetLoad new_tok = load_dataset(d, text::Tokenizer::load(tokdir), tokdir, nullptr);
  EXPECT_FALSE(new_tok.cache_hit);
  EXPECT_EQ(new_tok.examples, changed.examples);

  // A damaged cache file is tokenised again, not trusted.
  std::ofstream(new_tok.cache_file, std::ios::binary | std::ios::trunc) << "STRDSET1garbage";
  const DatasetLoad damaged = load_dataset(d, tok, tokdir, nullptr);
  EXPECT_FALSE(damaged.cache_hit);
  EXPECT_EQ(damaged.examples, changed.examples);
  EXPECT_TRUE(load_dataset(d, tok, tokdir, nullptr).cache_hit);

  // A well-formed cache holding an id outside the tokenizer's vocabulary (negative, or past it) or a flag
  // other than 0/1 is verified in full at load and tokenised again, not refused later when its row is drawn.
  const std::string good = [&] {
    std::ifstream in(damaged.cache_file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  uint32_t len0 = 0;
  std::memcpy(&len0, good.data() + 16, 4);
  ASSERT_GT(len0, 1u);
  struct Poke {
    size_t at;
    std::string bytes;
  };
  auto i32 = [](int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  for (const Poke& pk : {Poke{20 + 4, i32(-1)}, Poke{20, i32(tok.vocab_size())}, Poke{20 + 4 * len0 + 1, "\x02"}}) {
    std::string bad = good;
    bad.replace(pk.at, pk.bytes.size(), pk.bytes);
    std::ofstream(damaged.cache_file, std::ios::binary | std::ios::trunc) << bad;
    char* log = nullptr;
    size_t log_n = 0;
    std::FILE* warn = ::open_memstream(&log, &log_n);
    const DatasetLoad again = load_dataset(d, tok, tokdir, warn);
    std::fclose(warn);
    EXPECT_FALSE(again.cache_hit) << pk.at;
    EXPECT_EQ(again.examples, changed.examples);
    EXPECT_NE(std::string(log).find(damaged.cache_file + " is damaged; tokenising again"), std::string::npos) << log;
    std::free(log);
  }
}

TEST_F(Datasets, BadRowsNameFileLineAndField) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  struct Case {
    const char* type;
    std::string text;
    std::vector<std::string> says;
  };
  const std::string ok_alpaca = R"({"instruction": "a", "output": "b"})";
  const std::string ok_chat = R"({"messages": [{"role": "user", "content": "a"}]})";
  const std::vector<Case> cases = {
      {"alpaca", ok_alpaca + "\n{not json\n", {"line 2", "not valid JSON"}},
      {"alpaca", ok_alpaca + "\n\n[1, 2]\n", {"line 3", "expected a JSON object"}},
      {"alpaca", ok_alpaca + "\n" + R"({"instruction": "a"})", {"line 2", "'output'", "missing"}},
      {"alpaca", R"({"instruction": 3, "output": "b"})", {"line 1", "'instruction'", "must be a string", "number"}},
      {"alpaca", R"({"instruction": "a", "input": ["x"], "output": "b"})", {"line 1", "'input'", "array"}},
      {"completion", R"({"content": "a"})", {"line 1", "'text'", "missing"}},
      {"chat", ok_chat + "\n" + R"({"messages": "hi"})", {"line 2", "'messages'", "list"}},
      {"chat", R"({"messages": []})", {"line 1", "'messages'", "empty"}},
      {"chat",
       ok_chat + "\n" + ok_chat + "\n" +
           R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})",
       {"line 3", "'messages[1].role'", "'bot'", "system, user or assistant"}},
      {"chat", R"({"messages": [{"role": "user"}]})", {"line 1", "'messages[0].content'", "missing"}},
      {"chat", R"({"messages": [{"role": "user", "content": 5}]})", {"line 1", "'messages[0].content'", "string"}},
      {"chat", R"({"messages": ["hi"]})", {"line 1", "'messages[0]'", "object"}},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string f = write(fmt::format("bad{}.jsonl", n++), c.text);
    try {
      load_dataset({f, c.type, ""}, tok, kTokDir + "/llama3", nullptr);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(f), std::string::npos) << what;
      EXPECT_EQ(e.file, f);
      for (const std::string& s : c.says)
        EXPECT_NE(what.find(s), std::string::npos) << "'" << s << "' not in: " << what;
    }
    EXPECT_FALSE(fs::exists(f + ".strata-cache")) << "a cache was written for a bad file: " << c.text;
  }
}

TEST_F(Datasets, YamlKeys) {
  TrainConfig c;
  apply_yaml_text(c, R"(
datasets:
  - path: a.jsonl
    type: alpaca
  - path: b.jsonl
    type: completion
    field: body
  - path: c.txt
tokenizer: /tok
train_on_inputs: true
excess_length_strategy: drop
sample_packing: false
)",
                  "x.yaml");
  ASSERT_EQ(c.datasets.size(), 3u);
  EXPECT_EQ(c.datasets[0].type, "alpaca");
  EXPECT_EQ(c.datasets[1].field, "body");
  EXPECT_EQ(c.datasets[2].type, "completion");
  EXPECT_EQ(c.tokenizer_dir, "/tok");
  EXPECT_TRUE(c.train_on_inputs);
  EXPECT_TRUE(c.drop_excess);
  EXPECT_FALSE(TrainConfig{}.train_on_inputs);  // axolotl's default
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"datasets: a.jsonl", "datasets"},
      {"datasets: []", "datasets"},
      {"datasets: [{path: a.jsonl, type: sharegpt}]", "datasets[0].type"},
      {"datasets: [{path: a.jsonl, kind: chat}]", "datasets[0].kind"},
      {"datasets: [{type: chat}]", "datasets[0].path"},
      {"datasets: [{path: a.jsonl, type: chat, field: x}]", "datasets[0].field"},
      {"excess_length_strategy: wrap", "excess_length_strategy"},
      {"sample_packing: yes please", "sample_packing"},
  };
  for (const auto& [text, field] : bad) {
    TrainConfig t;
    try {
      apply_yaml_text(t, text, "bad.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field, field) << text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.yaml"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(c.sample_packing);
  TrainConfig t;
  apply_yaml_text(t, "sample_packing: true", "p.yaml");
  EXPECT_TRUE(t.sample_packing);
  EXPECT_FALSE(TrainConfig{}.sample_packing);
}

TEST_F(Datasets, EmptyAfterFilteringNamesTheFile) {
  const std::string tokdir = kTokDir + "/llama3";
  TrainConfig c;
  c.seq = 8;
  c.drop_excess = true;
  const std::string f =
      write("long.jsonl", R"({"text": "a long line of text that is far more than eight tokens long"})");
  c.datasets = {{f, "completion", ""}};
  try {
    build_dataset_rows(dataset_options(c), tokdir, nullptr);
    ADD_FAILURE() << "an empty dataset was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file, f);
    EXPECT_NE(std::string(e.what()).find("empty after filtering"), std::string::npos) << e.what();
  }
  c.drop_excess = false;  // truncated, it trains
  EXPECT_EQ(build_dataset_rows(dataset_options(c), tokdir, nullptr).rows, 1);
}

// The loop on dataset rows: checkpoint at step 3, resume, and the same losses and state bit for
// bit as the run that never stopped.
TEST_F(Datasets, LoopResumesExactlyOnDatasetRows) {
  const std::string f = path("resume.jsonl");
  {
    std::ofstream o(f);
    for (int i = 0; i < 12; ++i)
      o << nlohmann::json{{"instruction", fmt::format("Count to {}.", i)}, {"output", fmt::format("{} {}", i, i + 1)}}
               .dump()
        << "\n";
  }
  TrainConfig cfg;
  cfg.seq = 128;
  cfg.batch = 2;
  cfg.steps = 6;
  cfg.steps_given = true;
  cfg.val_set_size = 2;
  cfg.datasets = {{f, "alpaca", ""}};
  io::LlamaConfig mc = test_util::tiny_config();
  mc.vocab_size = 3008;  // the llama3 test tokenizer's
  auto rig = [&](const TrainConfig& c) {
    DatasetRows dr = build_dataset_rows(dataset_options(c), kTokDir + "/llama3", nullptr);
    test_util::Rig r;
    r.be = make_cpu_backend(size_t(256) << 20);
    r.model = std::make_unique<LlamaModel>(*r.be, mc, model_options(c));
    r.model->init_random(11);
    r.trainer = std::make_unique<Trainer>(*r.be, *r.model, train_options(c));
    r.loop =
        std::make_unique<TrainLoop>(c, *r.be, *r.model, *r.trainer,
                                    TokenRows(std::move(dr.inputs), std::move(dr.targets), c.seq), test_util::quiet());
    return r;
  };
  test_util::Rig whole = rig(cfg);
  EXPECT_EQ(whole.loop->train_rows(), 10);
  const LoopResult want = whole.loop->run();
  ASSERT_EQ(want.losses.size(), 6u);

  TrainConfig first = cfg;
  first.output_dir = path("resume_out");
  first.save_steps = 3;
  first.steps = 3;
  test_util::Rig a = rig(first);
  a.loop->run();
  TrainConfig second = cfg;
  second.resume_from_checkpoint = first.output_dir + "/checkpoint-3";
  test_util::Rig b = rig(second);
  const LoopResult got = b.loop->run();
  ASSERT_EQ(got.first_step, 4);
  ASSERT_EQ(got.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(std::memcmp(&got.losses[i], &want.losses[i + 3], 4), 0) << "step " << i + 4;
  EXPECT_EQ(test_util::state_bytes(*b.model), test_util::state_bytes(*whole.model));
  ASSERT_EQ(got.eval_loss.size(), 1u);
  EXPECT_EQ(std::memcmp(&got.eval_loss[0].second, &want.eval_loss[0].second, 4), 0);

  // Resuming with other targets (the prompt trained too) is refused, naming the field.
  TrainConfig other = second;
  other.train_on_inputs = true;
  test_util::Rig c = rig(other);
  try {
    c.loop->run();
    ADD_FAILURE() << "resumed with train_on_inputs changed";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.field, "train_on_inputs") << e.what();
  }
}

// strata-train from a tokenizer and a jsonl file: the loss falls, the saved model has the
// tokenizer, and a resumed run ends with the same weights.
TEST_F(Datasets, StrataTrainEndToEnd) {
  using namespace strata::tool_test;
  for (const std::string& bin : {kMakeTiny, kTrain})
    ASSERT_TRUE(fs::exists(bin)) << bin << " is missing: build the tools next to the tests";
  const std::string model = path("e2e_model");
  Proc mk = s_.run(kMakeTiny + " " + quote(model) +
                   " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 3008 --tokens 100");
  ASSERT_EQ(mk.code, 0) << mk.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kTokDir + "/llama3/" + f, model + "/" + f, fs::copy_options::overwrite_existing);
  const std::string data = path("e2e.jsonl");
  {
    std::ofstream o(data);
    for (int i = 0; i < 8; ++i)
      o << nlohmann::json{{"messages",
                           {{{"role", "user"}, {"content", "What is the colour of the sky?"}},
                            {{"role", "assistant"}, {"content", "The sky is blue."}}}}}
               .dump()
        << "\n";
  }
  auto config = [&](const std::string& out, const std::string& extra) {
    const std::string y = path(fmt::format("e2e_{}.yaml", fs::path(out).filename().string()));
    std::ofstream(y) << fmt::format(
        "base_model: {}\ndatasets:\n  - path: {}\n    type: chat\noutput_dir: {}\nsequence_len: 40\n"
        "micro_batch_size: 2\nmax_steps: 12\nlearning_rate: 0.01\nbackend: cpu\nsave_steps: 6\n{}",
        model, data, out, extra);
    return y;
  };
  auto losses = [](const std::string& out) {
    std::map<int, double> m;
    for (const std::string& l : lines(out)) {
      const nlohmann::json j = nlohmann::json::parse(l);
      if (j.contains("loss")) m[j["step"].get<int>()] = j["loss"].get<double>();
    }
    return m;
  };
  const std::string out_a = path("e2e_a");
  Proc a = s_.run(kTrain + " --config " + quote(config(out_a, "")) + " --json");
  ASSERT_EQ(a.code, 0) << a.err;
  const auto la = losses(a.out);
  ASSERT_EQ(la.size(), 12u);
  EXPECT_LT(la.at(12), la.at(1) * 0.5) << a.out;
  EXPECT_NE(a.err.find("8 examples -> 8 rows"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("cache written"), std::string::npos) << a.err;
  EXPECT_TRUE(fs::is_regular_file(out_a + "/model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(out_a + "/tokenizer.json"));

  const std::string out_b = path("e2e_b");
  Proc b = s_.run(kTrain + " --config " +
                  quote(config(out_b, fmt::format("resume_from_checkpoint: {}/checkpoint-6\n", out_a))) + " --json");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.err.find("cache hit"), std::string::npos) << b.err;
  const auto lb = losses(b.out);
  ASSERT_EQ(lb.size(), 6u);
  for (const auto& [step, loss] : lb) EXPECT_EQ(loss, la.at(step)) << "step " << step;
  EXPECT_EQ(slurp(out_b + "/model.safetensors"), slurp(out_a + "/model.safetensors"));

  // --data and datasets together are refused.
  Proc both =
      s_.run(kTrain + " --config " + quote(config(path("e2e_c"), "")) + " --data " + quote(model + "/tokens.bin"));
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("both give the training data"), std::string::npos) << both.err;

  // --sample-packing: the 8 examples share rows, the dataset and loop lines count them, and the
  // loss still falls.
  const std::string out_p = path("e2e_p");
  Proc p = s_.run(kTrain + " --config " + quote(config(out_p, "")) + " --sample-packing --seq 128 --json");
  ASSERT_EQ(p.code, 0) << p.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(p.err, m, std::regex("sample packing: 8 examples in ([0-9]+) rows"))) << p.err;
  EXPECT_LT(std::stoi(m[1].str()), 8) << p.err;
  EXPECT_NE(p.err.find("(8 packed)"), std::string::npos) << p.err;
  const auto lp = losses(p.out);
  ASSERT_EQ(lp.size(), 12u);
  EXPECT_LT(lp.at(12), lp.at(1) * 0.7) << p.out;
  // A token file has no examples to pack.
  Proc tok = s_.run(kTrain + " --model " + quote(model) + " --data " + quote(model + "/tokens.bin") +
                    " --sample-packing --steps 1 --backend cpu");
  EXPECT_NE(tok.code, 0) << tok.err;
  EXPECT_NE(tok.err.find("no examples to pack"), std::string::npos) << tok.err;
}

// `tokenizer: DIR` for a model directory without one: the checkpoints and the saved model get its
// files; a tokenizer whose ids the model's vocabulary cannot hold is refused before training.
TEST_F(Datasets, StrataTrainTokenizerDirAndVocabCheck) {
  using namespace strata::tool_test;
  for (const std::string& bin : {kMakeTiny, kTrain})
    ASSERT_TRUE(fs::exists(bin)) << bin << " is missing: build the tools next to the tests";
  const std::string data = write("tokdir.jsonl", R"({"text": "The quick brown fox jumps over the lazy dog."}
{"text": "A second, shorter line."}
)");
  auto run = [&](const std::string& vocab, const std::string& name) {
    const std::string model = path(name);
    Proc mk = s_.run(kMakeTiny + " " + quote(model) + " --layers 1 --hidden 32 --heads 4 --kv-heads 2 --vocab " +
                     vocab + " --tokens 100");
    EXPECT_EQ(mk.code, 0) << mk.err;
    const std::string y = path(name + ".yaml");
    std::ofstream(y) << fmt::format(
        "base_model: {}\ntokenizer: {}\ndatasets:\n  - path: {}\noutput_dir: {}/out\nsequence_len: 32\n"
        "max_steps: 2\nsave_steps: 2\nbackend: cpu\n",
        model, kTokDir + "/llama3", data, model);
    return std::pair{model, s_.run(kTrain + " --config " + quote(y))};
  };
  const auto [model, ok] = run("3008", "tokdir_model");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_FALSE(fs::exists(model + "/tokenizer.json"));
  EXPECT_TRUE(fs::is_regular_file(model + "/out/tokenizer.json"));
  EXPECT_TRUE(fs::is_regular_file(model + "/out/tokenizer_config.json"));
  EXPECT_TRUE(fs::is_regular_file(model + "/out/checkpoint-2/tokenizer.json"));

  const auto [small, bad] = run("256", "tokdir_small");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("outside the model's vocab_size 256"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(small + "/out/model.safetensors"));
}

// A file of many lines is tokenised on several threads: the same examples in file order, and the
// first bad line in file order is the one named.
TEST_F(Datasets, ManyLinesInOrderAndFirstBadLineNamed) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += nlohmann::json{{"text", fmt::format("line number {} of many", i)}}.dump() + "\n";
  const std::string f = write("many.jsonl", text);
  const auto ex = tokenize_dataset({f, "completion", ""}, text, tok);
  ASSERT_EQ(ex.size(), 3000u);
  for (int i = 0; i < 3000; i += 97)
    EXPECT_EQ(ex[size_t(i)], expected(tok, {}, ids(tok, fmt::format("line number {} of many", i))));
  EXPECT_EQ(ex[2999], expected(tok, {}, ids(tok, "line number 2999 of many")));
  std::string bad;
  for (int i = 1; i <= 3000; ++i) bad += i == 1700 || i == 2900 ? "{\"txt\": 1}\n" : "{\"text\": \"x\"}\n";
  try {
    tokenize_dataset({f, "completion", ""}, bad, tok);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("line 1700: field 'text' is missing"), std::string::npos) << e.what();
  }
}

// Tokenising on 1, 2, 3 or 7 threads (and the automatic count load_dataset uses) gives the same examples, so the
// cache file is the same byte for byte: each thread writes the examples of its own contiguous range of lines.
TEST_F(Datasets, ThreadCountLeavesTheCacheUnchanged) {
  const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/llama3");
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    const std::string q = fmt::format("Question {}: {} ¿Qué es {}? Ωμέγα 数字 {} 🙂", i,
                                      std::string(size_t(i % 13), 'x'), i * 7, i % 5);
    text += nlohmann::json{{"messages",
                            {{{"role", "system"}, {"content", "Be brief."}},
                             {{"role", "user"}, {"content", q}},
                             {{"role", "assistant"}, {"content", fmt::format("Answer {}.", i * 3)}}}}}
                .dump() +
            "\n";
  }
  const std::string f = write("threads.jsonl", text);
  const DatasetSpec d{f, "chat", ""};
  const std::vector<Example> one = tokenize_dataset(d, text, tok, nullptr, 1);
  ASSERT_EQ(one.size(), 2000u);
  const std::string want = dataset_cache_bytes(one);
  for (int t : {2, 3, 7}) EXPECT_EQ(dataset_cache_bytes(tokenize_dataset(d, text, tok, nullptr, t)), want) << t;
  const DatasetLoad ld = load_dataset(d, tok, kTokDir + "/llama3", nullptr);
  ASSERT_FALSE(ld.cache_hit);
  std::ifstream in(ld.cache_file, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(written == want) << "the cache file differs from one thread's examples";
}

// A plain-text file is cut at line starts and its parts tokenised on several threads: on 2, 3, 7 or 16
// threads the one example holds exactly the ids of the whole text tokenised at once, for tokenizers that
// split words by regex (Llama 3, Qwen2.5, GPT-2, DeepSeek), by BPE alone (Llama 2, Mistral) and one strata
// does not cut (a lookahead regex: one thread, the same ids).
TEST_F(Datasets, TextFileOnEveryThreadGivesTheWholeTextsIds) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += fmt::format("Line {} says: na\xC3\xAFve caf\xC3\xA9 {}   \n{}\xE6\x95\xB0\xE5\xAD\x97 \xF0\x9F\x99\x82.\n",
                        i, std::string(size_t(i % 7), ' '), i % 3 ? "Then " : "\t");
  const std::string f = write("cut.txt", text);
  const DatasetSpec d{f, "completion", ""};
  for (const char* name : {"llama3", "qwen25", "gpt2", "llama2", "mistral", "deepseek", "lookahead_split"}) {
    SCOPED_TRACE(name);
    const text::Tokenizer tok = text::Tokenizer::load(kTokDir + "/" + name);
    EXPECT_EQ(tok.next_cut(text, text.size() / 2) != std::string_view::npos, std::string(name) != "lookahead_split");
    const std::vector<Example> one = tokenize_dataset(d, text, tok, nullptr, 1);
    ASSERT_EQ(one.size(), 1u);
    const std::vector<int32_t> whole = tok.encode(text, false);
    ASSERT_GE(one[0].ids.size(), whole.size());
    EXPECT_TRUE(std::search(one[0].ids.begin(), one[0].ids.end(), whole.begin(), whole.end()) ==
                one[0].ids.begin() + (one[0].ids.size() - whole.size() > 1));
    for (int t : {2, 3, 7, 16}) EXPECT_EQ(tokenize_dataset(d, text, tok, nullptr, t), one) << t << " threads";
  }
}
