// The texts derived from the settings table: --write-config's YAML, the tools' usage lines and the
// user guide's option table.
#include <fmt/format.h>

#include "model/run/settings.h"
#include "model/run/settings_structured.h"

namespace strata {

namespace {

// "integer in [1, 2147483647]", "`constant`, `linear` or `cosine`".
std::string type_text(const Setting& s, bool markdown) {
  const std::string q = markdown ? "`" : "";
  auto listed = [&](std::string_view choices) {
    std::string out;
    while (!choices.empty()) {
      const size_t comma = choices.find(", ");
      out += (out.empty() ? "" : ", ") + q + std::string(choices.substr(0, comma)) + q;
      choices = comma == std::string_view::npos ? std::string_view() : choices.substr(comma + 2);
    }
    return out;
  };
  switch (s.type) {
    case SettingType::integer:
    case SettingType::number:
    case SettingType::bytes: {
      const std::string t = fmt::format("{} in {}", setting_type_name(s.type), s.range.text());
      return s.choices.empty() ? t : listed(s.choices) + " or " + t;
    }
    case SettingType::choice:
      return listed(s.choices);
    default:
      return setting_type_name(s.type);
  }
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

std::string write_config(const TrainConfig& c, const std::string& header) {
  static const TrainConfig defaults;
  std::string out = header;
  for (const Setting& s : settings()) {
    if (!s.written) continue;
    const std::string v = s.get(c);
    if (v == s.get(defaults)) continue;
    const bool quote = s.type == SettingType::text || v.empty();
    out += fmt::format("{}: {}\n", s.key, quote ? yaml_quoted(v) : v);
  }
  return out;
}

std::string settings_usage(Tool tool) {
  std::string out;
  for (const Setting& s : settings()) {
    if (!s.takes(tool)) continue;
    const std::string flag = fmt::format("--{}{}{}", s.flag, s.metavar.empty() ? "" : " ", s.metavar);
    std::string extra = fmt::format("YAML {}", s.key);
    if (!s.def.empty() && s.def != "-") extra += fmt::format("; default {}", s.def);
    if (s.type != SettingType::text && s.type != SettingType::structured && s.type != SettingType::boolean)
      extra += "; " + type_text(s, false);
    out += fmt::format("  {:<30} {} ({})\n", flag, s.help, extra);
  }
  return out;
}

std::string settings_markdown() {
  std::string out =
      "| command line | YAML key | type and range | default | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const Setting& s : settings()) {
    std::string key = fmt::format("`{}`", s.key);
    for (std::string_view a : s.aliases) key += fmt::format(" (or `{}`)", a);
    const std::string flag =
        s.takes(Tool::train) ? fmt::format("`--{}{}{}`", s.flag, s.metavar.empty() ? "" : " ", s.metavar) : "—";
    out += fmt::format("| {} | {} | {} | {} | {} |\n", md_cell(flag), key, md_cell(type_text(s, true)),
                       md_cell(s.def.empty() || s.def == "-" ? "—" : s.def), md_cell(s.help));
  }
  return out;
}

}  // namespace strata
