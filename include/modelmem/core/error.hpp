// The one exception hierarchy of modelmem. Every layer throws these and nothing else for
// conditions a caller can act on; the C and LD_PRELOAD surfaces turn them into return codes.
// Byte formatting (core/bytes.hpp) and checked size arithmetic (core/checked.hpp) have headers
// of their own; they are included here because almost every thrower uses them.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/checked.hpp"

namespace modelmem {

/// Base of every modelmem error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input from a user: a malformed file, config string, size or argument. CLI exit code 2.
class InvalidInput : public Error {
 public:
  using Error::Error;
};

/// The operation is not available here (e.g. virtual memory on a device without it).
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// The numbers every out-of-memory report carries, so a user can tell fragmentation (free
/// memory exists but no block is large enough) from exhaustion.
struct OomInfo {
  std::size_t requested = 0;
  std::size_t device_free = 0;
  std::size_t reserved = 0;
  std::size_t allocated = 0;
  std::size_t largest_free_block = 0;
  std::optional<std::size_t> quota;  ///< set when a quota applied
  std::string where;                 ///< device / pool / strategy that failed
  /// Bytes the request needed from the device (a new segment, or pages), 0 when not known: with
  /// `reserved` it says what limit would have served the request.
  std::size_t needed = 0;
};

/// Formats an OomInfo as one line with human-readable sizes.
std::string describe(const OomInfo& info);

/// An allocation could not be satisfied.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(OomInfo info) : Error(describe(info)), info_(std::move(info)) {}
  OutOfMemory(OomInfo info, const std::string& message) : Error(message), info_(std::move(info)) {}
  const OomInfo& info() const noexcept { return info_; }

 private:
  OomInfo info_;
};

/// A named pool exceeded its quota; it never takes memory from another pool.
class QuotaExceeded : public OutOfMemory {
 public:
  using OutOfMemory::OutOfMemory;
};

}  // namespace modelmem
