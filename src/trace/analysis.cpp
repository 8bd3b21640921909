#include "modelmem/trace/analysis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "modelmem/core/error.hpp"
#include "modelmem/core/free_list.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::trace {

namespace {

using alloc::EventKind;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t ceil_mib(std::size_t bytes) {
  return (bytes + kMiB - 1) / kMiB;
}

std::string percent(double fraction) {
  return fmt::format("{:.1f}%", 100.0 * fraction);
}

// Reserved address ranges, kept merged: segments and mapped pages as the allocator reported them.
class RangeSet {
 public:
  void add(std::uintptr_t begin, std::uintptr_t end) {
    if (begin >= end) return;
    remove(begin, end);
    auto next = ranges_.lower_bound(begin);
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->second == begin) {
        begin = prev->first;
        ranges_.erase(prev);
      }
    }
    if (next != ranges_.end() && next->first == end) {
      end = next->second;
      ranges_.erase(next);
    }
    ranges_[begin] = end;
  }
  void remove(std::uintptr_t begin, std::uintptr_t end) {
    if (begin >= end) return;
    auto it = ranges_.lower_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second > begin) --it;
    while (it != ranges_.end() && it->first < end) {
      auto [b, e] = *it;
      it = ranges_.erase(it);
      if (b < begin) ranges_[b] = begin;
      if (e > end) {
        ranges_[end] = e;
        break;
      }
    }
  }
  const std::map<std::uintptr_t, std::uintptr_t>& ranges() const { return ranges_; }

 private:
  std::map<std::uintptr_t, std::uintptr_t> ranges_;
};

bool is_alloc_or_free(EventKind k) {
  return k == EventKind::kAlloc || k == EventKind::kFree;
}

std::uint64_t step_signature(const Trace& trace, const Blocks& blocks, Window w) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = w.begin; i < w.end; ++i) {
    const TraceEvent& e = trace.events[i];
    if (!is_alloc_or_free(e.kind)) continue;
    std::size_t size = e.size;
    if (e.kind == EventKind::kFree) {
      std::size_t b = blocks.block_of_event[i];
      size = b == kNever ? 0 : blocks.blocks[b].size;
    }
    h = (h ^ (size * 2 + (e.kind == EventKind::kFree ? 1 : 0))) * 1099511628211ULL;
  }
  return h;
}

}  // namespace

std::size_t simulate_best_fit_pool(const Trace& trace, const Blocks& blocks,
                                   std::size_t alignment) {
  core::FreeList free;  // the shared best-fit coalescing free list
  std::vector<std::pair<std::size_t, std::size_t>> placed(blocks.blocks.size(), {0, 0});
  std::size_t top = 0;
  std::size_t high = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    std::size_t b = blocks.block_of_event[i];
    if (b == kNever) continue;
    const TraceEvent& e = trace.events[i];
    if (e.kind == EventKind::kAlloc) {
      std::size_t size = checked_align_up(blocks.blocks[b].size, alignment, "block size");
      std::size_t offset;
      if (auto fit = free.allocate(size)) {
        offset = *fit;
      } else if (auto last = free.last(); last && last->end() == top) {
        // Grow the free block at the top instead of leaving it behind.
        offset = last->offset;
        free.erase(offset);
        top = offset + size;
      } else {
        offset = top;
        top = checked_add(top, size, "pool size");
      }
      high = std::max(high, top);
      placed[b] = {offset, size};
    } else if (e.kind == EventKind::kFree) {
      if (blocks.blocks[b].free_index != i) continue;
      free.release(placed[b].first, placed[b].second);
    }
  }
  return high;
}

std::size_t plan_arena(const plan::Problem& problem, const std::string& solver, double time_limit_s,
                       std::string* solver_used) {
  if (problem.buffers.empty()) {
    if (solver_used != nullptr) *solver_used = solver;
    return 0;
  }
  std::vector<std::string> names;
  if (!solver.empty()) {
    names.push_back(solver);
  } else {
    for (const std::string& n : plan::solver_names())
      if (n != "exact" && n != "best" && n != "naive") names.push_back(n);
  }
  plan::SolveOptions options;
  options.time_limit = std::chrono::duration<double>(time_limit_s);
  std::size_t best = 0;
  std::string best_name;
  for (const std::string& n : names) {
    plan::SolveResult r = plan::solve(problem, n, options);
    if (r.plan && (best == 0 || r.plan->arena_size < best)) {
      best = r.plan->arena_size;
      best_name = n;
    }
  }
  if (solver_used != nullptr) *solver_used = best_name;
  return best;
}

