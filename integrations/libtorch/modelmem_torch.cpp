#include "modelmem_torch.hpp"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <unordered_map>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::torch {
namespace {

std::atomic<alloc::Allocator*> g_allocator{nullptr};
thread_local std::shared_ptr<alloc::Allocator> t_route;

// Blocks from a routed allocator and their owners. c10's raw_allocate needs the context to be
// the data pointer, so the owner is looked up here at free; the count keeps that lookup off the
// free path while no routed block is live.
std::mutex g_routed_mutex;
std::unordered_map<void*, std::shared_ptr<alloc::Allocator>> g_routed;
std::atomic<std::size_t> g_routed_live{0};

void delete_block(void* ptr) {
  if (ptr == nullptr) return;
  try {
    if (g_routed_live.load(std::memory_order_acquire) > 0) {
      std::shared_ptr<alloc::Allocator> owner;
      {
        std::lock_guard<std::mutex> lock(g_routed_mutex);
        auto it = g_routed.find(ptr);
        if (it != g_routed.end()) {
          owner = std::move(it->second);
          g_routed.erase(it);
          g_routed_live.fetch_sub(1, std::memory_order_release);
        }
      }
      if (owner) {
        owner->deallocate(ptr);
        return;
      }
    }
    g_allocator.load(std::memory_order_acquire)->deallocate(ptr);
  } catch (const std::exception& e) {
    // A deleter cannot report; a wrong free means the heap can no longer be trusted.
    std::fprintf(stderr, "modelmem torch allocator: %s\n", e.what());
    std::abort();
  }
}

struct CpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return {nullptr, nullptr, &delete_block, c10::Device(c10::DeviceType::CPU)};
    void* p = nullptr;
    try {
      if (t_route) {
        p = t_route->allocate(n);
        try {
          std::lock_guard<std::mutex> lock(g_routed_mutex);
          g_routed.emplace(p, t_route);
          g_routed_live.fetch_add(1, std::memory_order_release);
        } catch (...) {
          t_route->deallocate(p);
          throw;
        }
        return {p, p, &delete_block, c10::Device(c10::DeviceType::CPU)};
      }
      p = g_allocator.load(std::memory_order_acquire)->allocate(n);
    } catch (const OutOfMemory& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "modelmem: ", e.what());
    }
    return {p, p, &delete_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
};

CpuAllocator g_cpu_allocator;

}  // namespace

void install(std::shared_ptr<alloc::Allocator> allocator) {
  if (!allocator) throw InvalidInput("modelmem torch: install() needs an allocator");
  // Kept for the process: tensors made by it may be freed at any time, even at exit.
  auto* keep = new std::shared_ptr<alloc::Allocator>(std::move(allocator));
  g_allocator.store(keep->get(), std::memory_order_release);
  c10::SetCPUAllocator(&g_cpu_allocator, /*priority=*/100);
}

std::shared_ptr<alloc::Allocator> install(const std::string& config) {
  auto built = config::build(config::parse_config(config));
  install(built.allocator);
  return built.allocator;
}

alloc::Allocator* installed() noexcept {
  return g_allocator.load(std::memory_order_acquire);
}

void set_thread_allocator(std::shared_ptr<alloc::Allocator> allocator) {
  if (allocator && installed() == nullptr)
    throw Unsupported(
        "modelmem torch: a per-thread pool needs modelmem installed as the CPU "
        "allocator first (install())");
  t_route = std::move(allocator);
}

std::shared_ptr<alloc::Allocator> thread_allocator() {
  return t_route;
}

void begin_step() {
  if (t_route) {
    t_route->begin_step();
  } else if (auto* a = installed()) {
    a->begin_step();
  }
}

void end_step() {
  if (t_route) {
    t_route->end_step();
  } else if (auto* a = installed()) {
    a->end_step();
  }
}

}  // namespace modelmem::torch
