// A small command-line parser for the strata tools: --key value and --flag, with typed getters
// that name the flag and the expected value on error.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"

namespace strata::cli {

class Args {
 public:
  // `flags` take no value; every other --name takes one.
  Args(int argc, char** argv, std::set<std::string> known, std::set<std::string> flags) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) {
        positional_.push_back(a);
        continue;
      }
      std::string k = a.substr(2), v;
      auto eq = k.find('=');
      if (eq != std::string::npos) {
        v = k.substr(eq + 1);
        k = k.substr(0, eq);
      } else if (!flags.count(k)) {
        if (i + 1 >= argc) throw ConfigError(fmt::format("--{} needs a value", k), "command line", k);
        v = argv[++i];
      } else {
        v = "1";
      }
      if (!known.count(k) && !flags.count(k))
        throw ConfigError(fmt::format("unknown option --{}", k), "command line", k);
      values_[k] = v;
    }
  }
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second;
  }
  long integer(const std::string& k, long def) const {
    if (!has(k)) return def;
    try {
      size_t used = 0;
      long v = std::stol(str(k), &used);
      if (used == str(k).size()) return v;
    } catch (...) {
    }
    throw ConfigError(fmt::format("--{} expects an integer, got '{}'", k, str(k)), "command line", k);
  }
  double number(const std::string& k, double def) const {
    if (!has(k)) return def;
    try {
      size_t used = 0;
      double v = std::stod(str(k), &used);
      if (used == str(k).size()) return v;
    } catch (...) {
    }
    throw ConfigError(fmt::format("--{} expects a number, got '{}'", k, str(k)), "command line", k);
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Every --name given, with its value ("1" for a switch): what apply_flags reads.
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace strata::cli
