// The C listeners of a pluggable library (modelmem_npu_add_listener, modelmem_cuda_add_listener):
// up to kMaxListeners callbacks, each told every event of every device's stack as a
// modelmem_event (config/listener_abi.h) carrying the device and the pool's name.
//
// Promises: delivering never allocates, never locks and never waits (a few atomic operations per
// registered listener); a stack gets its relay attached only once a listener is registered, so
// until then an event costs the allocator's one branch. Adding and removing are thread-safe and
// may race with events on any thread; once remove() returns, the callback is not running and is
// never called again (it waits for calls in progress), so its `user` data may be freed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/config/listener_abi.h"

namespace modelmem::config {

class ListenerRegistry;

/// Turns one device stack's events into modelmem_events for the registry. Made once per stack and
/// kept as long as the stack (forever in the libraries).
class EventRelay final : public alloc::Listener {
 public:
  /// `pool_names[i]`: the name of Event::pool i (0: the process's own stack).
  EventRelay(ListenerRegistry& registry, alloc::Allocator& stack, int device,
             std::string device_name, std::vector<std::string> pool_names);
  void on_event(const alloc::Event& e) noexcept override;
  /// Installs this relay as the stack's listener (idempotent).
  void attach() noexcept { stack_.set_listener(this); }

 private:
  ListenerRegistry& registry_;
  alloc::Allocator& stack_;
  const int device_;
  const std::string device_name_;
  const std::vector<std::string> pool_names_;
};

class ListenerRegistry {
 public:
  static constexpr int kMaxListeners = 4;
  static constexpr int kMaxStacks = 64;

  /// Registers `fn` with `user`: its id (>= 0), or -1 with `why` set (no function, or
  /// kMaxListeners registered already).
  int add(modelmem_event_fn fn, void* user, std::string& why) noexcept;
  /// Ends registration `id`, waiting for its calls in progress on other threads: 0; -1 with `why`
  /// set for an id not registered, or when called from inside a callback (it would wait for
  /// itself).
  int remove(int id, std::string& why) noexcept;
  /// Calls every registered listener with `e`.
  void deliver(const modelmem_event& e) const noexcept;
  /// A stack's relay: attached now when a listener is registered, else at the first add().
  void track(EventRelay& relay) noexcept;

 private:
  enum : int { kFree = 0, kClaimed = 1, kActive = 2, kRemoving = 3 };
  struct Slot {
    std::atomic<int> state{kFree};
    std::atomic<modelmem_event_fn> fn{nullptr};
    std::atomic<void*> user{nullptr};
    mutable std::atomic<int> inflight{0};
  };
  Slot slots_[kMaxListeners];
  std::atomic<EventRelay*> relays_[kMaxStacks] = {};
  std::atomic<bool> active_{false};
};

/// The relay of a stack a pluggable library built and published (publish_stack): pool 0 is named
/// as pool_info() names it, pool i + 1 as the i-th of pools:[...]. Tracked by `registry`; the
/// caller keeps it as long as the stack.
std::unique_ptr<EventRelay> relay_stack(ListenerRegistry& registry, const Config& config,
                                        const Built& built, const std::string& default_name,
                                        int device, const std::string& device_name);

}  // namespace modelmem::config
