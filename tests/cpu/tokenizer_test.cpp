// The C++ tokenizer against Hugging Face tokenizers: the ids of every corpus line, with and
// without special tokens, and the decoded text, for the test tokenizers that
// tests/tokenizer/make_tokenizers.py trains (Llama 3 byte-level, Llama 2 and Mistral
// SentencePiece-style, Qwen2.5 with NFC); the Unicode normalizers against tokenizers' on tricky
// strings; then the files it must refuse, with the file and field named.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "expect_error.h"
#include "strata/error.h"
#include "text/normalize.h"
#include "text/pretokenize.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

using json = nlohmann::json;
const std::string kDir = std::string(STRATA_TEST_DATA) + "/tokenizer";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> rows;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) rows.push_back(json::parse(line));
  return rows;
}

std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  for (const json& r : read_jsonl(kDir + "/corpus.jsonl")) texts.push_back(r["text"]);
  return texts;
}

std::string shown(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

std::string shown(const std::vector<std::pair<uint32_t, uint32_t>>& v) {
  std::string s;
  for (auto [b, e] : v) {
    s += '(';
    s += std::to_string(b);
    s += ',';
    s += std::to_string(e);
    s += ") ";
  }
  return s;
}

// Every corpus line gives tokenizers' ids and decoded text; most lines decode back to themselves
// where the tokenizer adds no prefix space.
void expect_matches_reference(const Tokenizer& tok, const std::string& name, bool mostly_round_trips = true) {
  std::vector<std::string> texts = corpus();
  std::vector<json> expected = read_jsonl(kDir + "/expected_" + name + ".jsonl");
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 80u);
  int round_trips = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = expected[i]["ids"].get<std::vector<int32_t>>();
    auto plain = expected[i]["ids_plain"].get<std::vector<int32_t>>();
    std::string decoded = expected[i]["decoded"], decoded_all = expected[i]["decoded_all"];
    EXPECT_EQ(shown(tok.encode(texts[i])), shown(ids)) << name << " line " << i + 1 << ": " << texts[i];
    // encode_with_offsets: the same ids, and tokenizers' offsets (in bytes).
    Encoding enc = tok.encode_with_offsets(texts[i]);
    EXPECT_EQ(shown(enc.ids), shown(ids)) << name << " line " << i + 1;
    std::vector<std::pair<uint32_t, uint32_t>> offsets;
    for (const json& o : expected[i]["offsets"]) offsets.push_back({o[0].get<uint32_t>(), o[1].get<uint32_t>()});
    EXPECT_EQ(shown(enc.offsets), shown(offsets)) << name << " offsets, line " << i + 1 << ": " << texts[i];
    EXPECT_EQ(shown(tok.encode(texts[i], false)), shown(plain)) << name << " line " << i + 1;
    EXPECT_EQ(tok.decode(plain, true), decoded) << name << " line " << i + 1;
    EXPECT_EQ(tok.decode(plain, false), decoded_all) << name << " line " << i + 1;
    if (decoded_all == texts[i]) {
      ++round_trips;
      EXPECT_EQ(tok.decode(tok.encode(texts[i], false)), texts[i]);
    }
  }
  // Many lines round-trip (not those with unknown characters, a leading space for Llama 2, or
  // text the NFC normalizer changes).
  if (mostly_round_trips) {
    EXPECT_GT(round_trips, int(texts.size()) * 2 / 5) << name;
  }
}

TEST(Tokenizer, Llama3MatchesHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/llama3");
  EXPECT_TRUE(tok.byte_level());
  EXPECT_EQ(tok.vocab_size(), 3008);
  EXPECT_EQ(tok.bos_id(), *tok.token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(tok.eos_id(), *tok.token_to_id("<|eot_id|>"));
  expect_matches_reference(tok, "llama3");
}

TEST(Tokenizer, Llama2MatchesHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/llama2");
  EXPECT_FALSE(tok.byte_level());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.id_to_token(3), "<0x00>");
  expect_matches_reference(tok, "llama2");
}

