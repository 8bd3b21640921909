// One look at the machine, as `modelmem info`, `modelmem top` and Python's modelmem.info() show
// it: host memory, accelerators (every registered device query, the Ascend runtime's answer) and
// every process publishing modelmem pools. The rendering of a view is in monitor/render.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "modelmem/device/acl.hpp"
#include "modelmem/monitor/reader.hpp"
#include "modelmem/monitor/system.hpp"

namespace modelmem::monitor {

struct MachineView {
  std::optional<HostMemory> host;
  std::vector<DeviceMemory> devices;
  Scan scan;
  std::vector<std::string> device_notes;       ///< why a device backend could not answer
  std::vector<std::string> notes;              ///< skipped segments, failed removals
  std::optional<device::AclAvailability> npu;  ///< the Ascend runtime, when devices were asked
};

/// Host memory, the processes `options` selects and, with `devices`, every accelerator: the
/// Ascend NPUs through the CANN runtime (registered here as the "npu" query) and whatever other
/// backend registered a query (the CUDA backend: register_cuda_memory_query in monitor/cuda.hpp).
MachineView look(const ScanOptions& options, bool devices);

/// One pool of one process, with the allocation rates `modelmem top` shows.
struct PoolRow {
  std::int64_t pid = 0;
  std::string process;
  PoolSnapshot pool;
  double alloc_rate = 0;  ///< allocations per second since the previous look
  double byte_rate = 0;   ///< bytes allocated per second since the previous look
};

/// Turns the totals of successive looks into rates. A pool not republished since the previous
/// look keeps its last rate; a pool seen for the first time has rate 0.
class PoolRates {
 public:
  std::vector<PoolRow> update(const MachineView& view);

 private:
  struct Seen {
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    std::uint64_t time_ns = 0;
    double alloc_rate = 0;
    double byte_rate = 0;
  };
  // pid, process start time, pool name, index: a pid reused by a new process starts afresh.
  using Key = std::tuple<std::int64_t, std::uint64_t, std::string, std::size_t>;
  std::map<Key, Seen> seen_;
};

/// The fields `modelmem top` sorts by, in the order its `s` key cycles through them.
const std::vector<std::string>& pool_sort_fields();

/// Sorts rows by a field of pool_sort_fields(): largest first, pid and pool name ascending.
/// Throws InvalidInput for another field.
void sort_pool_rows(std::vector<PoolRow>& rows, const std::string& field);

}  // namespace modelmem::monitor
