// Memory of the machine as a whole, for the top of `modelmem info`: the host from /proc/meminfo,
// and accelerators through queries that device backends register (the CUDA backend registers
// one that asks the driver). Thread-safe registration; queries never throw.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::monitor {

struct HostMemory {
  std::uint64_t total = 0;
  std::uint64_t available = 0;  ///< MemAvailable: what can be had without swapping
  std::uint64_t free = 0;
  std::uint64_t cached = 0;  ///< page cache (Cached)
  std::uint64_t shmem = 0;   ///< shared memory, /dev/shm included
};

/// Parses a /proc/meminfo-format file; nullopt when it lacks MemTotal.
std::optional<HostMemory> read_host_memory(const std::string& path = "/proc/meminfo");

/// One accelerator's memory as its driver reports it.
struct DeviceMemory {
  std::string device;  ///< "cuda:0"
  std::string model;   ///< "NVIDIA H200"
  std::uint64_t total = 0;
  std::uint64_t free = 0;
  std::uint64_t used = 0;
  /// Processes holding memory on it (pid, bytes), when the driver says.
  std::vector<std::pair<std::int64_t, std::uint64_t>> processes;
};

/// A backend's query: appends its devices, or a note saying why it could not.
using DeviceMemoryQuery = void (*)(std::vector<DeviceMemory>& devices,
                                   std::vector<std::string>& notes);

/// Registers a query under `backend` ("cuda"); registering the same name again replaces it.
void register_device_memory_query(const std::string& backend, DeviceMemoryQuery query);
/// Runs every registered query.
std::vector<DeviceMemory> query_device_memory(std::vector<std::string>& notes);
/// Names of the registered backends.
std::vector<std::string> device_memory_backends();

}  // namespace modelmem::monitor
