// Builders of synthetic traces for the trace tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "modelmem/trace/trace.hpp"

namespace modelmem::trace::testing {

class TraceBuilder {
 public:
  explicit TraceBuilder(std::string name = "synthetic") { trace_.name = std::move(name); }

  std::uintptr_t alloc(std::size_t size, std::uint32_t pool = 0) {
    std::uintptr_t address = next_address_;
    next_address_ += (size + 4095) / 4096 * 4096 + 4096;
    add(alloc::EventKind::kAlloc, address, size, pool);
    return address;
  }
  void alloc_at(std::uintptr_t address, std::size_t size, std::uint32_t pool = 0) {
    add(alloc::EventKind::kAlloc, address, size, pool);
  }
  void free(std::uintptr_t address, std::size_t size = 0, std::uint32_t pool = 0) {
    add(alloc::EventKind::kFree, address, size, pool);
  }
  void segment(std::uintptr_t address, std::size_t size, bool alloc = true) {
    add(alloc ? alloc::EventKind::kSegmentAlloc : alloc::EventKind::kSegmentFree, address, size, 0);
  }
  void oom(std::size_t size) { add(alloc::EventKind::kOom, 0, size, 0); }
  void mark(const std::string& label) {
    TraceEvent e;
    e.kind = alloc::EventKind::kMark;
    e.time_ns = time_ += 1000;
    e.label = label;
    trace_.events.push_back(e);
  }
  Trace& trace() { return trace_; }

 private:
  void add(alloc::EventKind kind, std::uintptr_t address, std::size_t size, std::uint32_t pool) {
    TraceEvent e;
    e.kind = kind;
    e.time_ns = time_ += 1000;
    e.address = address;
    e.size = size;
    e.pool = pool;
    trace_.events.push_back(e);
  }
  Trace trace_;
  std::uint64_t time_ = 0;
  std::uintptr_t next_address_ = 0x10000000;
};

/// One inference-like step: a chain of layers, each allocating its output and freeing the
/// input, with `scale` multiplying every size; plus one workspace used twice.
inline void add_step(TraceBuilder& b, std::size_t scale, bool marks) {
  if (marks) b.mark("step_begin");
  const std::size_t sizes[] = {3 << 20, 1 << 20, 1 << 20, 512 << 10, 2 << 20, 256 << 10, 768 << 10};
  std::uintptr_t input = b.alloc(sizes[0] * scale);
  std::size_t input_size = sizes[0] * scale;
  for (std::size_t i = 1; i < std::size(sizes); ++i) {
    std::uintptr_t workspace = b.alloc(64 << 10);
    std::uintptr_t out = b.alloc(sizes[i] * scale);
    b.free(workspace, 64 << 10);
    b.free(input, input_size);
    input = out;
    input_size = sizes[i] * scale;
  }
  b.free(input, input_size);
  if (marks) b.mark("step_end");
}

}  // namespace modelmem::trace::testing
