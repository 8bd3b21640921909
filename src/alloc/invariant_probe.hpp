// A test hook that breaks one piece of a strategy's or adaptor's bookkeeping on purpose, so a
// test can see that strategy's check_invariants() fire (tests/alloc/invariant_probe_test.cpp).
// skew(a, d) moves the counter its invariant checks against a recount by d; skew(a, -d) mends
// it. Each function is defined next to the Impl it reaches into; nothing else calls them.
#pragma once

#include <cstdint>

namespace modelmem::alloc {

class StaticAllocator;
class SystemAllocator;
class DirectAllocator;
class PlannedAllocator;
class QuotaAdaptor;
class PoolRouter;

struct InvariantProbe {
  /// The allocated bytes its statistics count.
  static void skew(StaticAllocator& a, std::int64_t delta);
  static void skew(SystemAllocator& a, std::int64_t delta);
  static void skew(DirectAllocator& a, std::int64_t delta);
  /// The live bytes the planned arena counts.
  static void skew(PlannedAllocator& a, std::int64_t delta);
  /// The bytes the quota has charged.
  static void skew(QuotaAdaptor& a, std::int64_t delta);
  /// delta > 0: the router records a block as owned by a pool it does not have; < 0: forgets it.
  static void skew(PoolRouter& a, std::int64_t delta);
};

}  // namespace modelmem::alloc
