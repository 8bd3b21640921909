// The planned arena's automatic steps (planned_steps:auto): finds the period of the request
// sizes and says where each step begins. Not public; not thread-safe (the arena's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "modelmem/plan/period.hpp"

namespace modelmem::alloc::detail {

class StepDetector {
 public:
  struct Options {
    std::size_t history = 8192;        ///< requests remembered (the longest period: half)
    std::size_t min_period = 4;        ///< shortest period accepted
    std::size_t first_detection = 64;  ///< requests before the first detection
    std::size_t min_history = 1024;    ///< requests after which an early period is checked
  };
  explicit StepDetector(Options options);

  struct Seen {
    bool boundary = false;  ///< a step begins at this request
    bool replaced = false;  ///< the period found early was wrong: plans of it are stale
  };
  /// One request of `rounded` bytes, with `live` watched blocks live just before it.
  Seen observe(std::uint64_t rounded, std::size_t live);
  /// The pattern changed: forget the period and look again from the requests to come, with a
  /// full history (the early detection is a shortcut taken once).
  void restart();
  std::size_t period() const noexcept { return period_; }

 private:
  plan::Period detect() const;
  bool adopt(std::size_t p);  ///< true when a step begins at the current request

  Options options_;
  std::vector<std::uint64_t> history_;  // rounded sizes of the last requests (oldest first)
  std::vector<std::size_t> live_at_;    // watched blocks live just before each of them
  std::size_t period_ = 0;
  std::uint64_t seen_ = 0;          // requests observed before the current one
  std::uint64_t phase_origin_ = 0;  // request number at which a step begins
  std::uint64_t since_detection_ = 0;
  bool verify_pending_ = false;  // the period was found in a short history: check it again
  bool early_used_ = false;      // a period was found before min_history requests once
};

}  // namespace modelmem::alloc::detail
