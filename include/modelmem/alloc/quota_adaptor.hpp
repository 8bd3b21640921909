// An adaptor that caps what callers may hold through one allocator (RMM's
// limiting_resource_adaptor). Any Allocator can be wrapped; per-model partitions are built from
// it. The cap counts bytes handed out (requests rounded up to `granularity`), not the upstream's
// cached memory: to cap memory taken from a device too, give the upstream its own
// capacity-limited device (Partitions does).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::alloc {

struct QuotaOptions {
  std::string name;               ///< pool name used in messages, e.g. "bert"
  std::size_t quota = 0;          ///< bytes callers may hold at once (> 0)
  std::size_t granularity = 256;  ///< each request is charged rounded up to this (power of 2)
  device::DevicePtr device;       ///< optional: reported as "device free" in QuotaExceeded
};

/// Thread-safe (one mutex for the ledger; the upstream is called outside it). A request that
/// would take the use above the quota throws QuotaExceeded naming the pool, quota and use, and
/// never reaches the upstream. The upstream must outlive nothing: the adaptor owns it.
class QuotaAdaptor : public Allocator {
 public:
  QuotaAdaptor(std::shared_ptr<Allocator> upstream, QuotaOptions options);
  ~QuotaAdaptor() override;

  std::size_t quota() const noexcept;
  std::size_t used() const;       ///< bytes charged now
  std::size_t peak_used() const;  ///< since construction or reset_peak()
  const std::string& name() const noexcept;

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  /// The upstream's statistics; num_ooms also counts requests refused by the quota.
  Stats do_stats() const override;
  void do_reset_peak() override;
  void do_trim() override;
  std::string do_describe() const override;
  void do_begin_step() override;
  void do_end_step() override;
  LiveBlock do_block(const void* ptr) const override;
  Allocator* do_upstream() const noexcept override;
  std::string do_check_invariants() const override;
  std::string do_check_local() const override;
  std::size_t do_invariant_size() const override;
  void do_set_listener(Listener* listener) noexcept override;

  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc
