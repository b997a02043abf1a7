// `type: chat_template` datasets: a Qwen3-style, a Mistral-style and a Llama-3-style tiny checkpoint
// render their own template, tokenise it as one text with Hugging Face's ids, mark the trained
// tokens as tests/chat_templates/make_pipeline_expected.py computes them with transformers, train
// on the cpu backend, and save the template with the model.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/data/chat_template.h"
#include "model/data/datasets.h"
#include "model/run/checkpoint.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "strata/error.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kData = std::string(STRATA_TEST_DATA);

class ChatDatasets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { s_.create("strata_chat_datasets"); }
  static void TearDownTestSuite() { s_.remove(); }
  static std::string path(const std::string& name) { return s_.path(name); }
  static tool_test::Scratch s_;
};
tool_test::Scratch ChatDatasets::s_;

ojson setups() {
  return ojson::parse(tool_test::slurp(kData + "/chat_templates/pipeline_expected.json"));
}

std::string template_text(const ojson& setup) {
  return tool_test::slurp(kData + "/chat_templates/templates/" + setup["template"].get<std::string>());
}

// DIR with the setup's test tokenizer and its template in tokenizer_config.json, as the script makes it.
void write_tokenizer(const ojson& setup, const std::string& dir) {
  fs::create_directories(dir);
  const std::string from = kData + "/tokenizer/" + setup["tokenizer"].get<std::string>();
  fs::copy_file(from + "/tokenizer.json", dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  ojson cfg = ojson::parse(tool_test::slurp(from + "/tokenizer_config.json"));
  cfg["chat_template"] = template_text(setup);
  std::ofstream(dir + "/tokenizer_config.json") << cfg.dump(2);
}

std::string write_rows(const ojson& setup, const std::string& file) {
  std::ofstream o(file);
  for (const auto& r : setup["rows"]) o << r.dump() << "\n";
  return file;
}

ChatTemplateOptions options(const ojson& setup) {
  ChatTemplateOptions o;
  const ojson& j = setup["options"];
  if (j.contains("field_messages")) o.field_messages = j["field_messages"];
  if (j.contains("role_key")) o.role_key = j["role_key"];
  if (j.contains("content_key")) o.content_key = j["content_key"];
  if (j.contains("train_on_eos")) o.train_on_eos = j["train_on_eos"];
  if (j.contains("roles"))
    for (auto it = j["roles"].begin(); it != j["roles"].end(); ++it)
      o.roles.emplace_back(it.key(), it.value().get<std::vector<std::string>>());
  return o;
}

TEST_F(ChatDatasets, IdsAndMasksAsHuggingFace) {
  const ojson all = setups();
  ASSERT_GE(all.size(), 6u);
  for (const auto& setup : all) {
    const std::string name = setup["name"];
    const std::string dir = path("tok_" + name);
    write_tokenizer(setup, dir);
    const text::Tokenizer tok = text::Tokenizer::load(dir);
    DatasetSpec d{write_rows(setup, path(name + ".jsonl")), "chat_template", "", options(setup)};
    const ChatFormat f = load_chat_format(d.chat, dir);
    EXPECT_EQ(f.source, template_text(setup)) << name;
    const std::vector<Example> ex = tokenize_dataset(d, tool_test::slurp(d.path), tok, &f);
    ASSERT_EQ(ex.size(), setup["expected"].size()) << name;
    for (size_t i = 0; i < ex.size(); ++i) {
      const ojson& want = setup["expected"][i];
      const ChatExample c = tokenize_chat_row(setup["rows"][i], d.chat, f, tok, d.path, long(i + 1));
      EXPECT_EQ(c.text, want["text"].get<std::string>()) << name << " row " << i;
      EXPECT_EQ(ex[i].ids, want["ids"].get<std::vector<int32_t>>()) << name << " row " << i;
      EXPECT_EQ(ex[i].trained, want["trained"].get<std::vector<uint8_t>>()) << name << " row " << i << "\n" << c.text;
    }
  }
}

TEST_F(ChatDatasets, TemplatesItCannotMaskAreErrors) {
  const ojson setup = setups()[0];  // Qwen3's template, which drops earlier turns' thinking
  const std::string dir = path("tok_errors");
  write_tokenizer(setup, dir);
  const text::Tokenizer tok = text::Tokenizer::load(dir);
  ChatTemplateOptions o;
  const ChatFormat f = load_chat_format(o, dir);
  const ojson row = ojson::parse(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "<think>\nx\n</think>\n\nA."}, {"role": "user", "content": "q2"},
      {"role": "assistant", "content": "B."}]})");
  try {
    tokenize_chat_row(row, o, f, tok, "d.jsonl", 7);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl: line 7: field 'messages[1].content'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("generation"), std::string::npos) << e.what();
  }
  // raise_exception in the template names the row.
  const ojson bad = ojson::parse(R"({"messages": [{"role": "assistant", "content": "a"}]})");
  ChatTemplateOptions mo;
  mo.chat_template = kData + "/chat_templates/templates/mistral_style.jinja";
  try {
    tokenize_chat_row(bad, mo, load_chat_format(mo, dir), tok, "d.jsonl", 3);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("d.jsonl: line 3: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("roles must alternate"), std::string::npos) << e.what();
  }
  ChatTemplateOptions unknown;
  unknown.chat_template = "vicuna";
  EXPECT_THROW(load_chat_format(unknown, dir), ConfigError);
  fs::create_directories(path("no_template"));
  fs::copy_file(dir + "/tokenizer.json", path("no_template/tokenizer.json"), fs::copy_options::overwrite_existing);
  EXPECT_THROW(load_chat_format(ChatTemplateOptions{}, path("no_template")), ConfigError);
  // chat_template.jinja beside tokenizer_config.json wins, as in transformers.
  std::ofstream(dir + "/chat_template.jinja") << "{{ messages[0].content }}";
  EXPECT_EQ(load_chat_format(o, dir).source, "{{ messages[0].content }}");
}

