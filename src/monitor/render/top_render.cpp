// One frame of `modelmem top` (modelmem/monitor/render.hpp), and the lines it shares with
// `modelmem info` (render_internal.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/monitor/render.hpp"
#include "render_internal.hpp"

namespace modelmem::monitor {

namespace detail {

std::string cut(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  return s.substr(0, n - 1) + "~";
}

std::string host_line(const MachineView& v) {
  if (!v.host) return "host: /proc/meminfo unreadable";
  const auto& h = *v.host;
  return fmt::format("host: {} total, {} available, {} used, {} shared memory",
                     format_bytes_short(h.total), format_bytes_short(h.available),
                     format_bytes_short(h.total - std::min(h.total, h.available)),
                     format_bytes_short(h.shmem));
}

std::vector<std::string> device_lines(const MachineView& v) {
  std::vector<std::string> out;
  for (const auto& d : v.devices)
    out.push_back(fmt::format("{}: {} total, {} free, {} used  {}", d.device,
                              format_bytes_short(d.total), format_bytes_short(d.free),
                              format_bytes_short(d.used), d.model));
  for (const auto& n : v.device_notes) out.push_back(n);
  return out;
}

}  // namespace detail

namespace {

using detail::cut;

// "950", "12.5k", "3.1M", "1.0G"
std::string short_count(double v) {
  if (v < 1000) return fmt::format("{:.0f}", v);
  if (v < 1e6) return fmt::format("{:.1f}k", v / 1e3);
  if (v < 1e9) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.1f}G", v / 1e9);
}

}  // namespace

std::string top_frame(const MachineView& v, std::vector<PoolRow> rows, const TopFrame& frame) {
  std::vector<std::string> lines;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  lines.push_back(
      fmt::format("modelmem top  {}  every {:.1f}s  sort:{}  {} proc {} pools  (q quits)", clock,
                  frame.interval_s, frame.sort, v.scan.processes.size(), rows.size()));
  lines.push_back(detail::host_line(v));
  for (const auto& d : detail::device_lines(v)) lines.push_back(d);
  if (!v.scan.stale.empty()) {
    lines.push_back(
        fmt::format("{} stale segment(s) of dead processes: `modelmem info` removes them",
                    v.scan.stale.size()));
  }
  lines.push_back("");
  lines.push_back(fmt::format("{:<7} {:<9} {:<10} {:<6} {:>5} {:>5} {:>5} {:>7} {:>6} {:>4} {:>3}",
                              "PID", "PROCESS", "POOL", "DEVICE", "RESV", "ALLOC", "PEAK",
                              "ALLOC/S", "B/S", "FRAG", "OOM"));
  sort_pool_rows(rows, frame.sort);
  const std::size_t room = frame.height > static_cast<int>(lines.size()) + 1
                               ? static_cast<std::size_t>(frame.height) - lines.size() - 1
                               : 0;
  std::size_t shown = 0;
  for (const PoolRow& r : rows) {
    if (shown == room) break;
    lines.push_back(fmt::format(
        "{:<7} {:<9} {:<10} {:<6} {:>5} {:>5} {:>5} {:>7} {:>6} {:>4.2f} {:>3}", r.pid,
        cut(r.process, 9), cut(r.pool.name, 10), cut(r.pool.device, 6),
        format_bytes_short(r.pool.reserved), format_bytes_short(r.pool.allocated),
        format_bytes_short(r.pool.peak_allocated), short_count(r.alloc_rate),
        format_bytes_short(static_cast<std::uint64_t>(r.byte_rate)), r.pool.fragmentation,
        r.pool.oom_count > 999 ? std::string("999") : std::to_string(r.pool.oom_count)));
    ++shown;
  }
  if (rows.empty()) lines.push_back("No process is publishing modelmem pools.");
  if (shown < rows.size()) lines.push_back(fmt::format("... {} more pools", rows.size() - shown));
  // The legend takes the last line when the pools leave room for it.
  if (!rows.empty() && lines.size() < static_cast<std::size_t>(frame.height))
    lines.push_back("FRAG: share of RESV free outside the largest free block");
  std::string out;
  for (std::size_t i = 0; i < lines.size() && i < static_cast<std::size_t>(frame.height); ++i) {
    std::string line = lines[i];
    if (line.size() > static_cast<std::size_t>(frame.width))
      line.resize(static_cast<std::size_t>(frame.width));
    out += line;
    out += frame.ansi ? "\x1b[K\n" : "\n";  // clear the rest of the line
  }
  return out;
}

}  // namespace modelmem::monitor
