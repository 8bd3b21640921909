// The text, JSON and Prometheus renderings of `modelmem info` (modelmem/monitor/render.hpp).
#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/render.hpp"
#include "render_internal.hpp"

namespace modelmem::monitor {
namespace {

using detail::cut;
using nlohmann::json;

json pool_json(const PoolSnapshot& p) {
  return json{{"pool", p.name},
              {"device", p.device},
              {"strategy", p.strategy},
              {"budget", p.budget},
              {"reserved", p.reserved},
              {"allocated", p.allocated},
              {"peak_allocated", p.peak_allocated},
              {"peak_reserved", p.peak_reserved},
              {"requested", p.requested},
              {"largest_free_block", p.largest_free_block},
              {"fragmentation", p.fragmentation},
              {"oom_count", p.oom_count},
              {"alloc_retries", p.alloc_retries},
              {"fallback_warnings", p.warning_count},
              {"warning", p.warning},
              {"allocations_total", p.alloc_count},
              {"allocated_bytes_total", p.alloc_bytes_total},
              {"freed_bytes_total", p.free_bytes_total},
              {"segments", p.segments},
              {"plan_hits", p.plan_hits},
              {"plan_misses", p.plan_misses},
              {"last_update_ns", p.update_time_ns}};
}

json to_json_value(const MachineView& v) {
  json out;
  if (v.host) {
    out["host"] = {{"total", v.host->total},
                   {"available", v.host->available},
                   {"free", v.host->free},
                   {"cached", v.host->cached},
                   {"shmem", v.host->shmem}};
  } else {
    out["host"] = nullptr;
  }
  out["devices"] = json::array();
  for (const auto& d : v.devices) {
    json procs = json::array();
    for (auto& [pid, bytes] : d.processes) procs.push_back({{"pid", pid}, {"bytes", bytes}});
    out["devices"].push_back({{"device", d.device},
                              {"model", d.model},
                              {"total", d.total},
                              {"free", d.free},
                              {"used", d.used},
                              {"processes", procs}});
  }
  out["processes"] = json::array();
  for (const ProcessSnapshot& p : v.scan.processes) {
    json pools = json::array();
    for (const PoolSnapshot& s : p.pools) pools.push_back(pool_json(s));
    out["processes"].push_back({{"pid", p.pid},
                                {"process", p.process_name},
                                {"command", p.command},
                                {"segment", p.segment},
                                {"start_time_ns", p.start_time_ns},
                                {"last_update_ns", p.update_time_ns},
                                {"updates", p.update_count},
                                {"interval_ms", p.interval_ms},
                                {"pools_not_shown", p.pools_dropped},
                                {"pools", pools}});
  }
  out["stale"] = json::array();
  for (const auto& s : v.scan.stale) {
    out["stale"].push_back({{"segment", s.segment},
                            {"pid", s.pid},
                            {"process", s.process_name},
                            {"why", s.why},
                            {"removed", s.removed}});
  }
  if (v.npu) {
    out["npu"] = {{"available", v.npu->available},
                  {"count", v.npu->device_count},
                  {"library", v.npu->library},
                  {"reason", v.npu->reason}};
  }
  out["device_notes"] = v.device_notes;
  out["notes"] = v.notes;
  return out;
}

// Prometheus label values: backslash, double quote and newline escaped.
std::string label_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string info_json(const MachineView& v) {
  return to_json_value(v).dump(2) + "\n";
}

std::string info_report(const MachineView& v, const std::string& format) {
  if (format == "table") return info_table(v);
  if (format == "json") return info_json(v);
  if (format == "prometheus") return info_prometheus(v);
  throw InvalidInput("info format '" + format +
                     "': expected \"table\", \"json\" or \"prometheus\"");
}

std::string info_prometheus(const MachineView& v) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP modelmem_{} {}\n# TYPE modelmem_{} {}\n", name, help, name, type);
  };
  if (v.host) {
    family("host_memory_total_bytes", "gauge", "Host memory (MemTotal).");
    out += fmt::format("modelmem_host_memory_total_bytes {}\n", v.host->total);
    family("host_memory_available_bytes", "gauge", "Host memory available (MemAvailable).");
    out += fmt::format("modelmem_host_memory_available_bytes {}\n", v.host->available);
  }
  if (!v.devices.empty()) {
    family("device_memory_total_bytes", "gauge", "Accelerator memory, as its driver reports.");
    for (const auto& d : v.devices) {
      out += fmt::format("modelmem_device_memory_total_bytes{{device=\"{}\",model=\"{}\"}} {}\n",
                         label_escape(d.device), label_escape(d.model), d.total);
    }
    family("device_memory_free_bytes", "gauge", "Free accelerator memory.");
    for (const auto& d : v.devices) {
      out += fmt::format("modelmem_device_memory_free_bytes{{device=\"{}\",model=\"{}\"}} {}\n",
                         label_escape(d.device), label_escape(d.model), d.free);
    }
  }
  struct Metric {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const PoolSnapshot&);
  };
  static const Metric kMetrics[] = {
      {"pool_reserved_bytes", "gauge", "Bytes the pool holds from its device.",
       [](const PoolSnapshot& p) { return double(p.reserved); }},
      {"pool_allocated_bytes", "gauge", "Bytes in blocks handed to callers.",
       [](const PoolSnapshot& p) { return double(p.allocated); }},
      {"pool_peak_allocated_bytes", "gauge", "Highest allocated bytes since the last reset.",
       [](const PoolSnapshot& p) { return double(p.peak_allocated); }},
      {"pool_peak_reserved_bytes", "gauge", "Highest reserved bytes since the last reset.",
       [](const PoolSnapshot& p) { return double(p.peak_reserved); }},
      {"pool_budget_bytes", "gauge", "Quota or planned size of the pool; 0 when none.",
       [](const PoolSnapshot& p) { return double(p.budget); }},
      {"pool_largest_free_block_bytes", "gauge", "Largest block servable without the device.",
       [](const PoolSnapshot& p) { return double(p.largest_free_block); }},
      {"pool_fragmentation_ratio", "gauge",
       "Share of the pool's reserved bytes free outside its largest free block.",
       [](const PoolSnapshot& p) { return p.fragmentation; }},
      {"pool_segments", "gauge", "Device segments held.",
       [](const PoolSnapshot& p) { return double(p.segments); }},
      {"pool_ooms_total", "counter", "Allocations that failed for lack of memory.",
       [](const PoolSnapshot& p) { return double(p.oom_count); }},
      {"pool_fallback_warnings", "gauge", "Fallback warnings (e.g. no virtual memory).",
       [](const PoolSnapshot& p) { return double(p.warning_count); }},
      {"pool_allocations_total", "counter", "Blocks handed out.",
       [](const PoolSnapshot& p) { return double(p.alloc_count); }},
      {"pool_allocated_bytes_total", "counter", "Bytes handed out.",
       [](const PoolSnapshot& p) { return double(p.alloc_bytes_total); }},
      {"pool_last_update_timestamp_seconds", "gauge", "When the pool was last published.",
       [](const PoolSnapshot& p) { return double(p.update_time_ns) / 1e9; }},
  };
  for (const Metric& m : kMetrics) {
    bool any = false;
    for (const ProcessSnapshot& p : v.scan.processes) any = any || !p.pools.empty();
    if (!any) break;
    family(m.name, m.type, m.help);
    for (const ProcessSnapshot& p : v.scan.processes) {
      for (const PoolSnapshot& s : p.pools) {
        out += fmt::format(
            "modelmem_{}{{pid=\"{}\",process=\"{}\",pool=\"{}\",device=\"{}\",strategy=\"{}\"}} "
            "{}\n",
            m.name, p.pid, label_escape(p.process_name), label_escape(s.name),
            label_escape(s.device), label_escape(s.strategy), m.get(s));
      }
    }
  }
  return out;
}

