// `modelmem analyze`: what a trace says about a program's memory, and what to do about it.
// A summary (sizes, peaks, rates), the repeating step, varying input dimensions, why reserved
// memory exceeds live memory, and static pool sizes, each as concrete advice with a complete
// config string that the trace has been replayed through. analyze() is a pure function of the
// trace (it runs planning heuristics on one step of each kind and replays the trace through each
// advised configuration on host memory, untouched); thread-compatible. Cost: O(n log n) plus the
// solver's time on one step plus about log2(pool MiB) + 4 replays. The chapters are in
// src/trace/analysis_*.cpp; the text and JSON renderers in analysis_render.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "modelmem/plan/period.hpp"
#include "modelmem/trace/snapshot.hpp"
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
/// The parts add up: reserved = live + unused, unused = in_empty_ranges + oversize + fragmented.
struct ReservedBreakdown {
  std::size_t reserved = 0;          ///< bytes of the reserved ranges at that moment
  std::size_t live = 0;              ///< bytes of live blocks inside them
  std::size_t unused = 0;            ///< reserved bytes no live block covers
  std::size_t live_total = 0;        ///< every live byte of the trace at that moment
  std::size_t in_empty_ranges = 0;   ///< reserved ranges holding no live block (cached)
  std::size_t dead_cached = 0;       ///< of which never used again by a later allocation
  std::size_t oversize = 0;          ///< free bytes in ranges holding one block much smaller
  std::size_t fragmented = 0;        ///< free bytes between live blocks of shared ranges
  std::size_t largest_free_gap = 0;  ///< largest contiguous free piece inside reserved ranges
  std::size_t ranges = 0;            ///< contiguous reserved ranges at that moment
};

/// The trace replayed through an advised config string (host memory, untouched).
struct AdviceCheck {
  std::size_t ooms = 0;
  std::size_t peak_reserved = 0;
  std::size_t peak_live = 0;
};

struct Advice {
  std::string topic;    ///< "static-arena", "buckets", "reserved", "static-pool", "trace"
  std::string message;  ///< what was found and what to do, in a sentence or three
  /// A complete config string (`modelmem config` accepts it; MODELMEM_ALLOC_CONF syntax), or
  /// empty when the advice has no setting. Never one whose replay had an OOM.
  std::string config;
  std::optional<AdviceCheck> check;  ///< the replay through `config`, when one ran
  /// For a trace from MindSpore's memory tracker (Trace::format "mindspore"), the static-pool
  /// advice as MindSpore's own setting: mindspore_set_memory() of the need and the advised size.
  std::string mindspore = {};
};

struct Analysis {
  std::string name;
  // Summary.
  std::size_t events = 0, allocs = 0, frees = 0, marks = 0, ooms = 0, device_events = 0;
  std::size_t distinct_sizes = 0;
  std::vector<SizeBin> histogram;
  std::size_t bytes_allocated = 0;
  std::size_t peak_live = 0;
  std::size_t peak_live_event = 0;      ///< index of the event where peak_live is first reached
  std::uint64_t start_time_ns = 0;      ///< the first event's time_ns; times below count from it
  std::uint64_t peak_live_time_ns = 0;  ///< since the first event
  std::optional<std::size_t> peak_reserved;  ///< known when the trace has segment/map events
  std::size_t never_freed = 0, never_freed_bytes = 0;
  std::size_t threads = 0;
  double duration_s = 0;
  double allocs_per_s = 0;
  double bytes_per_s = 0;
  /// Simulated high-water mark of a best-fit static pool (256-byte aligned) replaying the trace:
  /// what a static pool needs, fragmentation included.
  std::size_t best_fit_pool = 0;
  /// The advised static pool (whole MiB, margin included, checked by a replay when
  /// AnalyzeOptions::check_advice), 0 when the trace allocates nothing.
  std::size_t static_pool_bytes = 0;
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
  /// A memory snapshot's pools and PyTorch's totals at the snapshot (Trace::snapshot).
  std::shared_ptr<const SnapshotState> snapshot;
};

