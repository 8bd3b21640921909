// The system strategy: plain C heap (aligned_alloc / free) behind the Allocator interface, with
// the same statistics, events and double-free checks as the other strategies. It is the baseline
// for comparisons and for replaying traces "as the program would have run".
#pragma once

#include <cstddef>
#include <memory>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::alloc {

struct SystemOptions {
  std::size_t alignment = 64;  ///< power of two; blocks are rounded up to a multiple of it
};

/// Thread-safe (one mutex around the bookkeeping; the C heap itself is called outside it).
/// Blocks are aligned to 64 bytes by default (a host strategy: below the interface's 256).
/// reserved_bytes equals allocated_bytes: what the C heap keeps cached is invisible here.
class SystemAllocator : public Allocator {
 public:
  explicit SystemAllocator(SystemOptions options = {});
  ~SystemAllocator() override;

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  Stats do_stats() const override;
  void do_reset_peak() override;
  std::string do_describe() const override;
  LiveBlock do_block(const void* ptr) const override;
  std::string do_check_invariants() const override;
  std::string do_check_local() const override;
  std::size_t do_invariant_size() const override;
  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc
