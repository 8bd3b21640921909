// modelmem as PyTorch's CPU allocator (modelmem_torch.hpp): the c10::Allocator, per-thread pool
// routing and the C step-mark symbols a Python process reaches through ctypes.
#include "modelmem_torch.hpp"

#include <c10/core/CPUAllocator.h>

#include <errno.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "preload_keys.hpp"

namespace modelmem::torch {

// Set by install() when the allocator has pools (a router: the C symbols below read it).
std::atomic<alloc::Allocator*> g_router{nullptr};

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

// PyTorch 2.x's interface (since 2.3): allocate is not const, and copy_data (Tensor.clone of
// storage) is the allocator's to define; these blocks are plain host memory.
struct CpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
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
      // A CPU allocation fails as PyTorch's own CPU allocator fails (a RuntimeError): its
      // OutOfMemoryError is torch.cuda.OutOfMemoryError in Python, which a CPU tensor is not.
      TORCH_CHECK(false, "modelmem: ", e.what());
    }
    return {p, p, &delete_block, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CpuAllocator g_cpu_allocator;

// The installed allocator in `modelmem info` / `top`: one line per pool with pools, else one
// named "libtorch". Kept for the process (as the allocator).
void publish_installed(const std::shared_ptr<alloc::Allocator>& allocator) {
  auto* keep = new std::vector<monitor::PoolRegistration>();
  auto add = [&](std::shared_ptr<alloc::Allocator> a, const std::string& name, std::size_t budget) {
    monitor::PoolInfo info;
    info.name = name;
    info.device = "cpu";
    info.budget = budget;
    // A pool is a quota over a strategy: name the strategy.
    if (const alloc::Allocator* up = a->upstream()) {
      const std::string d = up->describe();
      info.strategy = d.substr(0, d.find_first_of(" :(,"));
    }
    keep->push_back(monitor::publish(std::move(a), std::move(info)));
  };
  if (!allocator->pools().empty()) {
    // A router: its main stack (upstream) and each pool.
    if (alloc::Allocator* main = allocator->upstream())
      add(std::shared_ptr<alloc::Allocator>(allocator, main), "libtorch", 0);
    for (const auto& p : allocator->pools()) add(p.allocator, p.name, p.quota);
  } else {
    add(allocator, "libtorch", 0);
  }
}

}  // namespace

void install(std::shared_ptr<alloc::Allocator> allocator) {
  if (!allocator) throw InvalidInput("modelmem torch: install() needs an allocator");
  // Kept for the process: tensors made by it may be freed at any time, even at exit.
  auto* keep = new std::shared_ptr<alloc::Allocator>(std::move(allocator));
  g_router.store((*keep)->pools().empty() ? nullptr : keep->get(), std::memory_order_release);
  g_allocator.store(keep->get(), std::memory_order_release);
  c10::SetCPUAllocator(&g_cpu_allocator, /*priority=*/100);
  publish_installed(*keep);
}

std::shared_ptr<alloc::Allocator> install(const std::string& config) {
  // The string may be the one `modelmem run` gives the LD_PRELOAD library too.
  preload::register_config_keys();
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

void push_pool(const std::string& name) {
  alloc::Allocator* r = g_router.load(std::memory_order_acquire);
  if (r == nullptr)
    throw InvalidInput("modelmem torch: no pools configured (pools:[NAME:MiB,...])");
  alloc::push_pool(*r, name);
}

bool pop_pool() noexcept {
  return g_router.load(std::memory_order_acquire) != nullptr && alloc::pop_pool();
}

}  // namespace modelmem::torch

// The same C symbols as the LD_PRELOAD library, for programs (or ctypes) that do not link C++.
extern "C" {

__attribute__((visibility("default"))) int modelmem_step_begin(void) {
  if (modelmem::torch::installed() == nullptr) {
    errno = ENODEV;
    return -1;
  }
  modelmem::torch::begin_step();
  return 0;
}

__attribute__((visibility("default"))) int modelmem_step_end(void) {
  if (modelmem::torch::installed() == nullptr) {
    errno = ENODEV;
    return -1;
  }
  modelmem::torch::end_step();
  return 0;
}

__attribute__((visibility("default"))) int modelmem_pool_push(const char* name) {
  try {
    modelmem::torch::push_pool(name != nullptr ? name : "");
    return 0;
  } catch (const std::exception&) {
    errno = modelmem::torch::g_router.load() == nullptr ? ENODEV : ENOENT;
    return -1;
  }
}

__attribute__((visibility("default"))) int modelmem_pool_pop(void) {
  if (modelmem::torch::pop_pool()) return 0;
  errno = EINVAL;
  return -1;
}

}  // extern "C"
