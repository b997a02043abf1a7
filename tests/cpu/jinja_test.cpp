// The Jinja interpreter against transformers' apply_chat_template: every case of
// tests/chat_templates/expected.json (made by tests/chat_templates/make_expected.py) renders byte
// for byte, with the same {% generation %} spans, or raises the same message.
#include "text/jinja.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "strata/error.h"

namespace {

using strata::text::jinja::Template;
using ojson = nlohmann::ordered_json;

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The time strftime_now formats: make_expected.py renders with 2026-11-28 12:00 (its NOW), so the texts do not
// depend on the day either side runs (local time: 12:00 UTC is the same date in zones from UTC-11 to UTC+11).
constexpr std::time_t kNow = 1795867200;  // 2026-11-28T12:00:00Z

std::string dir() {
  return std::string(STRATA_TEST_DATA) + "/chat_templates/";
}

TEST(Jinja, RendersAsTransformers) {
  ojson cases = ojson::parse(read(dir() + "expected.json"));
  ASSERT_GT(cases.size(), 300u);
  std::map<std::string, Template> templates;
  int rendered = 0, raised = 0;
  for (const auto& c : cases) {
    std::string file = c["template"].get<std::string>();
    if (!templates.count(file)) templates.emplace(file, Template::parse(read(dir() + "templates/" + file), file));
    const Template& t = templates.at(file);
    std::string what = file + " / " + c["conversation"].get<std::string>() +
                       (c["context"]["add_generation_prompt"].get<bool>() ? " / generation prompt" : "");
    if (c.contains("error")) {
      try {
        t.render(c["context"], kNow);
        ADD_FAILURE() << what << ": expected the error " << c["error"];
      } catch (const strata::ConfigError& e) {
        // raise_exception's message is the template's own; Python's TypeError wording is not ours to copy.
        if (c["error_type"] == "TemplateError") {
          EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos)
              << what << ": " << e.what();
        }
        EXPECT_NE(std::string(e.what()).find(file + ", line "), std::string::npos) << e.what();
        ++raised;
      }
      continue;
    }
    strata::text::jinja::Rendered r;
    try {
      r = t.render(c["context"], kNow);
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
      continue;
    }
    const std::string want = c["text"].get<std::string>();
    if (r.text != want) {
      size_t k = 0;
      while (k < want.size() && k < r.text.size() && want[k] == r.text[k]) ++k;
      ADD_FAILURE() << what << ": differs at byte " << k
                    << "\n  want: " << ojson(want.substr(k > 40 ? k - 40 : 0, 120)).dump()
                    << "\n  got:  " << ojson(r.text.substr(k > 40 ? k - 40 : 0, 120)).dump();
      continue;
    }
    std::vector<std::pair<size_t, size_t>> spans;
    for (const auto& s : c["generation"]) spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
    EXPECT_EQ(r.generation, spans) << what;
    EXPECT_EQ(t.has_generation(), file.find("_generation") != std::string::npos || file == "phi_4.jinja") << what;
    ++rendered;
  }
  EXPECT_GT(rendered, 250);
  EXPECT_GT(raised, 20);
}

// One construct a template (tests/chat_templates/make_snippets.py): the same text, or an error where
// transformers raises one.
TEST(Jinja, SnippetsAsTransformers) {
  const ojson all = ojson::parse(read(dir() + "snippets.json"));
  ASSERT_GT(all["cases"].size(), 80u);
  for (const auto& c : all["cases"]) {
    const std::string src = c["template"].get<std::string>();
    if (c.contains("error")) {
      EXPECT_THROW(Template::parse(src, "snippet").render(all["context"]), strata::ConfigError) << src;
      continue;
    }
    try {
      EXPECT_EQ(Template::parse(src, "snippet").render(all["context"]).text, c["text"].get<std::string>()) << src;
    } catch (const std::exception& e) {
      ADD_FAILURE() << src << ": " << e.what();
    }
  }
}

// Case mapping beyond ASCII (tests/chat_templates/make_case_expected.py): Python's str methods, jinja2's case
// filters and tests and a case-insensitive sort over multilingual text (final sigma, İ, ß, ligatures, titlecase
// digraphs, Georgian, Cherokee, Deseret, digits of other scripts) and 400 random strings of cased and
// case-ignorable characters, as transformers renders them.
TEST(Jinja, CaseMappingAsPython) {
  const ojson all = ojson::parse(read(dir() + "case_expected.json"));
  const std::string src = all["template"].get<std::string>();
  const std::string one_src = src.substr(0, src.find("{% endfor %}")) + "{% endfor %}";
  const Template one = Template::parse(one_src, "case"), whole = Template::parse(src, "case");
  ASSERT_GE(all["cases"].size(), 400u);
  ojson texts = ojson::array();
  int differ = 0;
  for (const auto& c : all["cases"]) {
    texts.push_back(c["text"]);
    ojson ctx;
    ctx["texts"] = ojson::array({c["text"]});
    const std::string got = one.render(ctx).text;
    if (got != c["rendered"].get<std::string>() && ++differ <= 10)
      ADD_FAILURE() << "text '" << c["text"].get<std::string>() << "'\n  strata: " << got
                    << "  python: " << c["rendered"].get<std::string>();
  }
  EXPECT_EQ(differ, 0);
  ojson ctx;
  ctx["texts"] = texts;
  EXPECT_EQ(whole.render(ctx).text, all["all"].get<std::string>());
}

