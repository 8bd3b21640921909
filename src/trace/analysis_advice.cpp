// analyze(), chapter 4: advice. Each piece of advice with a setting carries one complete config
// string (what `modelmem config` accepts and `modelmem replay --config` runs), and the trace is
// replayed through that string: a size comes from the smallest that replays with no OOM, plus
// the stated margin, and the advice says what the replay measured.
#include <fmt/format.h>

#include <algorithm>

#include "analysis_internal.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::trace::detail {

AdviceCheck replay_config(const Trace& trace, const std::string& config,
                          std::size_t device_capacity) {
  auto allocator = allocator_from_config(config, replay_device(trace, device_capacity));
  ReplayOptions options;
  options.touch = false;
  ReplayResult r = replay(trace, *allocator, options);
  return AdviceCheck{r.ooms, r.peak_reserved, r.peak_live};
}

std::string static_config(std::size_t mib) {
  return fmt::format("strategy:static,static_pool_mb:{}", mib);
}

namespace {

std::string planned_config(const Analysis& a, std::size_t plans) {
  std::string s =
      fmt::format("strategy:planned,planned_steps:{}", a.steps_from_marks ? "marked" : "auto");
  if (plans > 4) s += fmt::format(",planned_max_plans:{}", plans);  // 4 is the default
  return s;
}

std::string checked_text(const AdviceCheck& c) {
  return fmt::format("replayed through this configuration: peak reserved {}, {} OOM{}",
                     format_bytes(c.peak_reserved), c.ooms, c.ooms == 1 ? "" : "s");
}

// Adds `advice` with `config` when the replay of the trace through it has no OOM; otherwise
// the advice keeps its message, says what failed, and carries no config string.
void add_checked(const State& state, Analysis& a, const AnalyzeOptions& options, Advice advice,
                 std::string config) {
  if (options.check_advice) {
    AdviceCheck check;
    try {
      check = replay_config(state.trace, config, options.device_capacity);
    } catch (const Error& e) {  // e.g. the host refused the memory: say so, advise nothing
      advice.message += fmt::format(" ({} could not be replayed here: {})", config, e.what());
      a.advice.push_back(std::move(advice));
      return;
    }
    advice.message += " (" + checked_text(check) + ")";
    if (check.ooms > 0) {
      advice.message += fmt::format("; {} is not advised", config);
      config.clear();
    }
    advice.check = check;
  }
  advice.config = std::move(config);
  a.advice.push_back(std::move(advice));
}

void advise_repeating_step(const State& state, Analysis& a, const AnalyzeOptions& options) {
  // The largest group of identical steps decides whether the program repeats.
  const StepGroup* main_group = nullptr;
  for (const StepGroup& g : a.groups)
    if (main_group == nullptr || g.steps.size() > main_group->steps.size()) main_group = &g;
  const bool repeats = main_group != nullptr && main_group->steps.size() >= 2;
  if (repeats && a.groups.size() == 1) {
    const std::size_t arena = checked_add(main_group->planned, main_group->live_in, "arena size");
    const std::string how =
        a.steps_from_marks
            ? fmt::format("{} of {} marked steps are identical", main_group->steps.size(),
                          a.steps.size())
            : fmt::format(
                  "the allocation sequence repeats every {} events from "
                  "event {} ({} match over {} repeats)",
                  a.period.length, a.period_start_event, percent(a.period.match), a.period.repeats);
    Advice advice{
        "static-arena",
        fmt::format("Repeating step: {}. Use the profile-guided planned arena (strategy:planned, "
                    "steps {}): one step planned with {} needs {} (lower bound {}, {} above it), "
                    "plus {} live across steps = {}, against a peak of {} live and {} for a "
                    "best-fit pool",
                    how, a.steps_from_marks ? "from the marks" : "found from the repeating pattern",
                    a.solver, format_bytes(main_group->planned),
                    format_bytes(main_group->lower_bound),
                    percent(main_group->lower_bound == 0
                                ? 0.0
                                : ratio(main_group->planned, main_group->lower_bound) - 1.0),
                    format_bytes(main_group->live_in), format_bytes(arena),
                    format_bytes(a.peak_live), format_bytes(a.best_fit_pool)),
        {},
        std::nullopt};
    add_checked(state, a, options, std::move(advice), planned_config(a, 1));
  } else if (a.period.found && !a.steps_from_marks) {
    // Covered above through the period windows; nothing more to say.
  } else if (main_group != nullptr && a.groups.size() == 1) {
    a.advice.push_back({"static-arena",
                        "Only one step in the trace: record at least two to see whether it "
                        "repeats before planning an arena for it.",
                        {},
                        std::nullopt});
  } else if (a.groups.empty()) {
    a.advice.push_back(
        {"static-arena",
         "No repeating step found (no step marks and no periodic allocation sequence): a "
         "planned arena needs a repeating pattern; mark steps with begin_step()/end_step() if "
         "the program has them.",
         {},
         std::nullopt});
  }
}

void advise_buckets(const State& state, Analysis& a, const AnalyzeOptions& options) {
  if (a.groups.size() < 2) return;
  // Steps differ: an input dimension varies. Buckets: one per distinct scale observed.
  std::vector<const StepGroup*> sorted;
  for (const StepGroup& g : a.groups) sorted.push_back(&g);
  std::sort(sorted.begin(), sorted.end(), [](const StepGroup* x, const StepGroup* y) {
    return x->scale != y->scale ? x->scale < y->scale : x->planned < y->planned;
  });
  // Groups with (almost) the same scale fall in one bucket sized for the largest of them.
  struct Bucket {
    double scale;
    std::size_t arena;
    std::size_t steps;
  };
  std::vector<Bucket> buckets;
  for (const StepGroup* g : sorted) {
    std::size_t arena = checked_add(g->planned, g->live_in, "arena size");
    if (!buckets.empty() && g->scale <= buckets.back().scale * 1.05) {
      buckets.back().arena = std::max(buckets.back().arena, arena);
      buckets.back().steps += g->steps.size();
      buckets.back().scale = std::max(buckets.back().scale, g->scale);
    } else {
      buckets.push_back({g->scale, arena, g->steps.size()});
    }
  }
  std::string list;
  for (const Bucket& b : buckets)
    list += fmt::format("{}x{:g} -> {} ({} step{})", list.empty() ? "" : "; ", b.scale,
                        format_bytes(b.arena), b.steps, b.steps == 1 ? "" : "s");
  std::string boundaries;
  for (const Bucket& b : buckets)
    boundaries += fmt::format("{}{:g}", boundaries.empty() ? "" : ",", b.scale);
  std::size_t largest = 0;
  for (const Bucket& b : buckets) largest = std::max(largest, b.arena);
  Advice advice{
      "buckets",
      fmt::format("Sizes vary with an input dimension: {} kinds of step among {} (the most "
                  "block sizes scale {}). Plan one arena per bucket and round the "
                  "dimension up to the next boundary; boundaries (relative to the smallest "
                  "step): {}. Arena per bucket: {}. One arena of {} serves every bucket; the "
                  "planned arena (strategy:planned) keeps one plan per kind of step",
                  a.groups.size(), a.steps.size(),
                  fmt::format("x{:g} to x{:g}", buckets.front().scale, buckets.back().scale),
                  boundaries, list, format_bytes(largest)),
      {},
      std::nullopt};
  add_checked(state, a, options, std::move(advice), planned_config(a, a.groups.size()));
}

void advise_reserved(const State& state, Analysis& a, const AnalyzeOptions& options) {
  if (!a.reserved) {
    if (a.allocs > 0)
      a.skipped.push_back(
          "reserved memory unknown: the trace has no segment_alloc/map events (recorded above "
          "the allocator); `modelmem replay` measures reserved memory for each strategy");
    return;
  }
  const ReservedBreakdown& r = *a.reserved;
  const double over_peak = ratio(r.reserved, a.peak_live);
  if (over_peak < options.reserved_ratio) return;
  struct Cause {
    std::size_t bytes;
    std::string text;
    std::vector<std::string> keys;
  };
  std::vector<Cause> causes = {
      {r.fragmented,
       fmt::format("fragmentation: {} free between live blocks of shared segments (largest "
                   "free piece {}; without expandable segments, max_split_size_mb:{} stops "
                   "splitting larger blocks)",
                   format_bytes(r.fragmented), format_bytes(r.largest_free_gap),
                   std::max<std::size_t>(21, ceil_mib(r.largest_free_gap))),
       {"expandable_segments:True"}},
      {r.oversize,
       fmt::format("oversize blocks: {} unused in segments holding one much smaller block",
                   format_bytes(r.oversize)),
       {"expandable_segments:True", "roundup_power2_divisions:4"}},
      {r.dead_cached,
       fmt::format("caching of dead shapes: {} in cached segments no later allocation uses",
                   format_bytes(r.dead_cached)),
       {"garbage_collection_threshold:0.6"}},
      {r.in_empty_ranges - r.dead_cached,
       fmt::format("cached free segments: {} held for reuse",
                   format_bytes(r.in_empty_ranges - r.dead_cached)),
       {}},
  };
  // Recorded where the device has no virtual memory (`modelmem run`'s host memory marks its
  // traces so): expandable segments would fall back to fixed-size segments there, so they are
  // not advised; the causes are still named.
  bool no_vm = false;
  for (const TraceEvent& e : state.trace.events)
    no_vm = no_vm || (e.kind == alloc::EventKind::kMark && e.label == "device_no_vmm");
  if (no_vm)
    for (Cause& c : causes) std::erase(c.keys, std::string("expandable_segments:True"));
  std::stable_sort(causes.begin(), causes.end(),
                   [](const Cause& x, const Cause& y) { return x.bytes > y.bytes; });
  std::string text;
  std::vector<std::string> keys;
  for (const Cause& c : causes) {
    if (c.bytes == 0) continue;
    text += fmt::format("{}{} ({} of the unused)", text.empty() ? "" : "; ", c.text,
                        percent(ratio(c.bytes, r.unused)));
    for (const std::string& k : c.keys)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  if (text.empty()) text = "no single cause (the reserved ranges are fully used)";
  if (no_vm)
    text +=
        "; expandable segments are not advised: the trace was recorded on a device without "
        "virtual memory, where they fall back to fixed-size segments";
  Advice advice{"reserved",
                fmt::format("Reserved memory peaks at {} with {} of it live at that moment and {} "
                            "unused; that is {:.2f}x the trace's peak live {}. Causes, largest "
                            "first: {}",
                            format_bytes(r.reserved), format_bytes(r.live), format_bytes(r.unused),
                            over_peak, format_bytes(a.peak_live), text),
                {},
                std::nullopt};
  if (keys.empty()) {
    advice.message += ".";
    a.advice.push_back(std::move(advice));
    return;
  }
  std::string config = "strategy:caching";
  for (const std::string& k : keys) config += "," + k;
  add_checked(state, a, options, std::move(advice), config);
}

// The static-pool advice for MindSpore's own pool (a trace from its memory tracker): what each
// value is, and that MindSpore's pool itself was not run.
void add_mindspore(const State& state, Advice& advice, std::size_t need, std::size_t advised,
                   std::size_t margin_pct, bool checked) {
  if (state.trace.format != "mindspore") return;
  advice.mindspore = mindspore_set_memory(need, advised);
  advice.message += fmt::format(
      ". For MindSpore's own pool: init_size = that need ({} MiB), max_size = the need + the "
      "{}% margin ({} MiB), increase_size = the difference, in MindSpore's GB (2^30 bytes); {}",
      need / kMiB, margin_pct, advised / kMiB,
      checked ? "the sizes are modelmem's best-fit static pool replaying the tracker's blocks, "
                "which the pluggable allocator (modelmem_ms_alloc) serves with the config "
                "string; MindSpore's pool itself was not run here"
              : "not checked by a replay, and MindSpore's pool itself was not run here");
}

void advise_static_pool(const State& state, Analysis& a, const AnalyzeOptions& options) {
  if (a.allocs == 0) return;
  const std::size_t margin_pct = static_cast<std::size_t>(options.margin * 100.0 + 0.5);
  if (!options.check_advice) {
    // Without replays, the simulated best-fit pool stands in for the replayed size.
    const std::size_t need = ceil_mib(a.best_fit_pool);
    const std::size_t advised =
        ceil_mib(a.best_fit_pool + static_cast<std::size_t>(options.margin * a.best_fit_pool));
    a.static_pool_bytes = advised * kMiB;
    Advice advice{
        "static-pool",
        fmt::format("A best-fit pool replaying this trace reaches {} (about {} MiB; peak live "
                    "{}); with a {}% margin for inputs not in the trace: {} MiB (not checked "
                    "by a replay)",
                    format_bytes(a.best_fit_pool), need, format_bytes(a.peak_live), margin_pct,
                    advised),
        static_config(advised), std::nullopt};
    add_mindspore(state, advice, need * kMiB, advised * kMiB, margin_pct, false);
    a.advice.push_back(std::move(advice));
    return;
  }
  StaticPoolSize size;
  try {
    size = advised_static_pool(state.trace, options.margin, options.device_capacity);
  } catch (const Error& e) {  // e.g. the host refused a pool that large: say so, advise nothing
    a.advice.push_back(
        {"static-pool",
         fmt::format("A best-fit pool replaying this trace reaches {} (peak live {}); a static "
                     "pool could not be replayed here to size it: {}.",
                     format_bytes(a.best_fit_pool), format_bytes(a.peak_live), e.what()),
         {},
         std::nullopt});
    return;
  }
  const std::size_t need = size.need_bytes / kMiB, advised = size.advised_bytes / kMiB;
  const AdviceCheck check = size.check;
  a.static_pool_bytes = size.advised_bytes;
  Advice advice{
      "static-pool",
      fmt::format("A static pool (strategy:static, best fit) needs {} MiB to replay this trace "
                  "with no OOM (peak live {}, the simulated best-fit pool {}); with a {}% "
                  "margin for inputs not in the trace: {} MiB{} ({})",
                  need, format_bytes(a.peak_live), format_bytes(a.best_fit_pool), margin_pct,
                  advised,
                  size.cut_to_device ? ", all the device holds (the margin cut to fit)" : "",
                  checked_text(check)),
      static_config(advised), check};
  add_mindspore(state, advice, size.need_bytes, size.advised_bytes, margin_pct, true);
  a.advice.push_back(std::move(advice));
}

}  // namespace

void advise(const State& state, Analysis& a, const AnalyzeOptions& options) {
  if (a.events == 0) {
    a.advice.push_back(
        {"trace", "The trace holds no events: nothing to analyse.", {}, std::nullopt});
    return;
  }
  if (state.trace.dropped > 0)
    a.advice.push_back(
        {"trace",
         fmt::format("The recorder dropped {} events: peaks and steps below undercount. Record "
                     "again with a larger ring buffer.",
                     state.trace.dropped),
         {},
         std::nullopt});
  advise_repeating_step(state, a, options);
  advise_buckets(state, a, options);
  advise_reserved(state, a, options);
  advise_static_pool(state, a, options);
  for (Advice& advice : a.advice)
    if (!advice.message.empty() && advice.message.back() != '.') advice.message += '.';
}

}  // namespace modelmem::trace::detail