std::string info_table(const MachineView& v) {
  std::string out;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  out += fmt::format("modelmem info  {}\n", when);
  out += detail::host_line(v) + "\n";
  for (const auto& line : detail::device_lines(v)) out += line + "\n";
  out += "\n";
  if (v.scan.processes.empty()) {
    out += "No process is publishing modelmem pools.\n";
    return out;
  }
  out += fmt::format("{:<8} {:<15} {:<14} {:<7} {:<10} {:>9} {:>9} {:>9} {:>9} {:>5} {:>4} {:>8}\n",
                     "PID", "PROCESS", "POOL", "DEVICE", "STRATEGY", "RESERVED", "ALLOCATED",
                     "PEAK", "LARGEST", "FRAG", "OOM", "BUDGET");
  std::vector<std::string> warnings;
  for (const ProcessSnapshot& p : v.scan.processes) {
    if (p.pools.empty()) {
      out += fmt::format("{:<8} {:<15} (no pools)\n", p.pid, cut(p.process_name, 15));
    }
    for (const PoolSnapshot& s : p.pools) {
      out += fmt::format(
          "{:<8} {:<15} {:<14} {:<7} {:<10} {:>9} {:>9} {:>9} {:>9} {:>5.2f} {:>4} {:>8}\n", p.pid,
          cut(p.process_name, 15), cut(s.name, 14), cut(s.device, 7), cut(s.strategy, 10),
          format_bytes_short(s.reserved), format_bytes_short(s.allocated),
          format_bytes_short(s.peak_allocated), format_bytes_short(s.largest_free_block),
          s.fragmentation, s.oom_count, s.budget ? format_bytes_short(s.budget) : std::string("-"));
      if (s.warning_count > 0) {
        warnings.push_back(fmt::format("pid {} pool {}: {}", p.pid, s.name, s.warning));
      }
    }
    if (p.pools_dropped > 0) {
      out += fmt::format("{:<8} {:<15} ({} more pools not shown: segment full)\n", p.pid,
                         cut(p.process_name, 15), p.pools_dropped);
    }
  }
  out +=
      "FRAG = (RESERVED - ALLOCATED - LARGEST) / RESERVED: the share of the pool free only in "
      "pieces outside its largest free block\n";
  out += "\nCommands:\n";
  for (const ProcessSnapshot& p : v.scan.processes)
    out += fmt::format("  {:<8} {}\n", p.pid,
                       cut(p.command.empty() ? p.process_name : p.command, 100));
  std::vector<std::string> planned;
  for (const ProcessSnapshot& p : v.scan.processes)
    for (const PoolSnapshot& s : p.pools)
      if (s.strategy == "planned" || s.plan_hits + s.plan_misses > 0)
        planned.push_back(fmt::format("pid {} pool {}: {} hits, {} misses; peak reserved {}", p.pid,
                                      s.name, s.plan_hits, s.plan_misses,
                                      format_bytes_short(s.peak_reserved)));
  if (!planned.empty()) {
    out += "\nPlanned arenas:\n";
    for (const auto& line : planned) out += "  " + line + "\n";
  }
  if (!warnings.empty()) {
    out += "\nFallback warnings:\n";
    for (const auto& w : warnings) out += "  " + w + "\n";
  }
  return out;
}

}  // namespace modelmem::monitor
