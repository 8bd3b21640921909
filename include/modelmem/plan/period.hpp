// Detects the repeating step of an allocation sequence: inference and training loops issue the
// same allocations and frees in the same order every step, after a warm-up that differs. The
// planned arena uses this to decide when a profile is complete; `modelmem analyze` to advise.
//
// The sequence is given as tokens (one per event; equal tokens = "the same event"), or as
// alloc/free events with sizes, which are turned into tokens. Pure functions, no shared state:
// safe to call from any thread. Cost O(n * k) for n events and k candidate periods (k <= 64 by
// default), memory O(n); no allocation beyond vectors of n elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace modelmem::plan {

/// One allocator event as the detector sees it.
struct PeriodEvent {
  bool is_free = false;
  std::size_t size = 0;
};

struct PeriodOptions {
  std::size_t min_period = 1;
  /// 0 = (n - warm-up) / min_repeats.
  std::size_t max_period = 0;
  /// Full periods that must follow the start (the first is compared with the second, ...).
  std::size_t min_repeats = 2;
  /// Fraction of events equal to the event one period later that counts as "repeating".
  double min_match = 0.9;
  /// Candidates verified; more finds periods in very noisy sequences at linear extra cost.
  std::size_t max_candidates = 64;
  /// Sizes are rounded up to a multiple of this before comparing (1 = exact sizes), so that a
  /// caller can ignore jitter below an allocator's rounding.
  std::size_t size_granularity = 1;
  /// A shorter period wins over the best-matching one when its match is at most this much lower
  /// (and it covers about as many events). Small, so that one layer repeated inside a step does
  /// not beat a step that repeats exactly.
  double shorter_tolerance = 0.01;
  /// detect_period reports a period only when [start, n) holds at least this fraction of the
  /// events: a loop repeating in the last tenth of a trace is not the program's step.
  double min_coverage = 0.5;
};

struct Period {
  bool found = false;
  std::size_t length = 0;   ///< events per period
  std::size_t start = 0;    ///< index of the first event from which the sequence repeats
  std::size_t repeats = 0;  ///< full periods in [start, n)
  /// Fraction of events i in [start, n - length) with token[i] == token[i + length]; 1.0 means
  /// every step is identical.
  double match = 0.0;
  /// Events in [start, n - length) that differ from the event one period later.
  std::size_t mismatches = 0;
};

/// Finds the period of `tokens`. Among periods whose repetition from some start reaches
/// `min_match`, returns the one with the highest match; a shorter period wins when its match is
/// within `shorter_tolerance` of the best and it covers about as many events (so a multiple of
/// the true period is not reported, and a sub-period inside a step, e.g. one layer, loses to the
/// step when the step repeats better). Candidates repeating only in a tail shorter than half of
/// what the best covers are dropped. `found` is false when nothing repeats.
Period detect_period(std::span<const std::uint64_t> tokens, const PeriodOptions& options = {});

/// Tokens of (kind, size rounded to options.size_granularity), then detect_period.
Period detect_period(std::span<const PeriodEvent> events, const PeriodOptions& options = {});

/// The token detect_period uses for one event (exposed so callers can build mixed sequences).
std::uint64_t period_token(const PeriodEvent& event, std::size_t size_granularity = 1) noexcept;

/// Match statistics of one given period length: best start and fraction matching from there.
/// `found` is set when `length` repeats at least min_repeats times with min_match.
Period check_period(std::span<const std::uint64_t> tokens, std::size_t length,
                    const PeriodOptions& options = {});

}  // namespace modelmem::plan
