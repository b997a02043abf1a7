// A Jinja interpreter for chat templates: renders a checkpoint's `chat_template` byte for byte as
// transformers' apply_chat_template does (jinja2 with trim_blocks, lstrip_blocks, loopcontrols,
// `{% generation %}`, raise_exception, strftime_now and transformers' tojson).
// A construct outside the supported subset is a ConfigError naming the template and line, at parse
// time where it can be seen then, else when it is reached.
#pragma once
#include <cstddef>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::text::jinja {

// What one render may build: a hostile template ends in a ConfigError naming the template and line, not a hang or
// an exhausted memory. Chat templates of real checkpoints use a small fraction of each.
inline constexpr size_t kMaxRenderedBytes = size_t(64) << 20;  // the rendered text, and any string a template builds
// Work units a render may spend: one per statement run, loop iteration or macro call, per item of a list or dict an
// expression builds or a loop walks, and per 256 bytes of text an expression builds.
inline constexpr size_t kMaxRenderWork = size_t(1) << 19;
inline constexpr int kMaxValueDepth = 1000;  // lists and dicts nested inside each other

struct Rendered {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;  // byte spans [begin, end) of {% generation %} blocks
};

struct Program;  // the parsed template (text/jinja_internal.h)

class Template {
 public:
  // ConfigError "<name>, line N: ..." for a syntax error or an unsupported construct.
  static Template parse(std::string_view source, const std::string& name);
  // The context's keys are the template's variables (messages, add_generation_prompt, bos_token...);
  // key order is kept, as Python dicts keep it. raise_exception and errors met while rendering are
  // ConfigErrors naming the template and line. `now`: the time strftime_now formats (local time), 0 for the clock's
  // (a render that must be reproducible, as a test's, fixes it).
  Rendered render(const nlohmann::ordered_json& context, std::time_t now = 0) const;
  bool has_generation() const;  // the template marks assistant text with {% generation %}
  const std::string& name() const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace strata::text::jinja
