// The CUDA device (device/cuda.hpp): segments from cudaMalloc, expandable segments through the
// driver's virtual memory management (cuMemCreate / cuMemMap), memory queries per GPU.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/device/cuda.hpp"

namespace modelmem::device {
namespace {

// The driver functions virtual memory needs, looked up once through the runtime so nothing links
// against libcuda.so (absent on machines without a driver).
struct Driver {
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  std::string missing;  // first function not found

  bool complete() const { return missing.empty(); }
};

template <typename F>
void lookup(const char* name, F& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  // 12000: the ABI these functions have had since CUDA 12.0.
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    if (missing.empty()) missing = name;
    return;
  }
  fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    lookup("cuMemAddressReserve", r.address_reserve, r.missing);
    lookup("cuMemAddressFree", r.address_free, r.missing);
    lookup("cuMemCreate", r.create, r.missing);
    lookup("cuMemRelease", r.release, r.missing);
    lookup("cuMemMap", r.map, r.missing);
    lookup("cuMemUnmap", r.unmap, r.missing);
    lookup("cuMemSetAccess", r.set_access, r.missing);
    lookup("cuMemGetAllocationGranularity", r.granularity, r.missing);
    lookup("cuDeviceGetAttribute", r.device_attribute, r.missing);
    lookup("cuGetErrorString", r.error_string, r.missing);
    return r;
  }();
  return d;
}

std::string cu_error(CUresult r) {
  const char* s = nullptr;
  if (driver().error_string != nullptr) driver().error_string(r, &s);
  return s != nullptr ? std::string(s) : "CUresult " + std::to_string(static_cast<int>(r));
}

std::string rt_error(cudaError_t e) {
  return cudaGetErrorString(e);
}

