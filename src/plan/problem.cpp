// Planning problems and plans: validation, lower bound, statistics (plan/problem.hpp).
#include "modelmem/plan/problem.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <string_view>

#include "modelmem/core/error.hpp"
#include "plan/time_sort.hpp"

namespace modelmem::plan {

void check_problem(const Problem& problem) {
  // Duplicate ids through an open-addressing table of indices (no allocation per id: a million
  // buffers check in a tenth of a second).
  const auto& bufs = problem.buffers;
  std::size_t slots = 16;
  while (slots < 2 * bufs.size()) slots *= 2;
  std::vector<std::size_t> table(slots, 0);  // index + 1; 0 = empty
  const std::hash<std::string_view> hash;
  std::size_t total = 0;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    const Buffer& b = bufs[i];
    if (b.size == 0) throw InvalidInput("buffer '" + b.id + "': size is zero");
    if (b.end <= b.start)
      throw InvalidInput("buffer '" + b.id + "': end " + std::to_string(b.end) +
                         " is not after start " + std::to_string(b.start));
    if (b.alignment == 0) throw InvalidInput("buffer '" + b.id + "': alignment is zero");
    for (std::size_t s = hash(b.id) & (slots - 1);; s = (s + 1) & (slots - 1)) {
      if (table[s] == 0) {
        table[s] = i + 1;
        break;
      }
      if (bufs[table[s] - 1].id == b.id) throw InvalidInput("buffer '" + b.id + "': duplicate id");
    }
    // The message is built only on overflow.
    if (__builtin_add_overflow(total, b.size, &total))
      throw InvalidInput("buffer '" + b.id + "': total size overflows 64 bits");
  }
}

namespace {
// Sweep events: ends before starts at the same time, since [start, end) intervals that touch
// do not overlap; among ends or starts at one time, by index.
struct Event {
  Time time;
  bool is_start;
  std::size_t index;
};
std::vector<Event> sweep_events(const Problem& problem) {
  const auto& bufs = problem.buffers;
  const std::vector<std::size_t> starts =
      detail::stable_order_by(bufs.size(), [&](std::size_t i) { return bufs[i].start; });
  const std::vector<std::size_t> ends =
      detail::stable_order_by(bufs.size(), [&](std::size_t i) { return bufs[i].end; });
  std::vector<Event> events;
  events.reserve(bufs.size() * 2);
  std::size_t s = 0, e = 0;
  while (s < starts.size() || e < ends.size()) {
    if (e < ends.size() && (s == starts.size() || bufs[ends[e]].end <= bufs[starts[s]].start)) {
      events.push_back({bufs[ends[e]].end, false, ends[e]});
      ++e;
    } else {
      events.push_back({bufs[starts[s]].start, true, starts[s]});
      ++s;
    }
  }
  return events;
}
}  // namespace

Peak peak(const Problem& problem) {
  Peak best;
  std::size_t live = 0;
  auto events = sweep_events(problem);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.is_start)
      live += problem.buffers[e.index].size;
    else
      live -= problem.buffers[e.index].size;
    bool last_at_time = i + 1 == events.size() || events[i + 1].time != e.time;
    if (last_at_time && live > best.bytes) {
      best.bytes = live;
      best.step = e.time;
    }
  }
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const Buffer& b = problem.buffers[i];
    if (best.bytes > 0 && b.start <= best.step && best.step < b.end) best.live.push_back(i);
  }
  return best;
}

std::size_t lower_bound(const Problem& problem) {
  std::size_t live = 0, best = 0;
  for (const Event& e : sweep_events(problem)) {
    if (e.is_start) {
      live += problem.buffers[e.index].size;
      best = std::max(best, live);
    } else {
      live -= problem.buffers[e.index].size;
    }
  }
  return best;
}

std::size_t arena_size_of(const Problem& problem, const std::vector<std::size_t>& offsets) {
  std::size_t arena = 0;
  for (std::size_t i = 0; i < problem.buffers.size() && i < offsets.size(); ++i) {
    std::size_t end_addr;
    if (__builtin_add_overflow(offsets[i], problem.buffers[i].size, &end_addr))
      throw InvalidInput("buffer '" + problem.buffers[i].id + "': offset + size overflows 64 bits");
    arena = std::max(arena, end_addr);
  }
  return arena;
}

Validation validate(const Problem& problem, const Plan& plan) {
  return validate(problem, plan, true);
}

Validation validate(const Problem& problem, const Plan& plan, bool check_capacity) {
  const auto& bufs = problem.buffers;
  auto fail = [](std::string m) { return Validation{false, std::move(m)}; };
  if (plan.offsets.size() != bufs.size())
    return fail("plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                std::to_string(bufs.size()) + " buffers");
  std::size_t arena = 0;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    const Buffer& b = bufs[i];
    std::size_t end_addr;
    if (__builtin_add_overflow(plan.offsets[i], b.size, &end_addr))
      return fail("buffer '" + b.id + "': offset + size overflows 64 bits");
    if (b.alignment > 1 && plan.offsets[i] % b.alignment != 0)
      return fail("buffer '" + b.id + "': offset " + std::to_string(plan.offsets[i]) +
                  " breaks its alignment " + std::to_string(b.alignment));
    if (check_capacity && problem.capacity && end_addr > *problem.capacity)
      return fail("buffer '" + b.id + "': ends at " + std::to_string(end_addr) +
                  ", beyond the capacity " + std::to_string(*problem.capacity));
    arena = std::max(arena, end_addr);
  }
  if (arena != plan.arena_size)
    return fail("plan says arena " + std::to_string(plan.arena_size) + " but buffers end at " +
                std::to_string(arena));

  // Sweep over time; the set of live buffers is ordered by offset so each newcomer is checked
  // only against its address neighbours, which suffices when the live set itself is disjoint.
  // Keys hold the offset itself (no lookup through the plan per comparison: a million buffers
  // with 50,000 live at a time validate in a second, not ten).
  std::set<std::pair<std::size_t, std::size_t>> live;
  auto overlap_msg = [&](std::size_t a, std::size_t b) {
    return "buffers '" + bufs[a].id + "' [" + std::to_string(plan.offsets[a]) + ", " +
           std::to_string(plan.offsets[a] + bufs[a].size) + ") and '" + bufs[b].id + "' [" +
           std::to_string(plan.offsets[b]) + ", " + std::to_string(plan.offsets[b] + bufs[b].size) +
           ") overlap in address while both live in [" +
           std::to_string(std::max(bufs[a].start, bufs[b].start)) + ", " +
           std::to_string(std::min(bufs[a].end, bufs[b].end)) + ")";
  };
  for (const Event& e : sweep_events(problem)) {
    const std::size_t idx = e.index;
    const std::size_t off = plan.offsets[idx];
    if (!e.is_start) {
      live.erase({off, idx});
      continue;
    }
    auto [it, inserted] = live.insert({off, idx});
    (void)inserted;
    if (it != live.begin()) {
      std::size_t prev = std::prev(it)->second;
      if (plan.offsets[prev] + bufs[prev].size > off) return fail(overlap_msg(prev, idx));
    }
    auto next = std::next(it);
    if (next != live.end() && off + bufs[idx].size > next->first)
      return fail(overlap_msg(idx, next->second));
  }
  return {};
}

}  // namespace modelmem::plan