/// The steps of a trace as analyze() finds them: the marked steps (step_begin / step_end), else
/// the repeats of the alloc/free sequence's period. `modelmem trace --format problem --step N`
/// converts the same steps `analyze` lists.
struct StepWindows {
  std::vector<Window> windows;  ///< empty when the trace has neither marks nor a period
  bool from_marks = false;
  plan::Period period;  ///< over the alloc/free events (marks excluded); indices are event ranks
  std::size_t period_start_event = 0;  ///< period.start as an index into Trace::events
};
StepWindows find_step_windows(const Trace& trace, const Blocks& blocks);

struct AnalyzeOptions {
  /// Solver for one step's plan ("" = the best of the heuristics in the registry).
  std::string solver;
  double time_limit_s = 2.0;
  /// Reserved / peak live above this counts as "reserved greatly exceeds live".
  double reserved_ratio = 1.25;
  /// Replay the trace through every advised config string (and size the static pool by
  /// replays); off: the simulated best-fit pool sizes it, and no advice is checked.
  bool check_advice = true;
  /// Added to a replayed size for inputs the trace does not hold.
  double margin = 0.10;
  /// A snapshot's replays run on its device, simulated with this capacity (`--device-memory`;
  /// 0: not stated, see replay_device in replay.hpp).
  std::size_t device_capacity = 0;
};

Analysis analyze(const Trace& trace, const AnalyzeOptions& options = {});
/// `modelmem analyze FILE`: read_trace(path, read), then analyze(). Throws InvalidInput for a
/// bad file (see read_trace).
Analysis analyze_file(const std::filesystem::path& path, const ReadOptions& read = {},
                      const AnalyzeOptions& options = {});

/// The report `modelmem analyze` prints, and its `--json` form (docs/trace-format.md).
std::string to_text(const Analysis& analysis);
nlohmann::json to_json(const Analysis& analysis);
/// `modelmem analyze --json` in full: to_json(analysis) with the allocation sites of the trace
/// (allocation_sites, snapshot.hpp) under "sites"; Python's Analysis.to_dict() is the same.
nlohmann::json to_json(const Analysis& analysis, const std::vector<AllocationSite>& sites);

/// High-water mark of a best-fit, coalescing pool with `alignment` replaying the blocks in
/// order (frees of unknown blocks ignored). This is what a static pool of that policy needs.
std::size_t simulate_best_fit_pool(const Trace& trace, const Blocks& blocks,
                                   std::size_t alignment = 256);

/// A static pool sized by replays: the smallest whole-MiB `strategy:static` pool through which
/// the trace replays with no OOM (need), that plus `margin` rounded up to MiB (advised), and the
/// replay through the advised size (0 OOMs: it is grown a MiB at a time until so). All zero
/// when the trace allocates nothing. analyze's static-pool advice and `replay --strategy static`
/// use it.
struct StaticPoolSize {
  std::size_t need_bytes = 0;
  std::size_t advised_bytes = 0;
  AdviceCheck check;
  /// The margin was cut so that the pool fits the snapshot's device (`device_capacity`).
  bool cut_to_device = false;
};
/// A snapshot's replays run on its simulated device of `device_capacity` (replay_device); the
/// margin is cut where the advised pool would not fit it.
StaticPoolSize advised_static_pool(const Trace& trace, double margin = 0.10,
                                   std::size_t device_capacity = 0);

/// `mindspore.runtime.set_memory(init_size="A", increase_size="B", max_size="C")` for a pool
/// of `init_bytes` that may grow once to `max_bytes` (whole MiB each): A = init_bytes, C =
/// max_bytes, B = their difference (left out when 0), in MindSpore's unit GB = 2^30 bytes
/// (kGBToByte), written exactly (a MiB is 0.0009765625GB) in the "xxGB" form set_memory
/// accepts.
std::string mindspore_set_memory(std::size_t init_bytes, std::size_t max_bytes);

/// The smallest arena among the named solver (or, when empty, every heuristic registered)
/// for `problem`; sets `solver_used`. Returns 0 for an empty problem.
std::size_t plan_arena(const plan::Problem& problem, const std::string& solver, double time_limit_s,
                       std::string* solver_used = nullptr);

}  // namespace modelmem::trace
