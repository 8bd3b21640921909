// Test helpers for the planned arena: a plain mmap device, a malloc fallback, a trace reader, and
// a replayer that writes a distinct pattern into every live block and checks all of them (and
// that no two live blocks overlap) after every operation.
#pragma once

#include <sys/mman.h>
#include <atomic>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::testing {

class MmapDevice : public device::Device {
 public:
  std::string name() const override { return "mmap-test"; }
  bool host_accessible() const noexcept override { return true; }
  void* allocate(std::size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw OutOfMemory(OomInfo{bytes, 0, 0, 0, 0, {}, "mmap-test"});
    std::lock_guard lock(mutex_);
    allocations_++;
    outstanding_ += bytes;
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    munmap(ptr, bytes);
    std::lock_guard lock(mutex_);
    outstanding_ -= bytes;
  }
  device::MemoryInfo memory_info() const override { return {1ull << 40, 1ull << 40}; }
  std::size_t outstanding() const {
    std::lock_guard lock(mutex_);
    return outstanding_;
  }
  std::size_t allocations() const {
    std::lock_guard lock(mutex_);
    return allocations_;
  }

 private:
  mutable std::mutex mutex_;
  std::size_t outstanding_ = 0;
  std::size_t allocations_ = 0;
};

// The fallback: the C library, 256-byte aligned, remembering what it handed out.
class MallocAllocator : public alloc::Allocator {
 public:
  void* do_allocate(std::size_t size, alloc::Stream = 0) override {
    void* p = std::aligned_alloc(256, (size + 255) / 256 * 256);
    std::lock_guard lock(mutex_);
    live_[p] = size;
    calls_++;
    return p;
  }
  void do_deallocate(void* ptr) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) throw InvalidInput("malloc fallback: unknown pointer");
    live_.erase(it);
    std::free(ptr);
  }
  alloc::Stats do_stats() const override { return {}; }
  void do_reset_peak() override {}
  void do_trim() override { ++trims_; }
  std::string do_describe() const override { return "malloc"; }
  alloc::LiveBlock do_block(const void* p) const override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(const_cast<void*>(p));
    return it == live_.end() ? alloc::LiveBlock{} : alloc::LiveBlock{it->second, 0, 0};
  }
  std::size_t live() const {
    std::lock_guard lock(mutex_);
    return live_.size();
  }
  std::size_t trims() const { return trims_.load(); }  // trim() calls the planner made
  std::size_t calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t calls_ = 0;
  std::atomic<std::size_t> trims_{0};
};

struct TraceEvent {
  enum Kind { kAlloc, kFree, kBegin, kEnd } kind;
  std::size_t id = 0;  // block id (alloc and free)
  std::size_t size = 0;
  int thread = 0;
};

// Reads NAME.events.csv, numbering blocks by allocation order.
inline std::vector<TraceEvent> read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<TraceEvent> out;
  std::unordered_map<std::string, std::size_t> id_of;
  std::size_t next = 0;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    while (f.size() < 6) f.emplace_back();
    TraceEvent e{};
    if (f[0] == "mark") {
      e.kind = f[5] == "step_begin" ? TraceEvent::kBegin : TraceEvent::kEnd;
    } else if (f[0] == "alloc") {
      e.kind = TraceEvent::kAlloc;
      e.size = std::stoull(f[3]);
      e.id = next++;
      e.thread = std::stoi(f[4]);
      id_of[f[2]] = e.id;
    } else {
      auto it = id_of.find(f[2]);
      if (it == id_of.end()) continue;  // freed memory from before the trace
      e.kind = TraceEvent::kFree;
      e.id = it->second;
      id_of.erase(it);
    }
    out.push_back(e);
  }
  return out;
}

inline std::string trace_path(const std::string& name) {
  return std::string(MODELMEM_SHARED_DATA) + "/traces/" + name + ".events.csv";
}

// Splits a trace into steps (events between begin and end marks, marks excluded).
inline std::vector<std::vector<TraceEvent>> split_steps(const std::vector<TraceEvent>& events) {
  std::vector<std::vector<TraceEvent>> steps;
  bool in = false;
  for (const auto& e : events) {
    if (e.kind == TraceEvent::kBegin) {
      steps.emplace_back();
      in = true;
    } else if (e.kind == TraceEvent::kEnd) {
      in = false;
    } else if (in) {
      steps.back().push_back(e);
    }
  }
  return steps;
}

// Live blocks with a distinct pattern each; checks every block and the absence of overlaps.
class PatternChecker {
 public:
  // Arena offsets and sizes are multiples of 256; overlaps are also caught exactly in on_alloc.
  static constexpr std::size_t kStride = 1024;

  void on_alloc(std::size_t id, void* p, std::size_t size) {
    auto* b = static_cast<unsigned char*>(p);
    auto it = by_address_.lower_bound(b);
    if (it != by_address_.end()) {
      ASSERT_GE(it->first, b + size) << "block " << id << " overlaps block " << it->second.id;
    }
    if (it != by_address_.begin()) {
      auto prev = std::prev(it);
      ASSERT_LE(prev->first + prev->second.size, b)
          << "block " << id << " overlaps block " << prev->second.id;
    }
    by_address_[b] = Block{id, size};
    ptr_of_[id] = b;
    write(id, b, size);
  }
  void on_free(std::size_t id) {
    auto it = ptr_of_.find(id);
    ASSERT_NE(it, ptr_of_.end());
    by_address_.erase(it->second);
    ptr_of_.erase(it);
  }
  void* ptr(std::size_t id) const { return ptr_of_.at(id); }
  bool live(std::size_t id) const { return ptr_of_.count(id) != 0; }
  std::size_t live_count() const { return ptr_of_.size(); }
  void check_all() const {
    for (const auto& [b, blk] : by_address_) {
      for (std::size_t off = 0; off < blk.size; off += kStride)
        ASSERT_EQ(read_word(b + off), value(blk.id, off)) << "block " << blk.id << " +" << off;
      std::size_t last = blk.size >= 8 ? blk.size - 8 : 0;
      ASSERT_EQ(read_word(b + last), value(blk.id, last)) << "block " << blk.id << " tail";
    }
  }
  std::vector<std::size_t> live_ids() const {
    std::vector<std::size_t> ids;
    for (const auto& [id, p] : ptr_of_) ids.push_back(id);
    return ids;
  }

 private:
  struct Block {
    std::size_t id;
    std::size_t size;
  };
  static std::uint64_t value(std::size_t id, std::size_t off) {
    return (static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull) ^ off;
  }
  static std::uint64_t read_word(const unsigned char* p) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void write(std::size_t id, unsigned char* b, std::size_t size) {
    for (std::size_t off = 0; off + 8 <= size; off += kStride) {
      auto v = value(id, off);
      std::memcpy(b + off, &v, 8);
    }
    if (size >= 8) {
      auto v = value(id, size - 8);
      std::memcpy(b + size - 8, &v, 8);
    }
  }
  std::map<unsigned char*, Block> by_address_;
  std::unordered_map<std::size_t, unsigned char*> ptr_of_;
};

// A planner that needs no solver: blocks side by side (always valid, never small).
inline plan::Plan side_by_side(const plan::Problem& problem) {
  plan::Plan p;
  std::size_t off = 0;
  for (const auto& b : problem.buffers) {
    off = (off + b.alignment - 1) / b.alignment * b.alignment;
    p.offsets.push_back(off);
    off += b.size;
  }
  p.arena_size = off;
  return p;
}

}  // namespace modelmem::testing
