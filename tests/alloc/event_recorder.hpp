// A Listener for the allocator tests: keeps every event (thread-safe) and counts them by kind.
#pragma once

#include <mutex>
#include <vector>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::testing {

struct EventRecorder : alloc::Listener {
  mutable std::mutex mutex;
  std::vector<alloc::Event> events;

  void on_event(const alloc::Event& e) noexcept override {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(e);
  }
  int count(alloc::EventKind k) const {
    std::lock_guard<std::mutex> lock(mutex);
    int n = 0;
    for (const auto& e : events) n += e.kind == k;
    return n;
  }
  /// The block events (alloc, free, oom) in order, without the device events and marks.
  std::vector<alloc::Event> blocks() const {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<alloc::Event> out;
    for (const auto& e : events)
      if (e.kind == alloc::EventKind::kAlloc || e.kind == alloc::EventKind::kFree ||
          e.kind == alloc::EventKind::kOom)
        out.push_back(e);
    return out;
  }
};

}  // namespace modelmem::testing