Analysis analyze(const Trace& trace, const AnalyzeOptions& options) {
  Analysis a;
  a.name = trace.name;
  a.skipped = trace.warnings;
  const Blocks blocks = match_blocks(trace);
  a.skipped.insert(a.skipped.end(), blocks.warnings.begin(), blocks.warnings.end());
  const auto& events = trace.events;
  a.events = events.size();

  // ---- summary: one pass, with live bytes after each event
  std::vector<std::size_t> live_after(events.size(), 0);
  std::map<std::size_t, std::size_t> size_counts;
  std::unordered_set<std::uint64_t> threads;
  RangeSet reserved_ranges;
  std::size_t reserved = 0;
  std::size_t peak_reserved = 0;
  std::size_t peak_reserved_event = kNever;
  std::size_t live = 0;
  std::uint64_t first_time = 0, last_time = 0;
  bool any_time = false;
  // A block whose free was lost is closed by the next alloc at its address (match_blocks): its
  // bytes stop being live there.
  std::vector<std::size_t> closed_by_alloc(events.size(), 0);
  for (const Block& b : blocks.blocks)
    if (b.free_index != kNever && events[b.free_index].kind == EventKind::kAlloc)
      closed_by_alloc[b.free_index] += b.size;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (!any_time) first_time = e.time_ns;
    any_time = true;
    last_time = std::max(last_time, e.time_ns);
    switch (e.kind) {
      case EventKind::kAlloc:
        live -= closed_by_alloc[i];
        ++a.allocs;
        threads.insert(e.thread);
        ++size_counts[e.size];
        a.bytes_allocated = checked_add(a.bytes_allocated, e.size, "bytes allocated");
        live += e.size;
        if (live > a.peak_live) {
          a.peak_live = live;
          a.peak_live_event = i;
          a.peak_live_time_ns = e.time_ns;
        }
        break;
      case EventKind::kFree: {
        ++a.frees;
        threads.insert(e.thread);
        std::size_t b = blocks.block_of_event[i];
        if (b != kNever) live -= blocks.blocks[b].size;
        break;
      }
      case EventKind::kMark:
        ++a.marks;
        break;
      case EventKind::kOom:
        ++a.ooms;
        break;
      case EventKind::kSegmentAlloc:
      case EventKind::kMap:
        ++a.device_events;
        reserved_ranges.add(e.address, e.address + e.size);
        reserved += e.size;
        if (reserved > peak_reserved) {
          peak_reserved = reserved;
          peak_reserved_event = i;
        }
        break;
      case EventKind::kSegmentFree:
      case EventKind::kUnmap:
        ++a.device_events;
        reserved_ranges.remove(e.address, e.address + e.size);
        reserved = reserved >= e.size ? reserved - e.size : 0;
        break;
    }
    live_after[i] = live;
  }
  a.threads = threads.size();
  a.distinct_sizes = size_counts.size();
  for (const auto& [size, count] : size_counts) {
    std::size_t low = size == 0 ? 0 : std::bit_floor(size);
    if (a.histogram.empty() || a.histogram.back().low != low)
      a.histogram.push_back(SizeBin{low, low == 0 ? 1 : low * 2, 0, 0});
    a.histogram.back().count += count;
    a.histogram.back().bytes += size * count;
  }
  for (const Block& b : blocks.blocks)
    if (b.free_index == kNever) {
      ++a.never_freed;
      a.never_freed_bytes += b.size;
    }
  a.duration_s = any_time ? static_cast<double>(last_time - first_time) * 1e-9 : 0.0;
  if (a.duration_s > 0) {
    a.allocs_per_s = static_cast<double>(a.allocs) / a.duration_s;
    a.bytes_per_s = static_cast<double>(a.bytes_allocated) / a.duration_s;
  }
  if (a.device_events > 0) a.peak_reserved = peak_reserved;
  a.best_fit_pool = simulate_best_fit_pool(trace, blocks);

  // ---- the repeating step
  std::vector<std::uint64_t> tokens;
  std::vector<std::size_t> event_of_rank;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (!is_alloc_or_free(e.kind)) continue;
    std::size_t size = e.size;
    if (e.kind == EventKind::kFree) {
      std::size_t b = blocks.block_of_event[i];
      size = b == kNever ? 0 : blocks.blocks[b].size;
    }
    tokens.push_back(plan::period_token({e.kind == EventKind::kFree, size}));
    event_of_rank.push_back(i);
  }
  a.period = plan::detect_period(std::span<const std::uint64_t>(tokens));
  if (a.period.found) a.period_start_event = event_of_rank[a.period.start];

  std::vector<Window> windows = marked_steps(trace);
  a.steps_from_marks = !windows.empty();
  if (windows.empty() && a.period.found) {
    for (std::size_t k = 0; k < a.period.repeats; ++k) {
      std::size_t r0 = a.period.start + k * a.period.length;
      std::size_t r1 = r0 + a.period.length;
      windows.push_back(
          {event_of_rank[r0], r1 < event_of_rank.size() ? event_of_rank[r1] : events.size()});
    }
  }
  std::unordered_map<std::uint64_t, std::size_t> group_of_signature;
  for (const Window& w : windows) {
    StepStats s;
    s.window = w;
    std::map<std::size_t, std::size_t> counts;
    for (std::size_t i = w.begin; i < w.end; ++i) {
      const TraceEvent& e = events[i];
      if (e.kind == EventKind::kAlloc) {
        ++s.allocs;
        s.bytes_allocated += e.size;
        ++counts[e.size];
      }
      if (is_alloc_or_free(e.kind)) s.peak_live = std::max(s.peak_live, live_after[i]);
    }
    s.live_in = w.begin > 0 ? live_after[w.begin - 1] : 0;
    s.peak_live = std::max(s.peak_live, s.live_in);
    std::size_t best_count = 0;
    for (const auto& [size, count] : counts)
      if (count > best_count || (count == best_count && size > s.common_size)) {
        best_count = count;
        s.common_size = size;
      }
    if (s.allocs == 0) continue;  // an empty step says nothing about the program
    auto [it, inserted] =
        group_of_signature.try_emplace(step_signature(trace, blocks, w), a.groups.size());
    if (inserted) a.groups.emplace_back();
    s.group = it->second;
    a.groups[s.group].steps.push_back(a.steps.size());
    a.steps.push_back(s);
  }
  // Scale of each kind of step against the one allocating least: the size ratio most blocks
  // agree on (pairs of sizes vote with the smaller of their counts). Sizes that grow linearly
  // with a dimension all vote for that dimension's ratio; ratios are rounded to 1/8.
  std::vector<std::map<std::size_t, std::size_t>> size_counts_of_group(a.groups.size());
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    const Window w = a.steps[a.groups[g].steps.back()].window;
    for (std::size_t i = w.begin; i < w.end; ++i)
      if (events[i].kind == EventKind::kAlloc) ++size_counts_of_group[g][events[i].size];
  }
  // Sizes allocated equally often in every kind of step (workspaces, constants) say nothing
  // about the dimension: they do not vote.
  if (size_counts_of_group.size() >= 2) {
    std::vector<std::size_t> invariant;
    for (const auto& [size, count] : size_counts_of_group[0]) {
      bool everywhere = true;
      for (const auto& counts : size_counts_of_group) {
        auto it = counts.find(size);
        everywhere = everywhere && it != counts.end() && it->second == count;
      }
      if (everywhere) invariant.push_back(size);
    }
    for (auto& counts : size_counts_of_group)
      for (std::size_t size : invariant) counts.erase(size);
  }
  std::size_t reference = 0;
  for (std::size_t g = 1; g < a.groups.size(); ++g)
    if (a.steps[a.groups[g].steps.back()].bytes_allocated <
        a.steps[a.groups[reference].steps.back()].bytes_allocated)
      reference = g;
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    StepGroup& group = a.groups[g];
    // The last step of a group: the warm-up (allocator caches, lazy init) is behind it.
    const StepStats& rep = a.steps[group.steps.back()];
    plan::Problem problem = to_problem(trace, blocks, rep.window);
    group.lower_bound = plan::lower_bound(problem);
    group.planned = plan_arena(problem, options.solver, options.time_limit_s, &a.solver);
    for (std::size_t k : group.steps) {
      group.peak_live = std::max(group.peak_live, a.steps[k].peak_live);
      group.live_in = std::max(group.live_in, a.steps[k].live_in);
    }
    std::map<long, std::size_t> votes;  // ratio * 8 -> votes
    for (const auto& [r_size, r_count] : size_counts_of_group[reference])
      for (const auto& [g_size, g_count] : size_counts_of_group[g])
        votes[std::lround(8.0 * static_cast<double>(g_size) / static_cast<double>(r_size))] +=
            std::min(r_count, g_count);
    long best_ratio = 8;
    std::size_t best_votes = 0;
    for (const auto& [ratio, count] : votes)
      if (count > best_votes && ratio > 0) {
        best_votes = count;
        best_ratio = ratio;
      }
    group.scale = g == reference ? 1.0 : static_cast<double>(best_ratio) / 8.0;
  }

  // ---- where reserved memory goes at its peak
  if (peak_reserved_event != kNever) {
    RangeSet ranges;
    std::map<std::uintptr_t, std::size_t> live_blocks;  // address -> size
    for (std::size_t i = 0; i <= peak_reserved_event; ++i) {
      const TraceEvent& e = events[i];
      switch (e.kind) {
        case EventKind::kSegmentAlloc:
        case EventKind::kMap:
          ranges.add(e.address, e.address + e.size);
          break;
        case EventKind::kSegmentFree:
        case EventKind::kUnmap:
          ranges.remove(e.address, e.address + e.size);
          break;
        case EventKind::kAlloc: {
          std::size_t b = blocks.block_of_event[i];
          if (b != kNever && (blocks.blocks[b].free_index == kNever ||
                              blocks.blocks[b].free_index > peak_reserved_event))
            live_blocks[e.address] = e.size;
          break;
        }
        default:
          break;
      }
    }
    ReservedBreakdown r;
    r.reserved = peak_reserved;
    r.live = live_after[peak_reserved_event];
    for (const auto& [begin, end] : ranges.ranges()) {
      ++r.ranges;
      std::size_t used = 0, count = 0, largest_block = 0;
      std::uintptr_t cursor = begin;
      for (auto it = live_blocks.lower_bound(begin); it != live_blocks.end() && it->first < end;
           ++it) {
        used += it->second;
        ++count;
        largest_block = std::max(largest_block, it->second);
        if (it->first > cursor)
          r.largest_free_gap = std::max<std::size_t>(r.largest_free_gap, it->first - cursor);
        cursor = std::max<std::uintptr_t>(cursor, it->first + it->second);
      }
      if (end > cursor)
        r.largest_free_gap = std::max<std::size_t>(r.largest_free_gap, end - cursor);
      const std::size_t size = end - begin;
      const std::size_t free_bytes = size > used ? size - used : 0;
      if (count == 0) {
        r.in_empty_ranges += size;
        bool reused = false;
        for (std::size_t i = peak_reserved_event + 1; i < events.size() && !reused; ++i)
          reused = events[i].kind == EventKind::kAlloc && events[i].address >= begin &&
                   events[i].address < end;
        if (!reused) r.dead_cached += size;
      } else if (count == 1 && 2 * largest_block < size) {
        r.oversize += free_bytes;
      } else {
        r.fragmented += free_bytes;
      }
    }
    a.reserved = r;
  }

  // ---- advice
  const std::size_t pool_margin = a.best_fit_pool / 10;
  if (a.events == 0) {
    a.advice.push_back({"trace", "The trace holds no events: nothing to analyse.", {}});
    return a;
  }
  if (trace.dropped > 0)
    a.advice.push_back(
        {"trace",
         fmt::format("The recorder dropped {} events: peaks and steps below undercount. Record "
                     "again with a larger ring buffer.",
                     trace.dropped),
         {}});

  // The largest group of identical steps decides whether the program repeats.
  const StepGroup* main_group = nullptr;
  for (const StepGroup& g : a.groups)
    if (main_group == nullptr || g.steps.size() > main_group->steps.size()) main_group = &g;
  const bool repeats = main_group != nullptr && main_group->steps.size() >= 2;
  if (repeats && a.groups.size() == 1) {
    std::size_t arena = checked_add(main_group->planned, main_group->live_in, "arena size");
    std::string how =
        a.steps_from_marks
            ? fmt::format("{} of {} marked steps are identical", main_group->steps.size(),
                          a.steps.size())
            : fmt::format(
                  "the allocation sequence repeats every {} events from "
                  "event {} ({} match over {} repeats)",
                  a.period.length, a.period_start_event, percent(a.period.match), a.period.repeats);
    a.advice.push_back(
        {"static-arena",
         fmt::format("Repeating step: {}. Use the profile-guided static arena: one step planned "
                     "with {} needs {} (lower bound {}, {} above it), plus {} live across steps "
                     "= an arena of {} ({} MiB), against a peak of {} live and {} for a "
                     "best-fit pool.",
                     how, a.solver, format_bytes(main_group->planned),
                     format_bytes(main_group->lower_bound),
                     percent(main_group->lower_bound == 0
                                 ? 0.0
                                 : static_cast<double>(main_group->planned) /
                                           static_cast<double>(main_group->lower_bound) -
                                       1.0),
                     format_bytes(main_group->live_in), format_bytes(arena), ceil_mib(arena),
                     format_bytes(a.peak_live), format_bytes(a.best_fit_pool)),
         {fmt::format("static_pool_mb:{}", ceil_mib(arena))}});
  } else if (a.period.found && !a.steps_from_marks) {
    // Covered above through the period windows; nothing more to say.
  } else if (main_group != nullptr && a.groups.size() == 1) {
    a.advice.push_back({"static-arena",
                        "Only one step in the trace: record at least two to see whether it "
                        "repeats before planning an arena for it.",
                        {}});
  } else if (a.groups.empty()) {
    a.advice.push_back(
        {"static-arena",
         "No repeating step found (no step marks and no periodic allocation sequence): a "
         "planned arena needs a repeating pattern; mark steps with begin_step()/end_step() if "
         "the program has them.",
         {}});
  }

  if (a.groups.size() >= 2) {
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
    a.advice.push_back(
        {"buckets",
         fmt::format("Sizes vary with an input dimension: {} kinds of step among {} (the most "
                     "block sizes scale {}). Plan one arena per bucket and round the "
                     "dimension up to the next boundary; boundaries (relative to the smallest "
                     "step): {}. Arena per bucket: {}. One arena of {} serves every bucket.",
                     a.groups.size(), a.steps.size(),
                     fmt::format("x{:g} to x{:g}", buckets.front().scale, buckets.back().scale),
                     boundaries, list, format_bytes(buckets.back().arena)),
         {fmt::format("static_pool_mb:{}", ceil_mib(buckets.back().arena))}});
  }

  if (a.reserved) {
    const ReservedBreakdown& r = *a.reserved;
    const double ratio =
        a.peak_live == 0 ? 0.0 : static_cast<double>(r.reserved) / static_cast<double>(a.peak_live);
    if (ratio >= options.reserved_ratio) {
      const std::size_t unused = r.reserved > r.live ? r.reserved - r.live : 0;
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
      std::stable_sort(causes.begin(), causes.end(),
                       [](const Cause& x, const Cause& y) { return x.bytes > y.bytes; });
      std::string text;
      std::vector<std::string> keys;
      for (const Cause& c : causes) {
        if (c.bytes == 0) continue;
        text += fmt::format("{}{} ({} of the unused)", text.empty() ? "" : "; ", c.text,
                            percent(unused == 0 ? 0.0 : static_cast<double>(c.bytes) / unused));
        for (const std::string& k : c.keys)
          if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      }
      if (text.empty()) text = "no single cause (the reserved ranges are fully used)";
      a.advice.push_back(
          {"reserved",
           fmt::format("Reserved memory peaks at {}, {:.2f}x the peak live {} ({} unused at "
                       "that moment). Causes, largest first: {}.",
                       format_bytes(r.reserved), ratio, format_bytes(a.peak_live),
                       format_bytes(unused), text),
           keys});
    }
  } else if (a.allocs > 0) {
    a.skipped.push_back(
        "reserved memory unknown: the trace has no segment_alloc/map events (recorded above "
        "the allocator); `modelmem replay` measures reserved memory for each strategy");
  }

  if (a.allocs > 0) {
    std::size_t pool = checked_add(a.best_fit_pool, pool_margin, "pool size");
    a.advice.push_back(
        {"static-pool",
         fmt::format("A static best-fit pool replaying this trace reaches {} (peak live {}, {} "
                     "headroom for fragmentation observed); with a 10% margin for inputs not in "
                     "the trace: {} MiB.",
                     format_bytes(a.best_fit_pool), format_bytes(a.peak_live),
                     percent(a.peak_live == 0 ? 0.0
                                              : static_cast<double>(a.best_fit_pool) /
                                                        static_cast<double>(a.peak_live) -
                                                    1.0),
                     ceil_mib(pool)),
         {fmt::format("static_pool_mb:{}", ceil_mib(pool))}});
  }
  return a;
}