// Random expressions (tests/chat_templates/make_fuzz.py): never a different rendering. Where
// transformers raises, strata raises; where it renders, strata renders the same text or says the
// construct is not supported (counted: a few at most).
TEST(Jinja, FuzzNeverRendersDifferently) {
  const ojson all = ojson::parse(read(dir() + "fuzz.json"));
  ASSERT_GE(all["cases"].size(), 1000u);
  int same = 0, unsupported = 0;
  for (const auto& c : all["cases"]) {
    const std::string src = c["template"].get<std::string>();
    std::string got;
    try {
      got = Template::parse(src, "fuzz").render(all["context"]).text;
    } catch (const strata::ConfigError& e) {
      if (c.contains("error")) continue;
      const bool says_unsupported = std::string(e.what()).find("not supported") != std::string::npos;
      EXPECT_TRUE(says_unsupported) << src << ": " << e.what() << "\n  transformers: " << c["text"];
      unsupported += says_unsupported;
      if (getenv("JINJA_FUZZ_VERBOSE")) std::printf("unsupported: %s: %s\n", src.c_str(), e.what());
      continue;
    }
    if (c.contains("error")) {
      ADD_FAILURE() << src << ": rendered " << ojson(got).dump() << ", transformers raised " << c["error"];
      continue;
    }
    EXPECT_EQ(got, c["text"].get<std::string>()) << src;
    ++same;
  }
  EXPECT_EQ(unsupported, 0);  // case mapping of non-ASCII letters was the last
  EXPECT_GT(same, 500);
}

// An unsupported construct is an error naming the template and the line, never a wrong rendering.
void expect_error(const std::string& source, const std::string& needle, const ojson& ctx = ojson::object()) {
  try {
    Template t = Template::parse(source, "bad.jinja");
    t.render(ctx);
    ADD_FAILURE() << "no error for: " << source;
  } catch (const strata::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << source << " -> " << e.what();
  }
}

TEST(Jinja, UnsupportedConstructsNameFileAndLine) {
  expect_error("line one\n{% include 'x.jinja' %}", "bad.jinja, line 2: the statement {% include %} is not supported");
  expect_error("{% extends 'base' %}", "bad.jinja, line 1: the statement {% extends %} is not supported");
  expect_error("a\nb\n{% for x in y recursive %}{% endfor %}", "bad.jinja, line 3: recursive for loops");
  expect_error("\n\n\n{{ 'x' | wordcount }}", "bad.jinja, line 4: the filter 'wordcount' is not supported");
  expect_error("{{ 1 is prime }}", "bad.jinja, line 1: the test 'prime' is not supported");
  expect_error("{{ 'ab'.zfill(5) }}", "the method str.zfill() is not supported");
  expect_error("{{ f(*args) }}", "*args and **kwargs in calls are not supported");
  expect_error("{% if x %}never closed", "a block is not closed");
  expect_error("{{ 'unterminated }}", "a string literal is not closed");
  expect_error("{{ x | tojson(ensure_ascii=true) }}", "ensure_ascii=true) is not supported", {{"x", 1}});
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", "macro 'f' recurses too deep");
  expect_error("{{ 'x' * 100000000 }}", "too long for a chat template");
}

TEST(Jinja, UndefinedAsJinja2Default) {
  auto render = [](const std::string& src, const ojson& ctx) {
    return Template::parse(src, "u.jinja").render(ctx).text;
  };
  EXPECT_EQ(render("[{{ nope }}][{{ nope | length }}][{{ nope is defined }}][{% for x in nope %}x{% endfor %}]",
                   ojson::object()),
            "[][0][False][]");
  EXPECT_EQ(render("{{ m.missing is defined }}{{ m.missing }}|{{ m['missing'] | default('d') }}", {{"m", {{"a", 1}}}}),
            "False|d");
  expect_error("{{ nope.attr }}", "bad.jinja, line 1: 'nope' is undefined");
  expect_error("\n{{ nope + 1 }}", "bad.jinja, line 2: 'nope' is undefined");
  expect_error("{{ nope() }}", "'nope' is undefined");
  expect_error("{{ raise_exception('custom message') }}", "bad.jinja, line 1: custom message");
}

// strftime_now formats the time a render is given (local time), or the clock's without one.
TEST(Jinja, StrftimeNowTakesTheRendersTime) {
  const Template t = Template::parse("{{ strftime_now('%Y-%m-%d %H') }}", "now.jinja");
  const std::time_t when = kNow + 3 * 86400;
  std::tm tm{};
  localtime_r(&when, &tm);
  char want[32];
  std::strftime(want, sizeof want, "%Y-%m-%d %H", &tm);
  EXPECT_EQ(t.render(ojson::object(), when).text, want);
  const std::time_t before = std::time(nullptr);
  const std::string now = t.render(ojson::object()).text;
  const std::time_t after = std::time(nullptr);
  std::string either[2];
  for (int k = 0; k < 2; k++) {
    localtime_r(k ? &after : &before, &tm);
    std::strftime(want, sizeof want, "%Y-%m-%d %H", &tm);
    either[k] = want;
  }
  EXPECT_TRUE(now == either[0] || now == either[1]) << now;
}

}  // namespace
