// A listener slot goes kFree -> kClaimed (add writes fn and user) -> kActive -> kRemoving (remove
// waits until no delivery is inside it) -> kFree. A delivery counts itself in `inflight` before
// it checks the state a second time, so remove(), which changes the state before it reads
// `inflight`, either waits for that delivery or the delivery sees the new state and skips.
#include "modelmem/config/listeners.hpp"

#include <thread>

#include "modelmem/config/publish.hpp"

namespace modelmem::config {

static_assert(static_cast<int>(alloc::EventKind::kAlloc) == MODELMEM_EVENT_ALLOC &&
                  static_cast<int>(alloc::EventKind::kFree) == MODELMEM_EVENT_FREE &&
                  static_cast<int>(alloc::EventKind::kSegmentAlloc) ==
                      MODELMEM_EVENT_SEGMENT_ALLOC &&
                  static_cast<int>(alloc::EventKind::kSegmentFree) == MODELMEM_EVENT_SEGMENT_FREE &&
                  static_cast<int>(alloc::EventKind::kMap) == MODELMEM_EVENT_MAP &&
                  static_cast<int>(alloc::EventKind::kUnmap) == MODELMEM_EVENT_UNMAP &&
                  static_cast<int>(alloc::EventKind::kOom) == MODELMEM_EVENT_OOM &&
                  static_cast<int>(alloc::EventKind::kMark) == MODELMEM_EVENT_MARK,
              "listener_abi.h's kinds follow alloc::EventKind");

namespace {
// Depth of deliveries on this thread: remove() from inside a callback would wait for itself.
thread_local int t_delivering = 0;
}  // namespace

EventRelay::EventRelay(ListenerRegistry& registry, alloc::Allocator& stack, int device,
                       std::string device_name, std::vector<std::string> pool_names)
    : registry_(registry),
      stack_(stack),
      device_(device),
      device_name_(std::move(device_name)),
      pool_names_(std::move(pool_names)) {}

void EventRelay::on_event(const alloc::Event& e) noexcept {
  modelmem_event out{};
  out.version = MODELMEM_EVENT_VERSION;
  out.kind = static_cast<std::uint32_t>(e.kind);
  out.device = device_;
  out.pool = e.pool;
  out.time_ns = e.time_ns;
  out.address = e.address;
  out.size = e.size;
  out.stream = reinterpret_cast<void*>(e.stream);
  out.thread = e.thread;
  out.device_name = device_name_.c_str();
  out.pool_name = e.pool < pool_names_.size() ? pool_names_[e.pool].c_str() : "";
  out.label = e.kind == alloc::EventKind::kMark ? e.label : nullptr;
  registry_.deliver(out);
}

int ListenerRegistry::add(modelmem_event_fn fn, void* user, std::string& why) noexcept {
  try {
    if (fn == nullptr) {
      why = "add_listener: no function given";
      return -1;
    }
    for (int i = 0; i < kMaxListeners; ++i) {
      Slot& s = slots_[i];
      int expected = kFree;
      if (!s.state.compare_exchange_strong(expected, kClaimed)) continue;
      s.fn.store(fn);
      s.user.store(user);
      s.state.store(kActive);
      active_.store(true);
      for (auto& r : relays_)
        if (EventRelay* relay = r.load()) relay->attach();
      return i;
    }
    why = "add_listener: " + std::to_string(kMaxListeners) +
          " listeners are registered already; remove one first";
  } catch (...) {  // no memory for the message
  }
  return -1;
}

int ListenerRegistry::remove(int id, std::string& why) noexcept {
  try {
    if (t_delivering > 0) {
      why = "remove_listener: called from inside a listener (it would wait for itself)";
      return -1;
    }
    int expected = kActive;
    if (id < 0 || id >= kMaxListeners ||
        !slots_[id].state.compare_exchange_strong(expected, kRemoving)) {
      why = "remove_listener: no listener " + std::to_string(id) + " is registered";
      return -1;
    }
  } catch (...) {
    return -1;
  }
  Slot& s = slots_[id];
  while (s.inflight.load() != 0) std::this_thread::yield();
  s.fn.store(nullptr);
  s.user.store(nullptr);
  s.state.store(kFree);
  return 0;
}

void ListenerRegistry::deliver(const modelmem_event& e) const noexcept {
  ++t_delivering;
  for (const Slot& s : slots_) {
    if (s.state.load(std::memory_order_acquire) != kActive) continue;
    s.inflight.fetch_add(1);
    if (s.state.load() == kActive)
      if (modelmem_event_fn fn = s.fn.load()) fn(&e, s.user.load());
    s.inflight.fetch_sub(1);
  }
  --t_delivering;
}

void ListenerRegistry::track(EventRelay& relay) noexcept {
  for (auto& r : relays_) {
    EventRelay* expected = nullptr;
    if (r.compare_exchange_strong(expected, &relay)) break;
  }
  if (active_.load()) relay.attach();
}

std::unique_ptr<EventRelay> relay_stack(ListenerRegistry& registry, const Config& config,
                                        const Built& built, const std::string& default_name,
                                        int device, const std::string& device_name) {
  std::vector<std::string> names{pool_info(config, built, default_name, device_name).name};
  for (const alloc::NamedPool& p : built.allocator->pools()) names.push_back(p.name);
  auto relay = std::make_unique<EventRelay>(registry, *built.allocator, device, device_name,
                                            std::move(names));
  registry.track(*relay);
  return relay;
}

}  // namespace modelmem::config
