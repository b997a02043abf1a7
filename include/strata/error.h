// strata's typed errors, part of the public API (strata/strata.h). Every error strata throws is a
// strata::Error; the subclasses carry the fields a caller acts on (the file and field at fault, the
// tier and sizes of a failed allocation).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A tier (device arena, pinned host pool, disk) could not satisfy an allocation.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& what, std::string tier, std::string tag, size_t requested_bytes,
                   size_t in_use_bytes, size_t budget_bytes)
      : Error(what),
        tier(std::move(tier)),
        tag(std::move(tag)),
        requested_bytes(requested_bytes),
        in_use_bytes(in_use_bytes),
        budget_bytes(budget_bytes) {}
  std::string tier, tag;
  size_t requested_bytes, in_use_bytes, budget_bytes;
};

// A file on disk is malformed: names the file and the field (or byte range) at fault.
class FormatError : public Error {
 public:
  FormatError(const std::string& what, std::string file, std::string field)
      : Error(what), file(std::move(file)), field(std::move(field)) {}
  std::string file, field;
};

// A configuration (config.json, YAML, command line) is missing a field or has a bad value.
class ConfigError : public Error {
 public:
  ConfigError(const std::string& what, std::string file, std::string field)
      : Error(what), file(std::move(file)), field(std::move(field)) {}
  std::string file, field;
};

// An I/O operation failed (open, write, rename, io_uring).
class IoError : public Error {
 public:
  IoError(const std::string& what, std::string file) : Error(what), file(std::move(file)) {}
  std::string file;
};

// A backend does not support an op, dtype or shape.
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& what) : Error(what) {}
};

}  // namespace strata