// axolotl's keys in YAML: read, written back by --write-config, and refused where wrong.
TEST_F(ChatDatasets, YamlKeys) {
  TrainConfig c;
  apply_yaml_text(c,
                  "datasets:\n  - path: sg.jsonl\n    type: chat_template\n    chat_template: my.jinja\n"
                  "    field_messages: conversations\n    message_property_mappings: {role: from, content: value}\n"
                  "    roles: {user: [human, user], assistant: [gpt]}\n    roles_to_train: [assistant, tool]\n"
                  "    train_on_eos: last\n",
                  "chat.yaml");
  ASSERT_EQ(c.datasets.size(), 1u);
  const ChatTemplateOptions& o = c.datasets[0].chat;
  EXPECT_EQ(c.datasets[0].type, "chat_template");
  EXPECT_EQ(o.chat_template, "my.jinja");
  EXPECT_EQ(o.field_messages, "conversations");
  EXPECT_EQ(o.role_key, "from");
  EXPECT_EQ(o.content_key, "value");
  ASSERT_EQ(o.roles.size(), 2u);
  EXPECT_EQ(o.roles[0].first, "user");
  EXPECT_EQ(o.roles[0].second, (std::vector<std::string>{"human", "user"}));
  EXPECT_EQ(o.roles_to_train, (std::vector<std::string>{"assistant", "tool"}));
  EXPECT_EQ(o.train_on_eos, "last");
  TrainConfig back;
  apply_yaml_text(back, write_config(c), "written.yaml");
  EXPECT_EQ(back.datasets[0].chat, o);
  EXPECT_TRUE(same_settings(back, c));
  TrainConfig plain;
  apply_yaml_text(plain, "datasets: [{path: a.jsonl, type: chat_template}]", "p.yaml");
  EXPECT_EQ(plain.datasets[0].chat, ChatTemplateOptions{});
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {"datasets: [{path: a.jsonl, type: chat, roles_to_train: [gpt]}]", "datasets[0].roles_to_train"},
           {"datasets: [{path: a.jsonl, type: chat_template, train_on_eos: sometimes}]", "datasets[0].train_on_eos"},
           {"datasets: [{path: a.jsonl, type: chat_template, roles: [user]}]", "datasets[0].roles"},
           {"datasets: [{path: a.jsonl, type: chat_template, message_property_mappings: {speaker: x}}]",
            "datasets[0].message_property_mappings.speaker"},
           {"datasets: [{path: a.jsonl, type: chat_template, field_messages: [a]}]", "datasets[0].field_messages"},
       }) {
    TrainConfig t;
    try {
      apply_yaml_text(t, text, "bad.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field, field) << text << ": " << e.what();
    }
  }
}

