// One look at the machine (modelmem/monitor/view.hpp), and the rates and order of its pools.
#include "modelmem/monitor/view.hpp"

#include <algorithm>

#include "modelmem/core/error.hpp"

namespace modelmem::monitor {
namespace {

// The "npu" query: every NPU's HBM through the CANN runtime, or a note saying there is none.
void query_npu_memory(std::vector<DeviceMemory>& devices, std::vector<std::string>& notes) {
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
    DeviceMemory d;
    d.device = name;
    d.model = m.soc.empty() ? "Ascend NPU" : m.soc;
    d.total = m.total;
    d.free = m.free;
    d.used = m.total - std::min(m.total, m.free);
    devices.push_back(std::move(d));
  }
}

}  // namespace

MachineView look(const ScanOptions& options, bool devices) {
  MachineView v;
  v.host = read_host_memory();
  if (devices) {
    static const bool registered = (register_device_memory_query("npu", &query_npu_memory), true);
    (void)registered;
    v.devices = query_device_memory(v.device_notes);
    v.npu = device::acl_availability();
  }
  v.scan = scan(options);
  v.notes.insert(v.notes.end(), v.scan.notes.begin(), v.scan.notes.end());
  return v;
}

std::vector<PoolRow> PoolRates::update(const MachineView& view) {
  std::vector<PoolRow> rows;
  std::map<Key, Seen> next;
  for (const auto& p : view.scan.processes) {
    for (std::size_t i = 0; i < p.pools.size(); ++i) {
      const PoolSnapshot& pool = p.pools[i];
      PoolRow r{p.pid, p.process_name, pool, 0, 0};
      Key k{p.pid, p.start_time_ns, pool.name, i};
      Seen now{pool.alloc_count, pool.alloc_bytes_total, pool.update_time_ns, 0, 0};
      if (auto it = seen_.find(k); it != seen_.end()) {
        const Seen& before = it->second;
        if (now.time_ns > before.time_ns && now.count >= before.count) {
          const double dt = static_cast<double>(now.time_ns - before.time_ns) / 1e9;
          now.alloc_rate = static_cast<double>(now.count - before.count) / dt;
          now.byte_rate = static_cast<double>(now.bytes - before.bytes) / dt;
        } else {
          now = before;  // not republished since: keep the last rate
        }
      }
      r.alloc_rate = now.alloc_rate;
      r.byte_rate = now.byte_rate;
      next[k] = now;
      rows.push_back(std::move(r));
    }
  }
  seen_ = std::move(next);
  return rows;
}

const std::vector<std::string>& pool_sort_fields() {
  static const std::vector<std::string> kFields = {"reserved", "allocated", "peak", "rate", "bytes",
                                                   "frag",     "oom",       "pid",  "pool"};
  return kFields;
}

void sort_pool_rows(std::vector<PoolRow>& rows, const std::string& field) {
  const auto& fields = pool_sort_fields();
  if (std::find(fields.begin(), fields.end(), field) == fields.end())
    throw InvalidInput(
        "sort field '" + field +
        "': expected reserved, allocated, peak, rate, bytes, frag, oom, pid or pool");
  auto key = [&](const PoolRow& r) -> double {
    if (field == "reserved") return static_cast<double>(r.pool.reserved);
    if (field == "allocated") return static_cast<double>(r.pool.allocated);
    if (field == "peak") return static_cast<double>(r.pool.peak_allocated);
    if (field == "rate") return r.alloc_rate;
    if (field == "bytes") return r.byte_rate;
    if (field == "frag") return r.pool.fragmentation;
    if (field == "oom") return static_cast<double>(r.pool.oom_count);
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const PoolRow& a, const PoolRow& b) {
    if (field == "pid") return a.pid < b.pid;
    if (field == "pool") return a.pool.name < b.pool.name;
    return key(a) > key(b);  // largest first
  });
}

}  // namespace modelmem::monitor