namespace modelmem::trace {

namespace {

// Whole MiB in MindSpore's GB (2^30 bytes), exactly: MIB/1024 has at most 10 decimals.
std::string gb(std::size_t bytes) {
  std::string s = fmt::format("{:.10f}", static_cast<double>(bytes / detail::kMiB) / 1024.0);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + "GB";
}

}  // namespace

std::string mindspore_set_memory(std::size_t init_bytes, std::size_t max_bytes) {
  if (init_bytes == 0 || init_bytes % detail::kMiB != 0 || max_bytes % detail::kMiB != 0 ||
      max_bytes < init_bytes)
    throw InvalidInput(fmt::format("set_memory: sizes {} and {} must be whole MiB, 0 < init <= max",
                                   init_bytes, max_bytes));
  std::string s = "mindspore.runtime.set_memory(init_size=\"" + gb(init_bytes) + "\"";
  if (max_bytes > init_bytes) s += ", increase_size=\"" + gb(max_bytes - init_bytes) + "\"";
  return s + ", max_size=\"" + gb(max_bytes) + "\")";
}

StaticPoolSize advised_static_pool(const Trace& trace, double margin, std::size_t device_capacity) {
  using detail::ceil_mib;
  using detail::kMiB;
  const Blocks blocks = match_blocks(trace);
  const std::size_t peak_live = peak_live_bytes(trace, blocks);
  if (peak_live == 0) return {};
  auto check = [&](std::size_t mib) {
    return detail::replay_config(trace, detail::static_config(mib), device_capacity);
  };
  // Below the peak live bytes nothing fits; the best-fit simulation is the first guess.
  std::size_t low = std::max<std::size_t>(1, ceil_mib(peak_live));
  std::size_t high = std::max(low, ceil_mib(simulate_best_fit_pool(trace, blocks)));
  while (check(high).ooms > 0) {
    low = high + 1;
    high = checked_add(high, high, "static pool size");
  }
  while (low < high) {  // check(high) has no OOM; below `low` every size tried had one
    const std::size_t mid = low + (high - low) / 2;
    if (check(mid).ooms == 0)
      high = mid;
    else
      low = mid + 1;
  }
  StaticPoolSize size;
  size.need_bytes = high * kMiB;
  std::size_t advised = ceil_mib(checked_add(
      size.need_bytes, static_cast<std::size_t>(margin * static_cast<double>(size.need_bytes)),
      "static pool size"));
  // A stated device bounds the margin: the largest whole MiB it holds, when the need fits.
  if (auto device = replay_device(trace, device_capacity)) {
    const std::size_t fits = device->memory_info().total / kMiB;
    if (advised > fits && fits >= high) {
      advised = fits;
      size.cut_to_device = true;
    }
  }
  size.check = check(advised);
  while (size.check.ooms > 0) {  // a larger best-fit pool can place blocks differently
    ++advised;
    size.check = check(advised);
  }
  size.advised_bytes = advised * kMiB;
  return size;
}

}  // namespace modelmem::trace