TEST(Tokenizer, MistralMetaspaceMatchesHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/mistral"), "mistral");
}

// Metaspace that splits at each ▁ (prepend always) with the Metaspace decoder.
TEST(Tokenizer, MetaspaceSplitMatchesHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/metaspace_split"), "metaspace_split");
}

// ByteLevel's add_prefix_space: a space before each piece of the split that lacks one.
TEST(Tokenizer, ByteLevelPrefixSpaceMatchesHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/llama3_prefix"), "llama3_prefix", false);
}

// No byte fallback: unknown characters become one fused <unk>; add_eos_token from the config.
TEST(Tokenizer, UnknownCharactersMatchHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/spm_unk");
  EXPECT_EQ(tok.encode("x").back(), 2);
  expect_matches_reference(tok, "spm_unk");
}

// Qwen2's regex: numbers split into single digits.
TEST(Tokenizer, Qwen2RegexMatchesHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/qwen2"), "qwen2");
}

// Qwen2.5 / Qwen3's layout: the NFC normalizer before Qwen's split regex and ByteLevel; no BOS.
TEST(Tokenizer, Qwen25NfcMatchesHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/qwen25");
  EXPECT_TRUE(tok.byte_level());
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), *tok.token_to_id("<|im_end|>"));
  expect_matches_reference(tok, "qwen25");
  // Decomposed and precomposed text are the same ids.
  EXPECT_EQ(tok.encode("Cafe\u0301 \u1112\u1161\u11ab"), tok.encode("Caf\u00e9 \ud55c"));
}

// GPT-2's layout (SmolLM, Phi, OLMo): ByteLevel with its own regex and trim_offsets; added tokens
// with lstrip, rstrip, single_word and normalized.
TEST(Tokenizer, Gpt2MatchesHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/gpt2");
  EXPECT_TRUE(tok.byte_level());
  expect_matches_reference(tok, "gpt2");
}

// Mistral-Nemo's tekken: a case-aware Split regex on Oniguruma, ByteLevel, ignore_merges, <s>.
TEST(Tokenizer, TekkenMatchesHuggingFace) {
  Tokenizer tok = Tokenizer::load(kDir + "/tekken");
  EXPECT_EQ(tok.bos_id(), *tok.token_to_id("<s>"));
  expect_matches_reference(tok, "tekken");
}

// DeepSeek's Sequence of five Splits (character classes with astral ranges, \s+$), Digits, ByteLevel.
TEST(Tokenizer, DeepSeekSplitsMatchHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/deepseek"), "deepseek");
}

// NFKC, Strip, Replace (a regex and a string), Lowercase before ByteLevel with add_prefix_space; the
// offsets map back through each of them.
TEST(Tokenizer, NormalizersMatchHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/normalizers_mix"), "normalizers_mix", false);
}

// Punctuation, Digits, a literal pattern and every Split behaviour, with and without invert.
TEST(Tokenizer, SplitBehaviorsMatchHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/splits_mix"), "splits_mix", false);
}

TEST(Tokenizer, WhitespacePreTokenizersMatchHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/whitespace_mix"), "whitespace_mix", false);
}

TEST(Tokenizer, ByteLevelNormalizerMatchesHuggingFace) {
  expect_matches_reference(Tokenizer::load(kDir + "/byte_level_normalizer"), "byte_level_normalizer", false);
}

// Random strings over tricky pieces and any code point (all planes, unassigned ones too).
std::vector<std::string> adversarial_strings(size_t count, uint64_t seed) {
  const std::vector<std::string> pieces = {"a",
                                           "Z",
                                           "'",
                                           "s",
                                           "S",
                                           "t",
                                           "re",
                                           "VE",
                                           "m",
                                           "ll",
                                           "D",
                                           "\u017f",
                                           "\u212a",
                                           " ",
                                           "  ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "\r",
                                           "\u00a0",
                                           "\u3000",
                                           "\u2028",
                                           "\u0085",
                                           "\x1c",
                                           "\u200b",
                                           "\u180e",
                                           "1",
                                           "22",
                                           "4567",
                                           "\u0663",
                                           "\u00b2",
                                           "\u216b",
                                           "\u00e9",
                                           "e\u0301",
                                           "\u0301",
                                           "\u0e31",
                                           "\u4e2d",
                                           "\ud55c",
                                           "\U0001F44D",
                                           "\U0001F468\u200D\U0001F469",
                                           "\U0001F1EB\U0001F1F7",
                                           "\U00020000",
                                           "\U00031350",
                                           "\ue000",
                                           "!",
                                           "?!",
                                           "...",
                                           "_",
                                           "-",
                                           "/",
                                           "<",
                                           "\u2581",
                                           "\x00",
                                           "\x7f",
                                           "\U0010fffd",
                                           "\u0378",
                                           "\u1c89",
                                           "\U0001e943"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string s;
    size_t n = rng() % 40;
    for (size_t k = 0; k < n; ++k) {
      if (rng() % 5 != 0) {
        s += pieces[rng() % pieces.size()];
        continue;
      }
      uint32_t cp;
      do {
        cp = rng() % 3 == 0 ? uint32_t(rng() % 0x110000) : uint32_t(rng() % 0x3400);
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      utf8_append(s, cp);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The hand-written Llama 3 and Qwen2 regexes give Oniguruma's pieces, on the corpus and on 20000
// adversarial strings.
TEST(Tokenizer, FastRegexesEqualOniguruma) {
  std::vector<std::string> texts = corpus();
  for (std::string& t : adversarial_strings(20000, 7)) texts.push_back(std::move(t));
  for (SplitRegex r : {SplitRegex::kLlama3, SplitRegex::kQwen2}) {
    std::string error;
    std::unique_ptr<Regex> re = Regex::compile(split_regex_pattern(r), &error);
    ASSERT_TRUE(re) << error;
    size_t pieces = 0;
    for (const std::string& t : texts) {
      std::vector<Span> fast, onig;
      split_regex(t, r, fast);
      re->find_all(t, onig);
      pieces += fast.size();
      ASSERT_EQ(fast.size(), onig.size()) << t;
      for (size_t k = 0; k < fast.size(); ++k) {
        ASSERT_EQ(fast[k].begin, onig[k].begin) << t;
        ASSERT_EQ(fast[k].end, onig[k].end) << t;
      }
    }
    EXPECT_GT(pieces, texts.size() * 5);
  }
  // And whole tokenizers with the fast path off give the same encodings.
  for (const char* name : {"llama3", "qwen25"}) {
    Tokenizer fast = Tokenizer::load(kDir + "/" + name), onig = Tokenizer::load(kDir + "/" + name, false);
    for (size_t i = 0; i < 2000; ++i) {
      Encoding a = fast.encode_with_offsets(texts[i]), b = onig.encode_with_offsets(texts[i]);
      ASSERT_EQ(a.ids, b.ids) << name << ": " << texts[i];
      ASSERT_EQ(a.offsets, b.offsets) << name << ": " << texts[i];
    }
  }
}

// encode_with_offsets on text the normalizers change: each token's offsets cover original text.
TEST(Tokenizer, OffsetsIndexTheOriginalText) {
  Tokenizer tok = Tokenizer::load(kDir + "/llama2");
  std::string text = "Hello  world";
  Encoding e = tok.encode_with_offsets(text);
  ASSERT_EQ(e.ids, tok.encode(text));
  ASSERT_EQ(e.offsets.size(), e.ids.size());
  EXPECT_EQ(e.offsets[0], std::make_pair(0u, 0u));  // <s>, from the template
  for (size_t i = 1; i < e.offsets.size(); ++i) EXPECT_LE(e.offsets[i].second, text.size());
  EXPECT_EQ(tok.encode_with_offsets(text, false).offsets.front().first, 0u);
}

// A Unicode normalizer inside a Sequence, before Prepend and Replace: the same ids as the plain
// Llama 2 tokenizer given the NFKC text.
TEST(Tokenizer, NormalizerSequenceWithNfkc) {
  json j = json::parse(read_file(kDir + "/llama2/tokenizer.json"));
  json steps = json::array({{{"type", "NFKC"}}});
  for (const json& n : j["normalizer"]["normalizers"]) steps.push_back(n);
  j["normalizer"]["normalizers"] = steps;
  std::string config = read_file(kDir + "/llama2/tokenizer_config.json");
  Tokenizer nfkc = Tokenizer::parse(j.dump(), "nfkc/tokenizer.json", &config, "nfkc/tokenizer_config.json");
  Tokenizer plain = Tokenizer::load(kDir + "/llama2");
  int changed = 0;
  for (const std::string& t : corpus()) {
    std::string n = normalized(t, NormForm::kNFKC);
    changed += n != t;
    EXPECT_EQ(shown(nfkc.encode(t)), shown(plain.encode(n))) << t;
  }
  EXPECT_GT(changed, 10);
}

// The normalizers alone against tokenizers' NFC/NFD/NFKC/NFKD().normalize_str over the tricky
// strings of tests/tokenizer/normalization.jsonl (every code point of the tables, marks to reorder,
// jamo, composites, random runs).
TEST(Normalizer, MatchesHuggingFaceOnTrickyStrings) {
  std::vector<json> cases = read_jsonl(kDir + "/normalization.jsonl");
  ASSERT_GT(cases.size(), 500u);
  const std::pair<const char*, NormForm> forms[] = {
      {"NFC", NormForm::kNFC}, {"NFD", NormForm::kNFD}, {"NFKC", NormForm::kNFKC}, {"NFKD", NormForm::kNFKD}};
  int unchanged = 0;
  for (const json& c : cases) {
    std::string text = c["text"];
    for (const auto& [name, form] : forms) {
      std::string want = c[name];
      std::string out = "untouched";
      bool changed = normalize_unicode(text, form, out);
      EXPECT_EQ(changed ? out : text, want) << name << ": " << text;
      if (!changed) {
        EXPECT_EQ(out, "untouched");
        ++unchanged;
      }
    }
  }
  EXPECT_GT(unchanged, 0);
  // ASCII and text already in the form is left alone (no copy).
  std::string out;
  for (const auto& [name, form] : forms) {
    EXPECT_FALSE(normalize_unicode("plain ASCII text\n", form, out)) << name;
    EXPECT_FALSE(normalize_unicode("", form, out)) << name;
  }
  EXPECT_FALSE(normalize_unicode("Caf\u00e9 \ud55c\uad6d\uc5b4 \u4e2d\u6587", NormForm::kNFC, out));
  EXPECT_TRUE(normalize_unicode("Caf\u00e9", NormForm::kNFD, out));
  EXPECT_EQ(out, "Cafe\u0301");
}

// Older tokenizer.json files write merges as "a b" strings.
TEST(Tokenizer, LegacyMergeStrings) {
  for (const char* name : {"llama3", "llama2"}) {
    json j = json::parse(read_file(kDir + "/" + name + "/tokenizer.json"));
    json merges = json::array({"#version: 0.2"});
    for (const json& m : j["model"]["merges"])
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    j["model"]["merges"] = merges;
    std::string config = read_file(kDir + "/" + name + "/tokenizer_config.json");
    Tokenizer tok = Tokenizer::parse(j.dump(), "legacy/tokenizer.json", &config, "legacy/tokenizer_config.json");
    expect_matches_reference(tok, name);
  }
}

TEST(Tokenizer, ConfigDecidesBosAndEos) {
  std::string text = read_file(kDir + "/llama2/tokenizer.json");
  std::string both = R"({"add_bos_token": true, "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"})";
  Tokenizer t1 = Tokenizer::parse(text, "tokenizer.json", &both, "tokenizer_config.json");
  std::vector<int32_t> ids = t1.encode("Hello world");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  std::string none = R"({"add_bos_token": false, "bos_token": "<s>"})";
  Tokenizer t2 = Tokenizer::parse(text, "tokenizer.json", &none, "tokenizer_config.json");
  EXPECT_EQ(t2.encode("Hello world"), t2.encode("Hello world", false));
  // No tokenizer_config.json: the post_processor's template alone, no bos/eos ids.
  Tokenizer t3 = Tokenizer::parse(text, "tokenizer.json", nullptr, "");
  EXPECT_EQ(t3.encode("Hello world").front(), 1);
  EXPECT_EQ(t3.bos_id(), -1);
}

// Added tokens that overlap: the leftmost match, the longest there (what tokenizers gives, by hand).
TEST(Tokenizer, OverlappingAddedTokensLeftmostLongest) {
  json j = json::parse(read_file(kDir + "/llama3/tokenizer.json"));
  int id = 3008;
  for (const char* t : {"qab", "qabcd", "bcd", "abc"})
    j["added_tokens"].push_back({{"id", id++}, {"content", t}, {"special", false}, {"normalized", false}});
  Tokenizer tok = Tokenizer::parse(j.dump(), "tokenizer.json", nullptr, "");
  auto pieces = [&](const std::string& text) {
    std::string out;
    for (int32_t i : tok.encode(text, false)) out += std::string(tok.id_to_token(i)) + "|";
    return out;
  };
  EXPECT_EQ(pieces("xqabcde"), "x|qabcd|e|");
  EXPECT_EQ(pieces("xqabce"), "x|qab|ce|");
  EXPECT_EQ(pieces("xabcde"), "x|abc|de|");
  EXPECT_EQ(pieces("qabcdqab"), "qabcd|qab|");
  EXPECT_EQ(pieces("qqabcd"), "q|qabcd|");
}

TEST(Tokenizer, InvalidUtf8IsRepairedLikeFromUtf8Lossy) {
  Tokenizer tok = Tokenizer::load(kDir + "/llama3");
  EXPECT_EQ(tok.encode("a\xff"
                       "b"),
            tok.encode("a\xEF\xBF\xBD"
                       "b"));
  EXPECT_EQ(tok.encode("\xE2\x82"), tok.encode("\xEF\xBF\xBD"));  // a truncated sequence is one U+FFFD
  Tokenizer spm = Tokenizer::load(kDir + "/llama2");
  EXPECT_EQ(spm.encode("x\xC0\x80y"), spm.encode("x\xEF\xBF\xBD\xEF\xBF\xBDy"));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{-1, 1 << 30}), "");  // ids without a token are skipped
}

// ---- files strata must refuse: ConfigError naming the file, the field and the value ----

json llama3_json() {
  return json::parse(read_file(kDir + "/llama3/tokenizer.json"));
}

void expect_refused(const json& j, const std::string& field, const std::string& value) {
  auto e = test_util::catch_as<ConfigError>(
      [&] { Tokenizer::parse(j.dump(), "ckpt/tokenizer.json", nullptr, "ckpt/tokenizer_config.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, field) << e->what();
  EXPECT_EQ(e->file, "ckpt/tokenizer.json");
  EXPECT_NE(std::string(e->what()).find("ckpt/tokenizer.json"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find(field), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find(value), std::string::npos) << e->what();
}

TEST(TokenizerRefuses, OtherModelsAndSteps) {
  json j = llama3_json();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, "model.type", "\"WordPiece\"");
  j["model"]["type"] = "Unigram";
  expect_refused(j, "model.type", "\"Unigram\"");
  j = llama3_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_refused(j, "normalizer.type", "\"BertNormalizer\"");
  j = llama3_json();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "StripAccents"}}}}};
  expect_refused(j, "normalizer.normalizers[1].type", "\"StripAccents\"");
  j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\w+";
  expect_refused(j, "pre_tokenizer.pretokenizers[0].pattern", "Oniguruma cannot compile it");
  j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", ""}};
  expect_refused(j, "pre_tokenizer.pretokenizers[0].pattern", "an empty pattern");
  j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_refused(j, "pre_tokenizer.pretokenizers[0].behavior", "\"Sideways\"");
  j = llama3_json();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_refused(j, "pre_tokenizer.type", "\"BertPreTokenizer\"");
  j = llama3_json();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect_refused(j, "pre_tokenizer.type", "\"UnicodeScripts\"");
  j = llama3_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j, "decoder.type", "\"WordPiece\"");
  j = llama3_json();
  j["post_processor"]["processors"][1] = {{"type", "BertProcessing"}};
  expect_refused(j, "post_processor.processors[1].type", "\"BertProcessing\"");
  j = llama3_json();
  j["model"]["dropout"] = 0.1;
  expect_refused(j, "model.dropout", "0.1");
}

