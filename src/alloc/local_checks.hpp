// The local (O(1)) invariant checks strategies share (Allocator::do_check_local): their
// counters against each other and against the sizes of the containers they count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "modelmem/alloc/stats.hpp"

namespace modelmem::alloc::detail {

/// For strategies where one block is one segment (system, direct): the blocks and segments
/// counted equal the `live` blocks held, and allocated bytes equal reserved bytes. "" if so.
inline std::string check_block_per_segment(const Stats& s, std::size_t live) {
  const auto n = static_cast<std::int64_t>(live);
  if (s.allocation.all.current == n && s.segment.all.current == n &&
      s.allocated_bytes.all.current == s.reserved_bytes.all.current)
    return {};
  return "statistics differ from the live blocks (" + std::to_string(s.allocation.all.current) +
         " blocks, " + std::to_string(s.segment.all.current) + " segments, " +
         std::to_string(s.allocated_bytes.all.current) + " B allocated and " +
         std::to_string(s.reserved_bytes.all.current) + " B reserved for " + std::to_string(n) +
         " live blocks)";
}

}  // namespace modelmem::alloc::detail
