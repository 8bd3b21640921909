// Per-model pools in one process: named pools, each an allocator of its own (usually a stack
// behind a QuotaAdaptor on its own capacity-limited device view), plus the process's own stack.
// Each thread selects the pool its requests go to (push_pool/pop_pool, nested); a thread that
// selected none uses the default pool, or the process's own stack when there is no default.
// A block is always returned to the pool that made it, whichever thread frees it.
//
// Thread-safe. The selection is per thread and shared by every router of the process (there is
// one in practice); it lives in initial-exec TLS, so reading it never allocates (the LD_PRELOAD
// library calls the router from inside malloc).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::alloc {

/// Selects pool `name` of `router` (an allocator whose pools() name it: a PoolRouter) for this
/// thread's later requests (nested up to 16 deep). Throws InvalidInput for an unknown name or a
/// selection nested too deep.
void push_pool(const Allocator& router, std::string_view name);
/// Ends this thread's innermost selection; false when there was none.
bool pop_pool() noexcept;
/// The name of the pool this thread's requests to `router` go to now ("" for its main stack).
std::string current_pool(const Allocator& router);
/// The same as the index events carry: the pool's position + 1, 0 for the main stack.
std::uint32_t current_pool_id(const Allocator& router) noexcept;

class PoolRouter : public Allocator {
 public:
  /// `main` may be nullptr when `default_pool` names one of `pools` (every request then goes to
  /// a pool). Throws InvalidInput for no pools, duplicate names, an unknown default pool, or
  /// neither a main stack nor a default pool.
  PoolRouter(std::shared_ptr<Allocator> main, std::vector<NamedPool> pools,
             std::string default_pool = "");
  ~PoolRouter() override;

  /// push_pool(*this, name), pop_pool(), current_pool(*this).
  void push_pool(std::string_view name) { alloc::push_pool(*this, name); }
  bool pop_pool() noexcept { return alloc::pop_pool(); }
  std::string current_pool() const { return alloc::current_pool(*this); }

  /// The process's own stack (nullptr when every request goes to a pool); also upstream().
  const std::shared_ptr<Allocator>& main() const noexcept { return main_; }

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  /// The sum of every pool's and the main stack's statistics.
  Stats do_stats() const override;
  void do_reset_peak() override;
  void do_trim() override;
  std::string do_describe() const override;
  /// To the calling thread's pool.
  void do_begin_step() override;
  void do_end_step() override;
  LiveBlock do_block(const void* ptr) const override;
  Allocator* do_upstream() const noexcept override { return main_.get(); }
  std::span<const NamedPool> do_pools() const noexcept override { return pools_; }
  std::string do_check_invariants() const override;
  std::size_t do_invariant_size() const override;
  void do_set_listener(Listener* listener) noexcept override;

  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  Allocator& target(int index) const;

  std::shared_ptr<Allocator> main_;
  std::vector<NamedPool> pools_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, int> owner_;      ///< live block -> pool index (-1: main)
  std::atomic<Listener*> listener_copy_{nullptr};   ///< what the relays pass events on to
  std::vector<std::unique_ptr<PoolRelay>> relays_;  ///< one per pool: Event::pool = index + 1
};

}  // namespace modelmem::alloc