TEST(TokenizerRefuses, HostileFiles) {
  json j = llama3_json();
  j["model"]["merges"][5] = json::array({"Ġ", "no-such-token"});
  expect_refused(j, "model.merges[5]", "no-such-token");
  j = llama3_json();
  j["model"]["merges"][7] = "a b c";
  expect_refused(j, "model.merges[7]", "\"a b c\"");
  j = llama3_json();
  j["model"]["vocab"]["huge"] = 4000000000LL;
  expect_refused(j, "model.vocab[\"huge\"]", "4000000000");
  j = llama3_json();
  j["model"]["vocab"]["neg"] = -1;
  expect_refused(j, "model.vocab[\"neg\"]", "-1");
  j = llama3_json();
  j["added_tokens"][0]["id"] = "seven";
  expect_refused(j, "added_tokens[0].id", "\"seven\"");
  j = llama3_json();
  j["model"]["unk_token"] = "<not-there>";
  expect_refused(j, "model.unk_token", "<not-there>");
  j = llama3_json();
  j.erase("model");
  expect_refused(j, "model", "missing");
  j = llama3_json();
  j["model"]["vocab"] = json::array();
  expect_refused(j, "model.vocab", "[]: expected an object");
  j = llama3_json();
  json nested = {{"type", "Fuse"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"decoders", json::array({nested})}};
  j["decoder"] = nested;
  std::string deep = "decoder";
  for (int i = 0; i < 9; ++i) deep += ".decoders[0]";
  expect_refused(j, deep, "nested more than 8 deep");

  std::string text = read_file(kDir + "/llama3/tokenizer.json");
  auto e = test_util::catch_as<ConfigError>(
      [&] { Tokenizer::parse(text.substr(0, text.size() / 2), "cut/tokenizer.json", nullptr, ""); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "json");
  EXPECT_NE(std::string(e->what()).find("cut/tokenizer.json: invalid JSON"), std::string::npos) << e->what();

  std::string config = R"({"bos_token": "<|nope|>"})";
  auto c = test_util::catch_as<ConfigError>(
      [&] { Tokenizer::parse(text, "t/tokenizer.json", &config, "t/tokenizer_config.json"); });
  ASSERT_TRUE(c);
  EXPECT_EQ(c->file, "t/tokenizer_config.json");
  EXPECT_EQ(c->field, "bos_token");
  EXPECT_NE(std::string(c->what()).find("<|nope|>"), std::string::npos) << c->what();

  auto io = test_util::catch_as<IoError>([&] { Tokenizer::load(kDir + "/no-such-dir"); });
  ASSERT_TRUE(io);
  EXPECT_NE(io->file.find("tokenizer.json"), std::string::npos);
}

// Threads share one Tokenizer (the caches are per thread) and get the ids one thread gets.
TEST(Tokenizer, ThreadsShareOneTokenizer) {
  Tokenizer tok = Tokenizer::load(kDir + "/llama3");
  std::vector<std::string> texts = corpus();
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts) want.push_back(tok.encode(t));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) wrong[size_t(k)] += tok.encode(texts[i]) != want[i];
    });
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(wrong[size_t(k)], 0) << "thread " << k;
}

}  // namespace
}  // namespace strata::text