std::string to_text(const Analysis& a) {
  std::string out;
  auto line = [&out](const std::string& s) {
    out += s;
    out += '\n';
  };
  line(fmt::format("trace {}", a.name));
  line(fmt::format("  events {} (alloc {}, free {}, mark {}, oom {}, device {}), threads {}",
                   a.events, a.allocs, a.frees, a.marks, a.ooms, a.device_events, a.threads));
  line(fmt::format("  allocated {} in {:.3f} s: {:.0f} allocs/s, {}/s",
                   format_bytes(a.bytes_allocated), a.duration_s, a.allocs_per_s,
                   format_bytes(static_cast<std::size_t>(a.bytes_per_s))));
  line(fmt::format("  peak live {} at event {} ({:.3f} s){}", format_bytes(a.peak_live),
                   a.peak_live_event, static_cast<double>(a.peak_live_time_ns) * 1e-9,
                   a.peak_reserved
                       ? fmt::format(", peak reserved {}", format_bytes(*a.peak_reserved))
                       : std::string(", reserved unknown")));
  if (a.never_freed > 0)
    line(fmt::format("  never freed: {} blocks, {}", a.never_freed,
                     format_bytes(a.never_freed_bytes)));
  line(fmt::format("  distinct sizes {}; histogram:", a.distinct_sizes));
  std::size_t max_count = 1;
  for (const SizeBin& b : a.histogram) max_count = std::max(max_count, b.count);
  for (const SizeBin& b : a.histogram)
    line(fmt::format("    [{:>10}, {:>10})  {:>6}  {:>10}  {}", format_bytes(b.low),
                     format_bytes(b.high), b.count, format_bytes(b.bytes),
                     std::string(1 + 39 * b.count / max_count, '#')));
  if (a.period.found)
    line(fmt::format("  period: {} events from event {}, {} repeats, {} match", a.period.length,
                     a.period_start_event, a.period.repeats, percent(a.period.match)));
  else
    line("  period: none found");
  if (!a.steps.empty()) {
    line(fmt::format("  steps ({}): {}", a.steps_from_marks ? "from marks" : "from the period",
                     a.steps.size()));
    for (std::size_t k = 0; k < a.steps.size(); ++k) {
      const StepStats& s = a.steps[k];
      line(
          fmt::format("    step {:>3}: events [{}, {}), {} allocs, {} allocated, peak live {}, "
                      "live in {}, kind {}",
                      k, s.window.begin, s.window.end, s.allocs, format_bytes(s.bytes_allocated),
                      format_bytes(s.peak_live), format_bytes(s.live_in), s.group));
    }
    for (std::size_t g = 0; g < a.groups.size(); ++g)
      line(fmt::format("    kind {}: {} step(s), scale x{:g}, planned {} ({}), lower bound {}", g,
                       a.groups[g].steps.size(), a.groups[g].scale,
                       format_bytes(a.groups[g].planned), a.solver,
                       format_bytes(a.groups[g].lower_bound)));
  }
  line("diagnosis:");
  for (const Advice& adv : a.advice) {
    line(fmt::format("  [{}] {}", adv.topic, adv.message));
    if (!adv.config.empty()) {
      std::string keys;
      for (const auto& k : adv.config) keys += (keys.empty() ? "" : ",") + k;
      line(fmt::format("      config: {}", keys));
    }
  }
  if (!a.skipped.empty()) {
    line("skipped / notes:");
    for (const std::string& s : a.skipped) line("  " + s);
  }
  return out;
}

