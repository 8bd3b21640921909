// The planned arena's invariant checker (PlannedAllocator::check_invariants), and the test hook
// that breaks its live-byte count on purpose (invariant_probe.hpp).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "invariant_probe.hpp"
#include "planned_impl.hpp"

namespace modelmem::alloc {

// Live bytes, the arenas' live counts and the current arena's live ranges agree with the live
// blocks; those ranges do not overlap; the arena's statistics equal a recount; then the
// fallback's own invariants.
std::string PlannedAllocator::do_check_invariants() const {
  const Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    std::size_t bytes = 0;
    std::int64_t arena_bytes = 0, arena_blocks = 0;
    std::vector<std::size_t> per_arena(m.arenas.size(), 0);
    std::size_t in_current = 0;
    for (const auto& [ptr, l] : m.live) {
      bytes += l.requested;
      if (l.arena == kNoArena) continue;
      if (l.arena >= m.arenas.size() || m.arenas[l.arena].base == nullptr)
        return "planned arena: a live block lies in a released arena";
      const Arena& a = m.arenas[l.arena];
      if (static_cast<const std::byte*>(ptr) != a.base + l.offset || l.offset + l.rounded > a.size)
        return "planned arena: a live block lies outside its arena";
      ++per_arena[l.arena];
      arena_bytes += static_cast<std::int64_t>(l.rounded);
      ++arena_blocks;
      if (l.arena == m.current_arena) {
        auto r = m.arena_live.find(l.offset);
        if (r == m.arena_live.end() || r->second != l.offset + l.rounded)
          return "planned arena: a live arena block is missing from the live ranges";
        ++in_current;
      }
    }
    if (bytes != m.live_bytes)
      return "planned arena: " + std::to_string(m.live_bytes) +
             " live bytes counted, the live blocks hold " + std::to_string(bytes);
    for (std::size_t i = 0; i < m.arenas.size(); ++i)
      if (per_arena[i] != m.arenas[i].live)
        return "planned arena: arena " + std::to_string(i) + " counts " +
               std::to_string(m.arenas[i].live) + " live blocks, holds " +
               std::to_string(per_arena[i]);
    if (in_current != m.arena_live.size())
      return "planned arena: " + std::to_string(m.arena_live.size()) + " live ranges for " +
             std::to_string(in_current) + " live blocks";
    std::size_t end = 0;
    for (const auto& [offset, until] : m.arena_live) {
      if (offset < end) return "planned arena: live ranges overlap at " + std::to_string(offset);
      end = until;
    }
    if (m.own.allocated_bytes.all.current != arena_bytes ||
        m.own.allocation.all.current != arena_blocks)
      return "planned arena: statistics differ from the live arena blocks";
  }
  return m.options.fallback->check_invariants();
}

// The counters against the sizes of the containers they count (O(1)).
std::string PlannedAllocator::do_check_local() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  const auto blocks = static_cast<std::int64_t>(m.live.size());
  if (m.arena_live.size() > m.live.size() || m.big_live > m.live.size() ||
      m.own.allocation.all.current < 0 || m.own.allocation.all.current > blocks)
    return "planned arena: " + std::to_string(m.live.size()) + " live blocks, of them " +
           std::to_string(m.arena_live.size()) + " live ranges, " + std::to_string(m.big_live) +
           " large and " + std::to_string(m.own.allocation.all.current) + " counted in the arena";
  if (m.current_arena != kNoArena &&
      (m.current_arena >= m.arenas.size() || m.arenas[m.current_arena].base == nullptr))
    return "planned arena: the current arena is a released one";
  return {};
}

std::size_t PlannedAllocator::do_invariant_size() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  return m.live.size() + m.arena_live.size() + m.arenas.size();
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(PlannedAllocator& a, std::int64_t delta) {
  std::lock_guard lock(a.impl_->mutex);
  a.impl_->live_bytes =
      static_cast<std::size_t>(static_cast<std::int64_t>(a.impl_->live_bytes) + delta);
}

}  // namespace modelmem::alloc
