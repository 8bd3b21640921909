#include "modelmem_torch.hpp"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::torch {
namespace {

std::atomic<alloc::Allocator*> g_allocator{nullptr};

void delete_block(void* ptr) {
  if (ptr == nullptr) return;
  try {
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

void begin_step() {
  if (auto* a = installed()) a->begin_step();
}

void end_step() {
  if (auto* a = installed()) a->end_step();
}

}  // namespace modelmem::torch