nlohmann::json to_json(const Analysis& a) {
  using nlohmann::json;
  json j;
  j["name"] = a.name;
  j["summary"] = {{"events", a.events},
                  {"allocs", a.allocs},
                  {"frees", a.frees},
                  {"marks", a.marks},
                  {"ooms", a.ooms},
                  {"device_events", a.device_events},
                  {"threads", a.threads},
                  {"distinct_sizes", a.distinct_sizes},
                  {"bytes_allocated", a.bytes_allocated},
                  {"peak_live", a.peak_live},
                  {"peak_live_event", a.peak_live_event},
                  {"peak_live_time_ns", a.peak_live_time_ns},
                  {"peak_reserved", a.peak_reserved ? json(*a.peak_reserved) : json(nullptr)},
                  {"never_freed", a.never_freed},
                  {"never_freed_bytes", a.never_freed_bytes},
                  {"duration_s", a.duration_s},
                  {"allocs_per_s", a.allocs_per_s},
                  {"bytes_per_s", a.bytes_per_s},
                  {"best_fit_pool", a.best_fit_pool}};
  json hist = json::array();
  for (const SizeBin& b : a.histogram)
    hist.push_back({{"low", b.low}, {"high", b.high}, {"count", b.count}, {"bytes", b.bytes}});
  j["summary"]["histogram"] = hist;
  j["period"] = {{"found", a.period.found},
                 {"length", a.period.length},
                 {"start_event", a.period_start_event},
                 {"repeats", a.period.repeats},
                 {"match", a.period.match}};
  json steps = json::array();
  for (const StepStats& s : a.steps)
    steps.push_back({{"begin", s.window.begin},
                     {"end", s.window.end},
                     {"allocs", s.allocs},
                     {"bytes_allocated", s.bytes_allocated},
                     {"peak_live", s.peak_live},
                     {"live_in", s.live_in},
                     {"kind", s.group},
                     {"common_size", s.common_size}});
  j["steps"] = {{"from_marks", a.steps_from_marks}, {"list", steps}};
  json groups = json::array();
  for (const StepGroup& g : a.groups)
    groups.push_back({{"steps", g.steps},
                      {"scale", g.scale},
                      {"peak_live", g.peak_live},
                      {"planned", g.planned},
                      {"lower_bound", g.lower_bound},
                      {"live_in", g.live_in}});
  j["step_kinds"] = groups;
  j["solver"] = a.solver;
  if (a.reserved) {
    const ReservedBreakdown& r = *a.reserved;
    j["reserved_at_peak"] = {{"reserved", r.reserved},
                             {"live", r.live},
                             {"in_empty_ranges", r.in_empty_ranges},
                             {"dead_cached", r.dead_cached},
                             {"oversize", r.oversize},
                             {"fragmented", r.fragmented},
                             {"largest_free_gap", r.largest_free_gap},
                             {"ranges", r.ranges}};
  } else {
    j["reserved_at_peak"] = nullptr;
  }
  json advice = json::array();
  for (const Advice& adv : a.advice)
    advice.push_back({{"topic", adv.topic}, {"message", adv.message}, {"config", adv.config}});
  j["advice"] = advice;
  j["skipped"] = a.skipped;
  return j;
}

}  // namespace modelmem::trace
