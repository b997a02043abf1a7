// One name table per enum, read both ways: printing a value and parsing a config or flag string.
// The parse helpers return nothing for an unknown name; the caller throws its own typed error,
// which lists the accepted names with `name_choices` ("fp32, bf16 or 8bit").
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The value's name in `table`; "?" when the table lacks it.
template <class E, size_t N>
constexpr const char* name_of(const EnumName<E> (&table)[N], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "?";
}

// The value named `s`, among `only` when given (a field that accepts part of the enum).
template <class E, size_t N>
std::optional<E> parse_name(const EnumName<E> (&table)[N], std::string_view s, std::initializer_list<E> only = {}) {
  for (const auto& e : table) {
    if (s != e.name) continue;
    if (only.size() == 0) return e.value;
    for (E o : only)
      if (o == e.value) return e.value;
  }
  return std::nullopt;
}

// The accepted names in table order, as a message lists them: "a", "a or b", "a, b or c".
template <class E, size_t N>
std::string name_choices(const EnumName<E> (&table)[N], std::initializer_list<E> only = {}) {
  std::string out;
  size_t n = only.size() == 0 ? N : only.size(), i = 0;
  for (const auto& e : table) {
    bool take = only.size() == 0;
    for (E o : only) take = take || o == e.value;
    if (!take) continue;
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += e.name;
    ++i;
  }
  return out;
}

}  // namespace strata
