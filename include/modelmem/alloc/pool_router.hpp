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

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::alloc {

struct NamedPool {
  std::string name;
  std::size_t quota = 0;  ///< bytes; reported to monitors
  std::shared_ptr<Allocator> allocator;
};

class PoolRouter : public Allocator {
 public:
  /// `main` may be nullptr when `default_pool` names one of `pools` (every request then goes to
  /// a pool). Throws InvalidInput for no pools, duplicate names, an unknown default pool, or
  /// neither a main stack nor a default pool.
  PoolRouter(std::shared_ptr<Allocator> main, std::vector<NamedPool> pools,
             std::string default_pool = "");
  ~PoolRouter() override;

  void* allocate(std::size_t size, Stream stream = 0) override;
  void deallocate(void* ptr) override;
  /// The sum of every pool's and the main stack's statistics.
  Stats stats() const override;
  void reset_peak() override;
  void trim() override;
  std::string describe() const override;
  /// To the calling thread's pool.
  void begin_step() override;
  void end_step() override;

  /// Selects `name` for this thread's later requests (nested up to 16 deep). Throws
  /// InvalidInput for an unknown name or a selection nested too deep.
  void push_pool(std::string_view name);
  /// Ends the innermost selection; false when there was none.
  bool pop_pool() noexcept;
  /// The name of the pool this thread's requests go to now ("" for the main stack).
  std::string current_pool() const;

  const std::vector<NamedPool>& pools() const noexcept { return pools_; }
  /// The process's own stack (nullptr when every request goes to a pool).
  const std::shared_ptr<Allocator>& main() const noexcept { return main_; }

 private:
  Allocator& target(int index) const;
  int current_index() const noexcept;  ///< -1: main

  std::shared_ptr<Allocator> main_;
  std::vector<NamedPool> pools_;
  int default_index_ = -1;
  mutable std::mutex mutex_;
  struct Owner {
    int index;         ///< pool index (-1: main)
    std::size_t size;  ///< bytes requested, for the free's event
    Stream stream;
  };
  std::unordered_map<const void*, Owner> owner_;  ///< live block -> its pool
};

}  // namespace modelmem::alloc
