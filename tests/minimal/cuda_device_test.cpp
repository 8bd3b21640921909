// The CUDA device on a real GPU: segments, memory info, out-of-memory, virtual memory (reserve,
// map in pieces, unmap across pieces, release), the caching pool with fixed and expandable
// segments on it, and the driver's memory report for `modelmem info`. Skips without a GPU.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "check.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/cuda.hpp"
#include "modelmem/monitor/cuda.hpp"
#include "modelmem/monitor/system.hpp"

namespace {

using namespace modelmem;

// Fills [p, p + bytes) on the device and reads a few spots back.
bool fill_and_check(void* p, std::size_t bytes, unsigned char value) {
  if (cudaMemset(p, value, bytes) != cudaSuccess) return false;
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  for (std::size_t off : {std::size_t{0}, bytes / 2, bytes - 1}) {
    unsigned char got = 0;
    if (cudaMemcpy(&got, static_cast<unsigned char*>(p) + off, 1, cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return false;
    }
    if (got != value) return false;
  }
  return true;
}

void segments(device::Device& dev) {
  MM_CHECK(dev.name() == "cuda:0");
  device::MemoryInfo m = dev.memory_info();
  MM_CHECK(m.total > 0);
  MM_CHECK(m.free <= m.total);
  void* p = dev.allocate(64u << 20);
  MM_CHECK(p != nullptr);
  MM_CHECK(fill_and_check(p, 64u << 20, 0x5a));
  dev.deallocate(p, 64u << 20);
  // More than the card has: OutOfMemory with the numbers, and the device stays usable.
  MM_CHECK_THROWS(dev.allocate(m.total * 2), OutOfMemory);
  void* q = dev.allocate(1u << 20);
  MM_CHECK(q != nullptr);
  dev.deallocate(q, 1u << 20);
}

void virtual_memory(device::Device& dev) {
  device::VmProbe probe = dev.probe_virtual_memory();
  if (!probe.supported) {
    std::printf("NOTE: virtual memory unsupported here: %s (the fallback path applies)\n",
                probe.reason.c_str());
    MM_CHECK(!probe.reason.empty());
    return;
  }
  const std::size_t g = dev.granularity();
  MM_CHECK(g > 0 && (g & (g - 1)) == 0);
  void* base = dev.reserve(16 * g);
  auto* b = static_cast<unsigned char*>(base);
  dev.map(b, 4 * g);
  dev.map(b + 4 * g, 4 * g);
  MM_CHECK(fill_and_check(b, 8 * g, 0x11));
  // Unmap a range that covers the end of one map() call and the start of the next.
  dev.unmap(b + 2 * g, 4 * g);
  dev.map(b + 2 * g, 4 * g);
  MM_CHECK(fill_and_check(b, 8 * g, 0x22));
  MM_CHECK_THROWS(dev.map(b, g), InvalidInput);              // already mapped
  MM_CHECK_THROWS(dev.map(b + 9 * g, g / 2), InvalidInput);  // not a granule
  dev.unmap(b, 8 * g);
  dev.map(b + 8 * g, 8 * g);  // the range can be used again
  MM_CHECK(fill_and_check(b + 8 * g, 8 * g, 0x33));
  dev.release(base, 16 * g);  // unmaps what is still mapped
  MM_CHECK_THROWS(dev.map(nullptr, g), InvalidInput);
}

void caching(const device::DevicePtr& dev, bool expandable) {
  alloc::CachingOptions o;
  o.expandable_segments = expandable;
  alloc::CachingAllocator pool(dev, o);
  cudaStream_t stream = nullptr;
  MM_CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t size :
       {std::size_t{1000}, std::size_t{3} << 20, std::size_t{25} << 20, std::size_t{700} << 10}) {
    void* p = pool.allocate(size, reinterpret_cast<alloc::Stream>(stream));
    MM_CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
    MM_CHECK(fill_and_check(p, size, 0x44));
    blocks.emplace_back(p, size);
  }
  void* other = pool.allocate(1u << 20, 0);  // default stream: its own blocks
  MM_CHECK(fill_and_check(other, 1u << 20, 0x55));
  alloc::Stats s = pool.stats();
  MM_CHECK(s.allocated_bytes.all.current >= (30 << 20));
  MM_CHECK(s.reserved_bytes.all.current >= s.allocated_bytes.all.current);
  for (auto& [p, n] : blocks) pool.deallocate(p);
  pool.deallocate(other);
  MM_CHECK(pool.stats().allocated_bytes.all.current == 0);
  pool.trim();
  MM_CHECK(pool.stats().reserved_bytes.all.current == 0);
  cudaStreamDestroy(stream);
  std::printf("caching (expandable %s): %s\n", expandable ? "on" : "off", pool.describe().c_str());
}

void memory_report() {
  monitor::register_cuda_memory_query();
  std::vector<std::string> notes;
  auto devices = monitor::query_device_memory(notes);
  for (const auto& n : notes) std::printf("NOTE: %s\n", n.c_str());
  if (devices.empty()) return;  // NVML unavailable in this sandbox: noted above
  MM_CHECK(devices[0].device == "cuda:0");
  MM_CHECK(devices[0].total > 0);
  std::printf("%s %s: total %llu, free %llu\n", devices[0].device.c_str(), devices[0].model.c_str(),
              static_cast<unsigned long long>(devices[0].total),
              static_cast<unsigned long long>(devices[0].free));
}

}  // namespace

int main() {
  device::CudaAvailability a = device::cuda_availability();
  if (!a.available) {
    // Still exercised without a GPU: the device cannot be made, with the reason.
    bool threw = false;
    try {
      device::make_cuda_device(0);
    } catch (const Unsupported& e) {
      threw = std::strstr(e.what(), a.reason.c_str()) != nullptr;
    }
    if (!threw) {
      std::printf("make_cuda_device did not refuse with the reason '%s'\n", a.reason.c_str());
      return 1;
    }
    return minimal::skip("cuda device tests need a GPU: " + a.reason);
  }
  MM_CHECK_THROWS(device::make_cuda_device(a.device_count), Unsupported);
  auto dev = device::make_cuda_device(0);
  try {
    segments(*dev);
    virtual_memory(*dev);
    caching(dev, false);
    if (dev->probe_virtual_memory().supported) caching(dev, true);
    memory_report();
  } catch (const std::exception& e) {
    std::printf("unexpected exception: %s\n", e.what());
    ++minimal::failures();
  }
  return minimal::finish("minimal.cuda_device");
}
