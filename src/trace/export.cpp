// Trace exports: Perfetto JSON, the memory series the viewer draws, and `modelmem trace`'s
// conversions (trace/export.hpp).
#include "modelmem/trace/export.hpp"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"

namespace modelmem::trace {

namespace {
using alloc::EventKind;
}

std::vector<MemoryPoint> memory_series(const Trace& trace, const Blocks& blocks,
                                       bool* has_reserved) {
  std::vector<MemoryPoint> out;
  std::map<std::uint32_t, std::pair<std::size_t, std::size_t>> pools;  // allocated, reserved
  bool reserved_known = false;
  // A block whose free was lost is closed by the next alloc at its address (match_blocks).
  std::vector<std::size_t> closed_by(trace.events.size(), kNever);
  for (std::size_t b = 0; b < blocks.blocks.size(); ++b) {
    std::size_t f = blocks.blocks[b].free_index;
    if (f != kNever && trace.events[f].kind == EventKind::kAlloc) closed_by[f] = b;
  }
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    auto& [allocated, reserved] = pools[e.pool];
    switch (e.kind) {
      case EventKind::kAlloc: {
        if (closed_by[i] != kNever) {
          const Block& old = blocks.blocks[closed_by[i]];
          pools[old.pool].first -= old.size;
        }
        allocated += e.size;
        break;
      }
      case EventKind::kFree: {
        std::size_t b = blocks.block_of_event[i];
        if (b == kNever) continue;
        allocated -= blocks.blocks[b].size;
        break;
      }
      case EventKind::kSegmentAlloc:
      case EventKind::kMap:
        reserved += e.size;
        reserved_known = true;
        break;
      case EventKind::kSegmentFree:
      case EventKind::kUnmap:
        reserved = reserved >= e.size ? reserved - e.size : 0;
        reserved_known = true;
        break;
      default:
        continue;
    }
    out.push_back({i, e.time_ns, e.pool, allocated, reserved});
  }
  if (has_reserved != nullptr) *has_reserved = reserved_known;
  return out;
}

void write_perfetto_json(const Trace& trace, std::ostream& out) {
  using nlohmann::json;
  const Blocks blocks = match_blocks(trace);
  bool has_reserved = false;
  const auto series = memory_series(trace, blocks, &has_reserved);
  const std::uint64_t t0 = trace.events.empty() ? 0 : trace.events.front().time_ns;
  auto us = [t0](std::uint64_t ns) { return static_cast<double>(ns - std::min(ns, t0)) / 1000.0; };
  json events = json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"args", {{"name", "modelmem: " + trace.name}}}});
  for (const MemoryPoint& p : series) {
    json args = {{"allocated", p.allocated}};
    if (has_reserved) args["reserved"] = p.reserved;
    events.push_back({{"name", "pool " + std::to_string(p.pool)},
                      {"ph", "C"},
                      {"ts", us(p.time_ns)},
                      {"pid", 1},
                      {"args", args}});
  }
  std::uint64_t step_begin = 0;
  bool in_step = false;
  std::size_t step = 0;
  for (const TraceEvent& e : trace.events) {
    if (e.kind == EventKind::kOom) {
      events.push_back({{"name", "oom"},
                        {"ph", "i"},
                        {"s", "g"},
                        {"ts", us(e.time_ns)},
                        {"pid", 1},
                        {"tid", e.thread},
                        {"args", {{"size", e.size}, {"stream", e.stream}, {"pool", e.pool}}}});
    } else if (e.kind == EventKind::kMark) {
      events.push_back({{"name", e.label.empty() ? "mark" : e.label},
                        {"ph", "i"},
                        {"s", "g"},
                        {"ts", us(e.time_ns)},
                        {"pid", 1},
                        {"tid", e.thread}});
      if (e.label == "step_begin" || e.label == "step_begin_auto") {
        step_begin = e.time_ns;
        in_step = true;
      } else if ((e.label == "step_end" || e.label == "step_end_auto") && in_step) {
        events.push_back({{"name", "step " + std::to_string(step++)},
                          {"ph", "X"},
                          {"ts", us(step_begin)},
                          {"dur", us(e.time_ns) - us(step_begin)},
                          {"pid", 1},
                          {"tid", 0}});
        in_step = false;
      }
    }
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  if (trace.dropped > 0) doc["metadata"] = {{"dropped_events", trace.dropped}};
  out << doc.dump() << '\n';
}

std::string conversion_format(const ConvertRequest& request) {
  std::string format = request.format;
  if (format.empty()) {
    const std::string& out = request.output;
    if (out.ends_with(".json"))
      format = "perfetto";
    else if (out.ends_with(".csv"))
      format = "csv";
    else
      throw InvalidInput(fmt::format(
          "{}: unknown output extension: name the file .csv (modelmem trace CSV) or .json "
          "(Perfetto), or give --format csv|perfetto|problem",
          out));
  }
  if (format != "csv" && format != "perfetto" && format != "problem")
    throw InvalidInput(fmt::format("--format {}: expected csv, perfetto or problem", format));
  if (format != "problem" && (request.step || request.window || request.live_in))
    throw InvalidInput(fmt::format(
        "--step, --window and --live-in apply only to --format problem (the format is {})",
        format));
  if (request.step && request.window)
    throw InvalidInput("--step and --window both choose the window: give one");
  return format;
}

void write_problem_csv(const plan::Problem& problem, std::ostream& out) {
  out << "id,lower,upper,size\n";
  for (const plan::Buffer& b : problem.buffers)
    out << b.id << ',' << b.start << ',' << b.end << ',' << b.size << '\n';
}

Conversion convert_trace(const ConvertRequest& request) {
  Conversion c;
  c.format = conversion_format(request);
  Trace t =
      read_traces(std::vector<std::filesystem::path>(request.inputs.begin(), request.inputs.end()),
                  request.read);
  c.events = t.events.size();
  c.warnings = t.warnings;
  std::ostringstream out;
  if (c.format == "csv") {
    write_csv(t, out);
  } else if (c.format == "perfetto") {
    write_perfetto_json(t, out);
  } else {
    Window window{0, t.events.size()};
    if (request.window) {
      window = *request.window;
    }
    const Blocks blocks = match_blocks(t);
    if (!request.window && request.step) {
      // The steps `modelmem analyze` lists: from the marks, else from the repeating period.
      StepWindows steps = find_step_windows(t, blocks);
      if (steps.windows.empty())
        throw InvalidInput(
            fmt::format("{}: --step {} but the trace has no steps: no step marks and no repeating "
                        "allocation pattern (use --window BEGIN:END)",
                        t.name, *request.step));
      if (*request.step >= steps.windows.size())
        throw InvalidInput(fmt::format("{}: --step {} but the trace has {} steps ({}), 0 to {}",
                                       t.name, *request.step, steps.windows.size(),
                                       steps.from_marks ? "from marks" : "from the period",
                                       steps.windows.size() - 1));
      window = steps.windows[*request.step];
    }
    ProblemOptions options;
    options.include_live_in = request.live_in;
    const plan::Problem problem = to_problem(t, blocks, window, options);
    c.window = window;
    c.buffers = problem.buffers.size();
    write_problem_csv(problem, out);
  }
  c.text = std::move(out).str();
  return c;
}

}  // namespace modelmem::trace
