// The planned arena's automatic steps: the period of the request sizes (step_detector.hpp).
#include "step_detector.hpp"

#include <algorithm>
#include <span>

namespace modelmem::alloc::detail {

StepDetector::StepDetector(Options options) : options_(options) {
  // Full capacity, touched now: the history never reallocates, so recording it in steady state
  // costs no allocation and no page fault.
  history_.resize(options_.history);
  live_at_.resize(options_.history);
  history_.clear();
  live_at_.clear();
}

void StepDetector::restart() {
  period_ = 0;
  // Detect from the new requests only: the old pattern would dominate the history.
  history_.clear();
  live_at_.clear();
  since_detection_ = 0;
  verify_pending_ = false;
}

StepDetector::Seen StepDetector::observe(std::uint64_t rounded, std::size_t live) {
  Seen out;
  // The history is kept while a period is in use: when the pattern changes, the detection
  // starts again from the recent requests rather than from nothing.
  if (history_.size() >= options_.history) {
    // Forget the older half at once: O(1) amortised per request.
    const auto half = static_cast<std::ptrdiff_t>(history_.size() / 2);
    history_.erase(history_.begin(), history_.begin() + half);
    live_at_.erase(live_at_.begin(), live_at_.begin() + half);
  }
  history_.push_back(rounded);
  live_at_.push_back(live);
  if (period_ != 0 && verify_pending_ && history_.size() >= options_.min_history) {
    // Found in a short history, where a layer repeated inside the step can look like the
    // step: look again now that the history holds enough requests.
    verify_pending_ = false;
    plan::Period again = detect();
    if (again.found && again.length != 0 && again.length != period_) {
      out.replaced = true;
      out.boundary = adopt(again.length);
    }
  } else if (period_ != 0) {
    out.boundary = seen_ >= phase_origin_ && (seen_ - phase_origin_) % period_ == 0;
  } else if (++since_detection_ >= std::max<std::size_t>(64, history_.size() / 4) &&
             history_.size() >= (early_used_ ? options_.min_history : options_.first_detection)) {
    // Detection costs O(n * candidates): run after a batch of new requests proportional to
    // what is remembered, so its cost per request stays constant.
    since_detection_ = 0;
    plan::Period found = detect();
    if (found.found && found.length != 0) {
      verify_pending_ = history_.size() < options_.min_history;
      early_used_ = true;
      out.boundary = adopt(found.length);
    }
  }
  ++seen_;
  return out;
}

plan::Period StepDetector::detect() const {
  plan::PeriodOptions po;
  po.min_period = options_.min_period;
  po.min_repeats = 2;
  po.min_match = 1.0;
  return plan::detect_period(std::span<const std::uint64_t>(history_), po);
}

bool StepDetector::adopt(std::size_t p) {
  // Steps begin where the fewest watched blocks are live, so few blocks outlive a step.
  const std::size_t n = history_.size();
  std::size_t best = n - p;
  for (std::size_t i = n - p; i < n; ++i)
    if (live_at_[i] < live_at_[best]) best = i;
  period_ = p;
  // history_[n-1] is the current request, numbered seen_.
  const std::uint64_t index_of_best = seen_ - (n - 1 - best);
  phase_origin_ = index_of_best == seen_ ? seen_ : index_of_best + p;
  return seen_ == phase_origin_;
}

}  // namespace modelmem::alloc::detail
