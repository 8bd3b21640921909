#include "modelmem/plan/problem.hpp"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "modelmem/core/error.hpp"

namespace modelmem::plan {

void check_problem(const Problem& problem) {
  std::unordered_set<std::string_view> ids;
  ids.reserve(problem.buffers.size());
  std::size_t total = 0;
  for (const Buffer& b : problem.buffers) {
    if (b.size == 0) throw InvalidInput("buffer '" + b.id + "': size is zero");
    if (b.end <= b.start)
      throw InvalidInput("buffer '" + b.id + "': end " + std::to_string(b.end) +
                         " is not after start " + std::to_string(b.start));
    if (b.alignment == 0) throw InvalidInput("buffer '" + b.id + "': alignment is zero");
    if (!ids.insert(b.id).second) throw InvalidInput("buffer '" + b.id + "': duplicate id");
    total = checked_add(total, b.size, ("buffer '" + b.id + "': total size").c_str());
  }
}

namespace {
// Sweep events: ends sort before starts at the same time, since [start, end) intervals that
// touch do not overlap.
struct Event {
  Time time;
  bool is_start;
  std::size_t index;
};
std::vector<Event> sweep_events(const Problem& problem) {
  std::vector<Event> events;
  events.reserve(problem.buffers.size() * 2);
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    events.push_back({problem.buffers[i].start, true, i});
    events.push_back({problem.buffers[i].end, false, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.is_start < b.is_start;
  });
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
    arena = std::max(
        arena, checked_add(offsets[i], problem.buffers[i].size,
                           ("buffer '" + problem.buffers[i].id + "': offset + size").c_str()));
  }
  return arena;
}

Validation validate(const Problem& problem, const Plan& plan) {
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
    if (problem.capacity && end_addr > *problem.capacity)
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
    const std::size_t off = plan.offsets[e.index];
    if (!e.is_start) {
      live.erase({off, e.index});
      continue;
    }
    auto [it, inserted] = live.insert({off, e.index});
    (void)inserted;
    if (it != live.begin()) {
      std::size_t prev = std::prev(it)->second;
      if (plan.offsets[prev] + bufs[prev].size > off) return fail(overlap_msg(prev, e.index));
    }
    auto next = std::next(it);
    if (next != live.end() && off + bufs[e.index].size > next->first)
      return fail(overlap_msg(e.index, next->second));
  }
  return {};
}

}  // namespace modelmem::plan
