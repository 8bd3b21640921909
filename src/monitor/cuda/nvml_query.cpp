// The "cuda" query of `modelmem info`: NVML, loaded at run time from the driver, answers without
// creating a CUDA context (which would cost the inspected GPU hundreds of MiB and a second).
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "modelmem/monitor/cuda.hpp"
#include "modelmem/monitor/system.hpp"

namespace modelmem::monitor {
namespace {

// The few NVML declarations used (stable C ABI; the toolkit ships no nvml.h here).
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;
  const char* (*error)(NvmlReturn) = nullptr;
};

template <typename F>
bool sym(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

std::string why(const Nvml& n, NvmlReturn r) {
  return n.error != nullptr ? n.error(r) : "NVML error " + std::to_string(r);
}

void query(std::vector<monitor::DeviceMemory>& devices, std::vector<std::string>& notes) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    notes.push_back("cuda: no NVIDIA driver here (libnvidia-ml.so.1 not found)");
    return;
  }
  Nvml n;
  bool ok = sym(lib, "nvmlInit_v2", n.init) && sym(lib, "nvmlShutdown", n.shutdown) &&
            sym(lib, "nvmlDeviceGetCount_v2", n.count) &&
            sym(lib, "nvmlDeviceGetHandleByIndex_v2", n.handle) &&
            sym(lib, "nvmlDeviceGetMemoryInfo", n.memory) && sym(lib, "nvmlDeviceGetName", n.name);
  sym(lib, "nvmlErrorString", n.error);
  sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3", n.processes);
  if (!ok) {
    notes.push_back("cuda: NVML lacks a needed function");
    dlclose(lib);
    return;
  }
  if (NvmlReturn r = n.init(); r != kNvmlSuccess) {
    notes.push_back("cuda: NVML init failed: " + why(n, r));
    dlclose(lib);
    return;
  }
  unsigned count = 0;
  if (NvmlReturn r = n.count(&count); r != kNvmlSuccess) {
    notes.push_back("cuda: NVML device count failed: " + why(n, r));
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice h = nullptr;
    if (n.handle(i, &h) != kNvmlSuccess) continue;
    monitor::DeviceMemory d;
    d.device = "cuda:" + std::to_string(i);
    char name[96] = {};
    if (n.name(h, name, sizeof name - 1) == kNvmlSuccess) d.model = name;
    NvmlMemory m{};
    if (NvmlReturn r = n.memory(h, &m); r != kNvmlSuccess) {
      notes.push_back(d.device + ": NVML memory info failed: " + why(n, r));
      continue;
    }
    d.total = m.total;
    d.free = m.free;
    d.used = m.used;
    if (n.processes != nullptr) {
      std::vector<NvmlProcessInfo> procs(64);
      unsigned np = static_cast<unsigned>(procs.size());
      NvmlReturn r = n.processes(h, &np, procs.data());
      if (r == kNvmlInsufficientSize && np > procs.size()) {
        procs.resize(np + 8);
        np = static_cast<unsigned>(procs.size());
        r = n.processes(h, &np, procs.data());
      }
      if (r == kNvmlSuccess) {
        for (unsigned k = 0; k < np && k < procs.size(); ++k) {
          d.processes.emplace_back(procs[k].pid, procs[k].used_gpu_memory);
        }
      }
    }
    devices.push_back(std::move(d));
  }
  n.shutdown();
  dlclose(lib);
}

}  // namespace

void register_cuda_memory_query() {
  register_device_memory_query("cuda", &query);
}

}  // namespace modelmem::monitor
