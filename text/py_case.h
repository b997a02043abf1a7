// Python's str case methods over UTF-8, as jinja2 runs them in transformers' apply_chat_template:
// CPython's full case mappings (several characters for one: 'ß'.upper() == 'SS') and str.lower's
// final-sigma rule, on Python's Unicode data (text/py_case_tables.h). Bytes that are not UTF-8 pass
// through unchanged.
#pragma once
#include <string>
#include <string_view>

namespace strata::text {

std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_title(std::string_view s);       // str.title: titlecase after an uncased character, else lower
std::string py_capitalize(std::string_view s);  // str.capitalize: the first character titlecased, the rest lower
// jinja2's title filter: each run of characters other than whitespace and -({[< gets its first character
// upper()'d and the rest lower()'d on its own (str.lower of that part, its final sigma included).
std::string jinja_title_filter(std::string_view s);

bool py_islower(std::string_view s);  // a cased character and no uppercase or titlecase one
bool py_isupper(std::string_view s);  // a cased character and no lowercase or titlecase one
enum class PyCharClass { alpha, alnum, decimal, digit, numeric, space };
bool py_is(std::string_view s, PyCharClass c);  // non-empty and every character of the class
bool py_isspace_char(uint32_t cp);

}  // namespace strata::text