// Makes `index` the current device for the scope and restores the caller's afterwards: PyTorch
// and other callers keep their own notion of the current device.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != index) cudaSetDevice(index);
    index_ = index;
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != index_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int index_ = 0;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index), name_("cuda:" + std::to_string(index)) {}

  ~CudaDevice() override {
    // Whatever the strategies still hold when the device goes (they should hold nothing).
    std::lock_guard lock(mu_);
    for (auto& [addr, h] : handles_) {
      driver().unmap(static_cast<CUdeviceptr>(addr), h.bytes);
      driver().release(h.handle);
    }
  }

  std::string name() const override { return name_; }

  void* allocate(std::size_t bytes) override {
    DeviceScope scope(index_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    if (e == cudaErrorMemoryAllocation) throw_oom(bytes, "cudaMalloc");
    throw Error(name_ + ": cudaMalloc(" + format_bytes(bytes) + ") failed: " + rt_error(e));
  }

  void deallocate(void* ptr, std::size_t) noexcept override {
    if (ptr == nullptr) return;
    DeviceScope scope(index_);
    cudaFree(ptr);
  }

  MemoryInfo memory_info() const override {
    DeviceScope scope(index_);
    std::size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    return {free_bytes, total};
  }

  VmProbe probe_virtual_memory() override {
    const Driver& d = driver();
    if (!d.complete()) return {false, "CUDA driver lacks " + d.missing};
    int supported = 0;
    CUresult r = d.device_attribute(
        &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, index_);
    if (r != CUDA_SUCCESS) return {false, "cuDeviceGetAttribute: " + cu_error(r)};
    if (!supported) return {false, name_ + " does not support virtual memory management"};
    // The attribute can say yes where creating memory still fails (vGPU, some MIG setups):
    // prove it with one real reservation, mapping and release.
    try {
      std::size_t g = granularity();
      void* base = reserve(g);
      try {
        map(base, g);
      } catch (const std::exception& e) {
        release(base, g);
        return {false, std::string("mapping failed: ") + e.what()};
      }
      unmap(base, g);
      release(base, g);
    } catch (const std::exception& e) {
      return {false, e.what()};
    }
    return {true, ""};
  }

  std::size_t granularity() const override {
    std::call_once(granularity_once_, [this] {
      const Driver& d = driver();
      if (!d.complete()) return;
      CUmemAllocationProp prop = allocation_prop();
      std::size_t g = 0;
      if (d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS) {
        granularity_ = g;
      }
    });
    if (granularity_ == 0) throw Unsupported(name_ + ": no virtual memory (granularity unknown)");
    return granularity_;
  }

  void* reserve(std::size_t bytes) override {
    const Driver& d = need_driver();
    check_aligned(nullptr, bytes, "reserve");
    CUdeviceptr p = 0;
    CUresult r = d.address_reserve(&p, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
      throw Unsupported(name_ + ": cuMemAddressReserve(" + format_bytes(bytes) +
                        ") failed: " + cu_error(r));
    }
    return reinterpret_cast<void*>(p);
  }

  void release(void* base, std::size_t bytes) noexcept override {
    if (base == nullptr || !driver().complete()) return;
    unmap(base, bytes);  // anything still mapped inside; normally nothing
    driver().address_free(reinterpret_cast<CUdeviceptr>(base), bytes);
  }

  void map(void* addr, std::size_t bytes) override {
    const Driver& d = need_driver();
    check_aligned(addr, bytes, "map");
    const std::size_t g = granularity();
    const auto base = reinterpret_cast<std::uintptr_t>(addr);
    CUmemAllocationProp prop = allocation_prop();
    DeviceScope scope(index_);
    std::lock_guard lock(mu_);
    std::size_t done = 0;
    auto undo = [&] {
      for (std::size_t off = 0; off < done; off += g) {
        auto it = handles_.find(base + off);
        d.unmap(static_cast<CUdeviceptr>(base + off), g);
        d.release(it->second.handle);
        handles_.erase(it);
      }
    };
    for (; done < bytes; done += g) {
      if (handles_.count(base + done) != 0) {
        undo();
        throw InvalidInput(name_ + ": map over a mapped page at " + std::to_string(base + done));
      }
      CUmemGenericAllocationHandle h{};
      CUresult r = d.create(&h, g, &prop, 0);
      if (r != CUDA_SUCCESS) {
        undo();
        if (r == CUDA_ERROR_OUT_OF_MEMORY) throw_oom(bytes, "cuMemCreate");
        throw Error(name_ + ": cuMemCreate failed: " + cu_error(r));
      }
      r = d.map(static_cast<CUdeviceptr>(base + done), g, 0, h, 0);
      if (r != CUDA_SUCCESS) {
        d.release(h);
        undo();
        throw Error(name_ + ": cuMemMap failed: " + cu_error(r));
      }
      handles_.emplace(base + done, Handle{h, g});
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = index_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult r = d.set_access(static_cast<CUdeviceptr>(base), bytes, &access, 1);
    if (r != CUDA_SUCCESS) {
      undo();
      throw Error(name_ + ": cuMemSetAccess failed: " + cu_error(r));
    }
  }

  void unmap(void* addr, std::size_t bytes) noexcept override {
    const Driver& d = driver();
    if (!d.complete() || bytes == 0) return;
    const auto base = reinterpret_cast<std::uintptr_t>(addr);
    DeviceScope scope(index_);
    // Kernels queued on any stream may still read these pages.
    cudaDeviceSynchronize();
    std::lock_guard lock(mu_);
    auto it = handles_.lower_bound(base);
    while (it != handles_.end() && it->first < base + bytes) {
      d.unmap(static_cast<CUdeviceptr>(it->first), it->second.bytes);
      d.release(it->second.handle);
      it = handles_.erase(it);
    }
  }

 private:
  struct Handle {
    CUmemGenericAllocationHandle handle;
    std::size_t bytes;
  };

  CUmemAllocationProp allocation_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = index_;
    return prop;
  }

  const Driver& need_driver() const {
    const Driver& d = driver();
    if (!d.complete()) throw Unsupported(name_ + ": CUDA driver lacks " + d.missing);
    return d;
  }

  void check_aligned(void* addr, std::size_t bytes, const char* what) const {
    std::size_t g = granularity();
    if (bytes == 0 || bytes % g != 0 || reinterpret_cast<std::uintptr_t>(addr) % g != 0) {
      throw InvalidInput(name_ + ": " + what + " of " + std::to_string(bytes) +
                         " bytes is not a multiple of the granularity " + std::to_string(g));
    }
  }

  [[noreturn]] void throw_oom(std::size_t bytes, const char* call) const {
    OomInfo info;
    info.requested = bytes;
    info.device_free = memory_info().free;
    info.where = name_ + " (" + call + ")";
    throw OutOfMemory(info);
  }

  int index_;
  std::string name_;
  mutable std::once_flag granularity_once_;
  mutable std::size_t granularity_ = 0;
  std::mutex mu_;
  std::map<std::uintptr_t, Handle> handles_;  // mapped pages by address
};

}  // namespace

CudaAvailability cuda_availability() noexcept {
  CudaAvailability a;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    a.reason = e == cudaErrorNoDevice             ? "no CUDA device"
               : e == cudaErrorInsufficientDriver ? "no CUDA driver (or one older than the runtime)"
                                                  : "CUDA unavailable: " + rt_error(e);
    return a;
  }
  if (count == 0) {
    a.reason = "no CUDA device";
    return a;
  }
  a.available = true;
  a.device_count = count;
  return a;
}

DevicePtr make_cuda_device(int index) {
  CudaAvailability a = cuda_availability();
  if (!a.available) throw Unsupported("cuda:" + std::to_string(index) + ": " + a.reason);
  if (index < 0 || index >= a.device_count) {
    throw Unsupported("cuda:" + std::to_string(index) + ": no such device (" +
                      std::to_string(a.device_count) + " present)");
  }
  return std::make_shared<CudaDevice>(index);
}

}  // namespace modelmem::device
