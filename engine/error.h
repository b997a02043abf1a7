// Typed errors. Library code throws these (with the statement and file:line); only tools turn
// them into messages and exit codes. Destructors log, never throw.
#pragma once
#include <string>
#include <type_traits>

#include "strata/error.h"  // the exception classes (public)

namespace strata {

namespace detail {
std::string where(const char* file, int line);
[[noreturn]] void check_failed(const char* stmt, const char* file, int line, const std::string& msg);
// A user's errors (a bad setting, file or format) say what to change, not where in strata they
// were noticed; internal errors keep the file:line.
template <class E>
std::string located(std::string msg, const char* file, int line) {
  if constexpr (std::is_base_of_v<ConfigError, E> || std::is_base_of_v<IoError, E> || std::is_base_of_v<FormatError, E>)
    return msg;
  else
    return msg + " [" + where(file, line) + "]";
}
}  // namespace detail

}  // namespace strata

// Throws ErrType(message + " [file:line]") (a ConfigError, IoError or FormatError: the message
// alone), forwarding any extra constructor arguments.
#define STRATA_THROW(ErrType, msg, ...) \
  throw ErrType(::strata::detail::located<ErrType>(std::string(msg), __FILE__, __LINE__) __VA_OPT__(, ) __VA_ARGS__)

// Internal invariant: throws strata::Error naming the failed statement and file:line.
#define STRATA_CHECK(cond, msg)                                                    \
  do {                                                                             \
    if (!(cond)) ::strata::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
