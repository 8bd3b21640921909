// Memory of the machine for the top of `modelmem info`: host and registered device queries
// (monitor/system.hpp).
#include "modelmem/monitor/system.hpp"

#include <charconv>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace modelmem::monitor {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, DeviceMemoryQuery>& registry() {
  static std::map<std::string, DeviceMemoryQuery> queries;
  return queries;
}

}  // namespace

std::optional<HostMemory> read_host_memory(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  HostMemory m;
  bool have_total = false;
  bool have_available = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    std::uint64_t value = 0;
    if (!(fields >> key >> value)) continue;
    fields >> unit;
    // Values are in KiB ("kB") in every kernel since 2.6; reject anything else rather than guess.
    if (unit != "kB") continue;
    if (value > UINT64_MAX / 1024) continue;
    value *= 1024;
    if (key == "MemTotal:") {
      m.total = value;
      have_total = true;
    } else if (key == "MemAvailable:") {
      m.available = value;
      have_available = true;
    } else if (key == "MemFree:") {
      m.free = value;
    } else if (key == "Cached:") {
      m.cached = value;
    } else if (key == "Shmem:") {
      m.shmem = value;
    }
  }
  if (!have_total) return std::nullopt;
  if (!have_available) m.available = m.free;  // kernels before 3.14
  return m;
}

void register_device_memory_query(const std::string& backend, DeviceMemoryQuery query) {
  std::lock_guard lock(registry_mutex());
  registry()[backend] = query;
}

std::vector<DeviceMemory> query_device_memory(std::vector<std::string>& notes) {
  std::map<std::string, DeviceMemoryQuery> queries;
  {
    std::lock_guard lock(registry_mutex());
    queries = registry();
  }
  std::vector<DeviceMemory> out;
  for (auto& [name, query] : queries) {
    try {
      query(out, notes);
    } catch (const std::exception& e) {
      notes.push_back(name + ": " + e.what());
    }
  }
  return out;
}

std::vector<std::string> device_memory_backends() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (auto& [name, q] : registry()) names.push_back(name);
  return names;
}

}  // namespace modelmem::monitor