// strata-train on each family's tiny checkpoint: --preview-data marks the trained text, the loss
// falls, and the saved model carries the template (chat_template.jinja and tokenizer_config.json).
TEST_F(ChatDatasets, StrataTrainWithTheCheckpointsTemplate) {
  using namespace strata::tool_test;
  for (const std::string& bin : {kMakeTiny, kTrain})
    ASSERT_TRUE(fs::exists(bin)) << bin << " is missing: build the tools next to the tests";
  for (const auto& setup : setups()) {
    const std::string name = setup["name"];
    if (name != "qwen3_thinking" && name != "mistral" && name != "llama3") continue;
    const std::string model = path("model_" + name);
    Proc mk = s_.run(kMakeTiny + " " + quote(model) +
                     " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 3008 --tokens 100");
    ASSERT_EQ(mk.code, 0) << mk.err;
    write_tokenizer(setup, model);
    const std::string data = path(name + "_train.jsonl");
    {
      std::ofstream o(data);
      for (int rep = 0; rep < 4; ++rep)
        for (const auto& r : setup["rows"]) o << r.dump() << "\n";
    }
    const std::string out = path("out_" + name);
    const std::string yaml = path(name + ".yaml");
    std::ofstream(yaml) << fmt::format(
        "base_model: {}\ndatasets:\n  - path: {}\n    type: chat_template\n    chat_template: tokenizer_default\n"
        "    roles_to_train: [assistant]\n    train_on_eos: turn\noutput_dir: {}\nsequence_len: 128\n"
        "micro_batch_size: 2\nmax_steps: 12\nlearning_rate: 0.01\nbackend: cpu\n",
        model, data, out);
    Proc pv = s_.run(kTrain + " --config " + quote(yaml) + " --preview-data 1");
    ASSERT_EQ(pv.code, 0) << pv.err;
    const std::string first_text = setup["expected"][0]["text"];
    EXPECT_NE(pv.out.find("[["), std::string::npos) << pv.out;
    EXPECT_NE(pv.out.find(fmt::format("{} tokens", setup["expected"][0]["ids"].size())), std::string::npos) << pv.out;

    Proc tr = s_.run(kTrain + " --config " + quote(yaml) + " --json");
    ASSERT_EQ(tr.code, 0) << name << ": " << tr.err;
    std::map<int, double> loss;
    for (const std::string& l : lines(tr.out)) {
      const nlohmann::json j = nlohmann::json::parse(l);
      if (j.contains("loss")) loss[j["step"].get<int>()] = j["loss"].get<double>();
    }
    ASSERT_EQ(loss.size(), 12u) << tr.out;
    EXPECT_LT(loss.at(12), loss.at(1) * 0.7) << name << "\n" << tr.out;
    EXPECT_EQ(slurp(out + "/chat_template.jinja"), template_text(setup)) << name;
    const ojson saved = ojson::parse(slurp(out + "/tokenizer_config.json"));
    EXPECT_EQ(saved["chat_template"].get<std::string>(), template_text(setup)) << name;
  }
}

// A run on `type: chat` saves strata's chat format as the model's template (not the tokenizer's, which it did
// not train on): rendered by the interpreter, it gives the text, and with these byte-level tokenizers the ids,
// the run trained on (BOS and EOS as the tokenizer adds them).
TEST_F(ChatDatasets, ChatTypeSavesItsFormatAsTheTemplate) {
  const ojson rows = ojson::parse(R"([
    {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! How can I help?"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?  \n"},
                  {"role": "assistant", "content": "4"}, {"role": "user", "content": "caf\u00e9 \ud83d\ude42"},
                  {"role": "assistant", "content": "Ol\u00e1, n\u00e3o.\nTwo lines."}]}
  ])");
  for (const char* name : {"llama3", "qwen25", "gpt2"}) {
    SCOPED_TRACE(name);
    const std::string dir = kData + "/tokenizer/" + name;
    const text::Tokenizer tok = text::Tokenizer::load(dir);
    TrainConfig c;
    c.datasets = {DatasetSpec{path("chat.jsonl"), "chat", ""}};
    const std::string src = trained_chat_template(c, dir);
    ASSERT_FALSE(src.empty());
    const std::string file = path(std::string(name) + "_format.jinja");
    std::ofstream(file) << src;
    ChatTemplateOptions o;
    o.chat_template = file;
    const ChatFormat f = load_chat_format(o, dir);
    for (const auto& row : rows) {
      const ChatExample rendered = tokenize_chat_row(row, o, f, tok, file, 1);
      const std::vector<Example> trained = tokenize_dataset({path("chat.jsonl"), "chat", ""}, row.dump(), tok);
      ASSERT_EQ(trained.size(), 1u);
      EXPECT_EQ(tok.decode(rendered.ids), tok.decode(trained[0].ids));
      EXPECT_EQ(rendered.ids, trained[0].ids) << rendered.text;
    }
  }
}

}  // namespace
