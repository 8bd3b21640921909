// `modelmem analyze`: what a trace says about a program's memory, and what to do about it.
// A summary (sizes, peaks, rates), the repeating step, varying input dimensions, why reserved
// memory exceeds live memory, and static pool sizes, each as concrete advice with config keys.
// analyze() is a pure function of the trace (it runs planning heuristics on one step); thread-
// compatible. Cost: O(n log n) plus the solver's time on one step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "modelmem/plan/period.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

/// Allocation sizes in [low, high) (powers of two).
struct SizeBin {
  std::size_t low = 0;
  std::size_t high = 0;
  std::size_t count = 0;
  std::size_t bytes = 0;
};

struct StepStats {
  Window window;
  std::size_t allocs = 0;
  std::size_t bytes_allocated = 0;
  std::size_t peak_live = 0;    ///< including blocks live from before the step
  std::size_t live_in = 0;      ///< bytes live at the step's start, allocated before it
  std::size_t group = 0;        ///< steps with the same allocation sequence share a group
  std::size_t common_size = 0;  ///< most frequent allocation size in the step
};

/// A group of identical steps (same sequence of allocation and free sizes).
struct StepGroup {
  std::vector<std::size_t> steps;  ///< indices into Analysis::steps
  /// Block sizes relative to the kind of step allocating least (x4 when most sizes are 4 times
  /// as large): the input dimension's ratio when sizes grow linearly with it.
  double scale = 1.0;
  std::size_t peak_live = 0;
  std::size_t planned = 0;      ///< arena of one step's blocks as planned by the solver
  std::size_t lower_bound = 0;  ///< no plan of the step can use less
  std::size_t live_in = 0;      ///< largest live_in among the group's steps
};

/// Where reserved-but-unused memory sits at the moment reserved memory peaks.
struct ReservedBreakdown {
  std::size_t reserved = 0;
  std::size_t live = 0;
  std::size_t in_empty_ranges = 0;   ///< reserved ranges holding no live block (cached)
  std::size_t dead_cached = 0;       ///< of which never used again by a later allocation
  std::size_t oversize = 0;          ///< free bytes in ranges holding one block much smaller
  std::size_t fragmented = 0;        ///< free bytes between live blocks of shared ranges
  std::size_t largest_free_gap = 0;  ///< largest contiguous free piece inside reserved ranges
  std::size_t ranges = 0;            ///< contiguous reserved ranges at that moment
};

struct Advice {
  std::string topic;    ///< "static-arena", "buckets", "reserved", "static-pool", "trace"
  std::string message;  ///< what was found and what to do, in a sentence or three
  std::vector<std::string> config;  ///< suggested `key:value` settings, if any
};

struct Analysis {
  std::string name;
  // Summary.
  std::size_t events = 0, allocs = 0, frees = 0, marks = 0, ooms = 0, device_events = 0;
  std::size_t distinct_sizes = 0;
  std::vector<SizeBin> histogram;
  std::size_t bytes_allocated = 0;
  std::size_t peak_live = 0;
  std::size_t peak_live_event = 0;  ///< index of the event where peak_live is first reached
  std::uint64_t peak_live_time_ns = 0;
  std::optional<std::size_t> peak_reserved;  ///< known when the trace has segment/map events
  std::size_t never_freed = 0, never_freed_bytes = 0;
  std::size_t threads = 0;
  double duration_s = 0;
  double allocs_per_s = 0;
  double bytes_per_s = 0;
  /// Simulated high-water mark of a best-fit static pool (256-byte aligned) replaying the trace:
  /// what a static pool needs, fragmentation included.
  std::size_t best_fit_pool = 0;
  // Steps.
  bool steps_from_marks = false;
  plan::Period period;  ///< over the alloc/free events (marks excluded); indices are event ranks
  std::size_t period_start_event = 0;  ///< period.start as an index into Trace::events
  std::vector<StepStats> steps;
  std::vector<StepGroup> groups;
  std::string solver;  ///< solver used for `planned`
  std::optional<ReservedBreakdown> reserved;
  // Diagnosis.
  std::vector<Advice> advice;
  std::vector<std::string> skipped;  ///< what reading and matching skipped, one line each
};

struct AnalyzeOptions {
  /// Solver for one step's plan ("" = the best of the heuristics in the registry).
  std::string solver;
  double time_limit_s = 2.0;
  /// Reserved / peak live above this counts as "reserved greatly exceeds live".
  double reserved_ratio = 1.25;
};

Analysis analyze(const Trace& trace, const AnalyzeOptions& options = {});

std::string to_text(const Analysis& analysis);
nlohmann::json to_json(const Analysis& analysis);

/// High-water mark of a best-fit, coalescing pool with `alignment` replaying the blocks in
/// order (frees of unknown blocks ignored). This is what a static pool of that policy needs.
std::size_t simulate_best_fit_pool(const Trace& trace, const Blocks& blocks,
                                   std::size_t alignment = 256);

/// The smallest arena among the named solver (or, when empty, every heuristic registered)
/// for `problem`; sets `solver_used`. Returns 0 for an empty problem.
std::size_t plan_arena(const plan::Problem& problem, const std::string& solver, double time_limit_s,
                       std::string* solver_used = nullptr);

}  // namespace modelmem::trace
