#include "engine/switches.h"

#include <cstdlib>
#include <type_traits>

namespace strata {

Switches Switches::from(const std::function<const char*(const char*)>& get) {
  Switches s;
  auto flag = [&](const char* name, bool& v) {
    const char* e = get(name);
    if (e && *e) v = std::string(e) != "0";
  };
  // A number in [0, 1e6] (range-checked before the conversion: 1e30 must not wrap an int); else the default.
  auto number = [&](const char* name, auto& v) {
    const char* e = get(name);
    if (!e || !*e) return;
    char* end = nullptr;
    const double d = std::strtod(e, &end);
    if (end && *end == '\0' && d >= 0 && d <= 1e6) v = static_cast<std::remove_reference_t<decltype(v)>>(d);
  };
  flag("STRATA_GEMM_TUNE", s.gemm_tune);
  flag("STRATA_GEMM_VERBOSE", s.gemm_verbose);
  number("STRATA_GEMM_TUNE_MS", s.gemm_tune_ms);
  flag("STRATA_ATTN_TUNE", s.attn_tune);
  flag("STRATA_ATTN_VERBOSE", s.attn_verbose);
  flag("STRATA_GRAD_ALIAS", s.grad_alias);
  flag("STRATA_HOST_REGISTER", s.host_register);
  flag("STRATA_PROFILE", s.op_profile);
  number("STRATA_PROFILE_SKIP", s.op_profile_skip);
  if (const char* t = get("STRATA_KERNEL_TRACE")) s.kernel_trace = std::string(t) == "1";
  if (const char* t = get("STRATA_CUPTI_LIB"); t && *t) s.cupti_lib = t;
  if (const char* t = get("TMPDIR"); t && *t) s.temp_dir = t;
  if (const char* v = get("CUDA_VISIBLE_DEVICES")) s.visible_devices = v;
  number("STRATA_TEST_KILL_AT", s.test_kill_at);
  if (const char* v = get("STRATA_TEST_RENAME_FALLBACK"); v && *v) s.test_rename_fallback = true;
  return s;
}

const char* process_env(const char* name) {
  return std::getenv(name);
}

const Switches& switches() {
  static const Switches s = Switches::from(process_env);
  return s;
}

}  // namespace strata
