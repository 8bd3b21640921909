// `modelmem plan --fit DIM`: the largest value of a dim (batch, seq, ...) whose need fits a
// device, for one model or several sharing it. Each probe is an exact plan at that value and the
// need on the strategy (modelmem/sizing/plan_need.hpp): the quotas plus the overhead. The search
// doubles the value until it no longer fits, then bisects, so the value found fits and the next
// one does not (both were planned), or the model stops it first: a table indexed by positions
// with fewer rows (model::table_limits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelmem/model/plan_model.hpp"
#include "modelmem/sizing/plan_need.hpp"

namespace modelmem::sizing {

struct FitRequest {
  std::vector<std::string> models;
  model::PlanOptions options;  ///< the other dims and flags; `dim` must not be among options.dims
  SizingOptions sizing;
  std::size_t device_memory = 0;
  std::string dim;
  std::int64_t max_value = std::int64_t{1} << 24;  ///< the search stops here
  /// The every-value answer plans each value from 1 up to the single value found (stopping at
  /// the first that does not fit), at most this many: a server that batches dynamically runs
  /// every batch up to its largest. 0: not searched (the single value alone, labelled so).
  std::int64_t every_max = 4096;
};

struct FitResult {
  std::string dim;
  std::string model;                ///< "" = every model together
  std::int64_t value = 0;           ///< the largest value that fits; 0 when 1 does not fit
  std::size_t need_bytes = 0;       ///< total at value (quotas + overhead); 0 when value is 0
  std::size_t next_need_bytes = 0;  ///< total at value + 1; 0 when the model stops it
  /// What stops it: "memory", "model: table 'T' has N rows (NODE)", or "search: ..." at
  /// max_value.
  std::string limit;
  std::size_t probes = 0;
  double seconds = 0;
  /// Values above value + 1 planned as well, none of which fits (the need is not always monotone
  /// in the dim: the search looks past the bisection), in increasing order.
  std::vector<std::int64_t> checked_above;
  /// "DIM=A fits although DIM=B does not" when such a pair was met on the way (A > B); "" else.
  std::string not_monotone;
  /// The smallest value below `value` planned on the way that does not fit for memory; 0 when none
  /// was met. `value` is the largest single value found: when this is set, not every value up to
  /// it fits (what a server that batches dynamically needs). 0 does not prove the opposite: the
  /// values below `value` are not each planned.
  std::int64_t refused_below = 0;
  /// The largest E such that every value 1..E was planned and fits (each planned, in order,
  /// up to the first that does not fit or every_max); 0 when not searched or 1 does not fit.
  std::int64_t every_value = 0;
  /// Whether every value from 1 to `value` fits (every_value == value, all planned).
  bool every_complete = false;
  /// The first value above every_value planned that does not fit; 0 when none (every_value is
  /// `value`, or every_max stopped the scan).
  std::int64_t every_refused = 0;
  std::size_t every_probes = 0;  ///< plans the every-value scan made beyond the search's
  /// Among 1..every_value, the value whose need is the largest, and its device plan: the
  /// quotas a server running every batch up to every_value needs.
  std::int64_t every_peak_value = 0;
  DeviceNeed every_plan;
  /// The device plan at `value` (quotas and configuration strings); empty plans when value is 0.
  DeviceNeed at_value;
  bool found() const { return value > 0; }
};

/// The largest value of request.dim every model takes together. Throws InvalidInput for a bad
/// request (no --device-memory, the dim also in options.dims, a model without the dim).
FitResult fit(const FitRequest& request);
/// Each model's largest value alone on the device (`--fit-each`).
std::vector<FitResult> fit_each(const FitRequest& request);

std::string render_text(const FitResult& result);
nlohmann::json fit_json(const FitResult& result);  ///< the "fit" object of `plan --json`
/// What `plan --fit DIM --json` writes: the device plan at the value (render_json of at_value;
/// no members when no value fits) with "fit": fit_json(result).
nlohmann::json render_json(const FitResult& result);
/// What `plan --fit DIM --fit-each --json` writes: {"fit_each": [render_json(each model)]}.
nlohmann::json render_json(const std::vector<FitResult>& each);

}  // namespace modelmem::sizing
