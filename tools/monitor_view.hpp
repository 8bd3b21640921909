// What `modelmem info` and `modelmem top` both show: one look at the machine (host memory,
// accelerators, publishing processes) and the compact formatting an 80-column table needs.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/device/acl.hpp"
#include "modelmem/monitor/reader.hpp"
#include "modelmem/monitor/system.hpp"

#ifdef MODELMEM_HAVE_CUDA
#include "modelmem/device/cuda.hpp"
#include "modelmem/monitor/cuda.hpp"
#endif

namespace modelmem::tools {

struct MachineView {
  std::optional<monitor::HostMemory> host;
  std::vector<monitor::DeviceMemory> devices;
  monitor::Scan scan;
  std::vector<std::string> device_notes;       ///< why a device backend could not answer
  std::vector<std::string> notes;              ///< skipped segments, failed removals
  std::optional<device::AclAvailability> npu;  ///< the Ascend runtime, when devices were asked
};

/// The "npu" query: every NPU's HBM through the CANN runtime, or a note saying there is none.
inline void query_npu_memory(std::vector<monitor::DeviceMemory>& devices,
                             std::vector<std::string>& notes) {
  device::AclAvailability a = device::acl_availability();
  if (!a.available) {
    notes.push_back("npu: " + a.reason);
    return;
  }
  for (const device::AclDeviceMemory& m : device::acl_device_memory()) {
    const std::string name = "npu:" + std::to_string(m.index);
    if (!m.error.empty()) {
      notes.push_back(name + ": " + m.error);
      continue;
    }
    monitor::DeviceMemory d;
    d.device = name;
    d.model = m.soc.empty() ? "Ascend NPU" : m.soc;
    d.total = m.total;
    d.free = m.free;
    d.used = m.total - std::min(m.total, m.free);
    devices.push_back(std::move(d));
  }
}

inline MachineView look(const monitor::ScanOptions& options, bool devices) {
  MachineView v;
  v.host = monitor::read_host_memory();
  if (devices) {
#ifdef MODELMEM_HAVE_CUDA
    monitor::register_cuda_memory_query();
#endif
    monitor::register_device_memory_query("npu", &query_npu_memory);
    v.devices = monitor::query_device_memory(v.device_notes);
    v.npu = device::acl_availability();
  }
  v.scan = monitor::scan(options);
  v.notes.insert(v.notes.end(), v.scan.notes.begin(), v.scan.notes.end());
  return v;
}

/// "1.5G", "20.0M", "512K", "100B": at most 6 characters.
inline std::string short_bytes(std::uint64_t b) {
  static const char* const kUnits[] = {"B", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{}B", b);
  return v < 100 ? fmt::format("{:.1f}{}", v, kUnits[u]) : fmt::format("{:.0f}{}", v, kUnits[u]);
}

/// Cuts `s` to `n` characters, marking the cut with '~'.
inline std::string cut(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  return s.substr(0, n - 1) + "~";
}

inline std::string host_line(const MachineView& v) {
  if (!v.host) return "host: /proc/meminfo unreadable";
  const auto& h = *v.host;
  return fmt::format("host: {} total, {} available, {} used, {} shared memory",
                     short_bytes(h.total), short_bytes(h.available),
                     short_bytes(h.total - std::min(h.total, h.available)), short_bytes(h.shmem));
}

inline std::vector<std::string> device_lines(const MachineView& v) {
  std::vector<std::string> out;
  for (const auto& d : v.devices) {
    std::string line =
        fmt::format("{}: {} total, {} free, {} used  {}", d.device, short_bytes(d.total),
                    short_bytes(d.free), short_bytes(d.used), d.model);
    out.push_back(line);
  }
  for (const auto& n : v.device_notes) out.push_back(n);
  return out;
}

}  // namespace modelmem::tools
