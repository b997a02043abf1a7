// Typed errors. Library code throws these (with the statement and file:line); only tools turn
// them into messages and exit codes. Destructors log, never throw.
#pragma once
#include <string>

#include "strata/error.h"  // the exception classes (public)

namespace strata {

namespace detail {
std::string where(const char* file, int line);
[[noreturn]] void check_failed(const char* stmt, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace strata

// Throws ErrType(message + " [file:line]"), forwarding any extra constructor arguments.
#define STRATA_THROW(ErrType, msg, ...) \
  throw ErrType(std::string(msg) + " [" + ::strata::detail::where(__FILE__, __LINE__) + "]" __VA_OPT__(, ) __VA_ARGS__)

// Internal invariant: throws strata::Error naming the failed statement and file:line.
#define STRATA_CHECK(cond, msg)                                                    \
  do {                                                                             \
    if (!(cond)) ::strata::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
