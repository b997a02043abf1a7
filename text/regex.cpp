#include "text/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "text/unicode.h"

namespace strata::text {
namespace {

void initialize_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    onig_initialize(&enc, 1);
  });
}

struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

std::unique_ptr<Regex> Regex::compile(std::string_view pattern, std::string* error) {
  initialize_once();
  OnigRegex reg = nullptr;
  OnigErrorInfo info{};
  auto p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(buf, rc, &info);
    *error = reinterpret_cast<const char*>(buf);
    return nullptr;
  }
  std::unique_ptr<Regex> r(new Regex());
  r->reg_ = reg;
  r->pattern_ = std::string(pattern);
  return r;
}

Regex::~Regex() {
  if (reg_) onig_free(static_cast<OnigRegex>(reg_));
}

void Regex::find_all(std::string_view s, std::vector<Span>& out) const {
  thread_local std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  auto reg = static_cast<OnigRegex>(reg_);
  auto start = reinterpret_cast<const OnigUChar*>(s.data());
  auto end = start + s.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= s.size()) {
    onig_region_clear(region.get());
    int pos = onig_search(reg, start, end, start + from, end, region.get(), ONIG_OPTION_NONE);
    if (pos < 0) return;  // ONIG_MISMATCH (or an error, which ends the search as the crate does)
    size_t b = size_t(region->beg[0]), e = size_t(region->end[0]);
    if (b == e && have_last && last_end == e) {
      from += from < s.size() ? size_t(utf8_length(uint8_t(s[from]))) : 1;
      continue;
    }
    from = e;
    have_last = true;
    last_end = e;
    out.push_back({uint32_t(b), uint32_t(e)});
  }
}

}  // namespace strata::text
