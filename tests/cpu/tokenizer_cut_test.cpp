// Cutting a text to encode its parts apart (text/cut.cpp, for .txt datasets on several threads):
// for every tokenizer under tests/tokenizer, every cut next_cut() finds, from every byte offset of
// texts full of line starts, multi-byte characters, whitespace runs and added tokens, gives exactly
// the ids of the whole text; tokenizers whose pipeline cannot be cut so say why.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace strata::text {
namespace {

const std::string kDir = std::string(STRATA_TEST_DATA) + "/tokenizer";

// The corpus' texts, one a line, then fragments that put a line start next to what could cross it.
std::string corpus_text() {
  std::ifstream f(kDir + "/corpus.jsonl");
  std::string line, out;
  while (std::getline(f, line)) out += nlohmann::json::parse(line)["text"].get<std::string>() + "\n";
  return out;
}

const std::vector<std::string> kFragments = {"end.\nNext",
                                             "x\nA",
                                             "  \nB",
                                             "\xC3\xA9\nC",
                                             "a\t\nD",
                                             "r\r\nE",
                                             "code();\nreturn x;",
                                             "1234\nabc",
                                             "'s\nThe",
                                             "emoji \xF0\x9F\x98\x80\nF",
                                             "A\xCC\x81\nG",
                                             "a   \n\n\nH",
                                             "x\n  I",
                                             "na\xC3\xAFve\n\xC3\x89"
                                             "cole",
                                             "foo\nBar",
                                             "Bar\nfoo",
                                             "x\nWorld",
                                             "[SEP]\nHello",
                                             "<mask>\nHi",
                                             "q\n<mask>",
                                             "<|eot_id|>\nHello",
                                             "x<|im_end|>\nYes",
                                             "hello world\nz",
                                             "Z\nhello world",
                                             "\xE4\xB8\xAD\xE6\x96\x87\nK",
                                             "k\n\xE4\xB8\xAD",
                                             "v\nV\nv\nV",
                                             "0\n9",
                                             ")\nif",
                                             "--\nok",
                                             "\xE2\x96\x81\nM",
                                             "Word\nWORD",
                                             "  spaces   \nTrail",
                                             "\xC4\x8A\nL",
                                             "i\nI'm",
                                             "x\n'll"};

std::string edge_text(uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  for (int i = 0; i < 300; ++i) {
    s += kFragments[rng() % kFragments.size()];
    s += (rng() % 3 == 0) ? "\n" : (rng() % 2 ? " " : "");
  }
  return s;
}

std::vector<int32_t> parts_ids(const Tokenizer& tok, std::string_view text, const std::vector<size_t>& cuts) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  for (size_t k = 0; k <= cuts.size(); ++k) {
    const size_t end = k < cuts.size() ? cuts[k] : text.size();
    tok.encode_append(text.substr(begin, end - begin), false, ids, k > 0);
    begin = end;
  }
  return ids;
}

// The tokenizers whose pipeline strata does not cut, and a word of the reason each gives.
const std::map<std::string, std::string> kRefused = {
    {"lookahead_split", "regex"},
    {"splits_mix", "regex"},
    {"normalizers_mix", "Strip"},
    {"byte_level_normalizer", "added token"},  // a normalized lstrip token under a normalizer
};

void check_cuts(const std::string& name, const Tokenizer& tok) {
  SCOPED_TRACE(name);
  if (auto it = kRefused.find(name); it != kRefused.end()) {
    EXPECT_NE(tok.cut_refusal().find(it->second), std::string::npos) << tok.cut_refusal();
    EXPECT_EQ(tok.next_cut("end.\nNext", 0), std::string_view::npos);
    return;
  }
  ASSERT_EQ(tok.cut_refusal(), "");
  for (const std::string& text : {corpus_text(), edge_text(1), edge_text(2)}) {
    const std::vector<int32_t> whole = tok.encode(text, false);
    std::set<size_t> cuts;
    for (size_t from = 0; from < text.size(); ++from) {
      const size_t p = tok.next_cut(text, from);
      if (p == std::string_view::npos) break;
      ASSERT_GE(p, from);
      ASSERT_EQ(text[p - 1], '\n');
      cuts.insert(p);
    }
    ASSERT_GT(cuts.size(), 20u);  // the texts have line starts to cut at
    for (size_t p : cuts)
      ASSERT_EQ(parts_ids(tok, text, {p}), whole)
          << "cut at byte " << p << ": ..." << text.substr(p > 20 ? p - 20 : 0, 40);
    // Every cut at once: many parts, each a continuation of the one before.
    EXPECT_EQ(parts_ids(tok, text, std::vector<size_t>(cuts.begin(), cuts.end())), whole);
  }
}

TEST(TokenizerCut, EveryCutGivesTheWholeTextsIds) {
  for (const char* name : {"gpt2", "llama3", "llama3_prefix", "qwen2", "qwen25", "tekken", "deepseek_v3",
                           "byte_level_normalizer", "whitespace_mix", "deepseek", "lookahead_split", "splits_mix",
                           "normalizers_mix", "gemma", "llama2", "mistral", "metaspace_split", "spm_unk"})
    check_cuts(name, Tokenizer::load(kDir + "/" + name));
}

// The Oniguruma path of Llama 3's and Qwen2's regexes cuts as the hand-written one does.
TEST(TokenizerCut, RegexWithoutFastPathCutsTheSame) {
  for (const char* name : {"llama3", "qwen2"}) check_cuts(name, Tokenizer::load(kDir + "/" + name, false));
}

// The conditions matter: cut where next_cut would not (after a space run, inside a word, before a
// multi-byte character) and some cut changes the ids of a byte-level tokenizer.
TEST(TokenizerCut, CutsItRefusesWouldChangeTheIds) {
  const Tokenizer tok = Tokenizer::load(kDir + "/gpt2");
  const std::string text = "alpha   \nBeta gamma\n\xC3\xA9tude delta";
  const std::vector<int32_t> whole = tok.encode(text, false);
  int differ = 0;
  for (size_t p = 1; p < text.size(); ++p) differ += parts_ids(tok, text, {p}) != whole;
  EXPECT_GT(differ, 0);
  EXPECT_EQ(tok.next_cut(text, 0), std::string_view::npos);  // no line start it accepts there
}

}  // namespace
}  // namespace strata::text
