// Traces in memory: reading and writing the CSV, blocks, steps, problems (trace/trace.hpp).
#include "modelmem/trace/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <istream>
#include <iterator>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/trace/recorder.hpp"

namespace modelmem::trace {

namespace {

// Fields and lines lose blanks, tabs and the carriage return of a CRLF file.
std::string_view trim(std::string_view s) {
  return core::trim(s, " \t\r");
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(trim(line.substr(start)));
      return out;
    }
    out.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  T value{};
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

// Collects warnings by kind, keeping the first few of each and counting the rest.
class Warnings {
 public:
  explicit Warnings(std::size_t keep) : keep_(keep) {}
  void add(const std::string& kind, std::string message) {
    auto& entry = kinds_[kind];
    if (entry.count++ < keep_) entry.messages.push_back(std::move(message));
  }
  void flush(std::vector<std::string>& out) const {
    for (const auto& [kind, entry] : kinds_) {
      out.insert(out.end(), entry.messages.begin(), entry.messages.end());
      if (entry.count > entry.messages.size())
        out.push_back(
            fmt::format("... and {} more: {}", entry.count - entry.messages.size(), kind));
    }
  }

 private:
  struct Entry {
    std::size_t count = 0;
    std::vector<std::string> messages;
  };
  std::size_t keep_;
  std::map<std::string, Entry> kinds_;
};

// Bytes no text trace holds (NUL and other control bytes but tab), as in a model or a pickle.
bool binary(std::string_view text) {
  for (unsigned char c : text)
    if (c == 0 || (c < 0x20 && c != '\t') || c == 0x7f) return true;
  return false;
}

enum Column { kEvent, kTime, kAddress, kSize, kStream, kPool, kThread, kLabel, kColumns };
constexpr const char* kColumnNames[kColumns] = {"event",  "time_ns", "address", "size",
                                                "stream", "pool",    "thread",  "label"};

}  // namespace

Trace parse_trace(std::istream& in, const std::string& name, const ReadOptions& options) {
  Trace trace;
  trace.name = name;
  Warnings warnings(options.max_warnings_per_kind);
  std::string line;
  std::size_t line_no = 0;
  int column_of[kColumns];
  std::fill(std::begin(column_of), std::end(column_of), -1);
  bool have_header = false;
  std::size_t columns = 0;
  std::uint64_t last_time = 0;
  std::size_t out_of_order = 0;

  auto malformed = [&](const std::string& kind, const std::string& what) {
    if (!options.skip_bad)
      throw InvalidInput(
          fmt::format("{}:{}: {} (--skip-bad skips malformed lines)", name, line_no, what));
    ++trace.skipped_lines;
    warnings.add(kind, fmt::format("{}:{}: {}; line skipped", name, line_no, what));
  };

  while (std::getline(in, line)) {
    ++line_no;
    const bool complete = !in.eof();  // the last line lacked its newline: maybe truncated
    std::string_view text = trim(line);
    if (text.empty()) continue;
    if (text.front() == '#') {
      std::string_view comment = trim(text.substr(1));
      if (comment.starts_with("dropped=")) {
        auto n = parse_number<std::uint64_t>(comment.substr(8));
        if (!n) {
          malformed("bad comment",
                    fmt::format("bad dropped count '{}'", core::printable(comment.substr(8))));
        } else {
          trace.dropped = std::max(trace.dropped, *n);
        }
      }
      continue;
    }
    if (!have_header && binary(text))
      throw InvalidInput(fmt::format(
          "{}: not a trace: binary data where a CSV header should be (an ONNX model goes to "
          "`modelmem plan`, a PyTorch snapshot pickle to `modelmem trace`)",
          name));
    auto fields = split(text);
    if (!have_header) {
      if (plan::is_tracker_blocks(text)) {  // MindSpore's memory_block.csv: read the rest as one
        std::string rest(line);
        rest += '\n';
        rest.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (in.bad()) throw InvalidInput(fmt::format("{}: read error", name));
        return from_tracker(plan::parse_tracker_blocks(rest, name, line_no, options.skip_bad));
      }
      for (std::size_t i = 0; i < fields.size(); ++i)
        for (int c = 0; c < kColumns; ++c)
          if (fields[i] == kColumnNames[c]) column_of[c] = static_cast<int>(i);
      if (column_of[kEvent] < 0 || column_of[kTime] < 0)
        throw InvalidInput(fmt::format(
            "{}:{}: not a trace: the header must name the columns 'event' and 'time_ns' (got '{}')",
            name, line_no, core::printable(text)));
      have_header = true;
      columns = fields.size();
      continue;
    }
    if (fields.size() < columns) {
      malformed(complete ? "short line" : "truncated line",
                fmt::format("{} fields where the header has {}{}", fields.size(), columns,
                            complete ? "" : " (truncated last line)"));
      continue;
    }
    auto field = [&](Column c) -> std::string_view {
      return column_of[c] < 0 ? std::string_view{} : fields[static_cast<std::size_t>(column_of[c])];
    };
    TraceEvent e;
    e.line = line_no;
    auto kind = parse_event_name(field(kEvent));
    if (!kind) {
      malformed("unknown event", fmt::format("unknown event '{}'", core::printable(field(kEvent))));
      continue;
    }
    e.kind = *kind;
    auto time = parse_number<std::uint64_t>(field(kTime));
    if (!time) {
      malformed("bad time", fmt::format("bad time_ns '{}'", core::printable(field(kTime))));
      continue;
    }
    e.time_ns = *time;
    const bool mark = e.kind == alloc::EventKind::kMark;
    bool ok = true;
    auto number = [&](Column c, auto& target, bool required) {
      std::string_view s = field(c);
      if (s.empty()) {
        if (required) {
          malformed("missing field", fmt::format("{} event without {}",
                                                 core::printable(field(kEvent)), kColumnNames[c]));
          ok = false;
        }
        return;
      }
      auto v = parse_number<std::remove_reference_t<decltype(target)>>(s);
      if (!v) {
        malformed(fmt::format("bad {}", kColumnNames[c]),
                  fmt::format("bad {} '{}'", kColumnNames[c], core::printable(s)));
        ok = false;
        return;
      }
      target = *v;
    };
    number(kAddress, e.address, !mark && e.kind != alloc::EventKind::kOom);
    if (ok) number(kSize, e.size, e.kind == alloc::EventKind::kAlloc);
    if (ok) number(kStream, e.stream, false);
    if (ok) number(kPool, e.pool, false);
    if (ok) number(kThread, e.thread, false);
    if (!ok) continue;
    if (!mark && e.kind != alloc::EventKind::kOom && e.kind != alloc::EventKind::kFree &&
        e.size == 0) {
      malformed("zero size", fmt::format("{} of 0 bytes", field(kEvent)));
      continue;
    }
    e.label = std::string(field(kLabel));
    if (e.time_ns < last_time) {
      if (out_of_order++ == 0)
        warnings.add("order", fmt::format("{}:{}: time goes backwards ({} ns after {} ns); events "
                                          "are kept in file order",
                                          name, line_no, e.time_ns, last_time));
    }
    last_time = std::max(last_time, e.time_ns);
    trace.events.push_back(std::move(e));
  }
  if (in.bad()) throw InvalidInput(fmt::format("{}: read error", name));
  if (!have_header) throw InvalidInput(fmt::format("{}: empty file, no trace header", name));
  if (trace.skipped_lines > 0)
    warnings.add("skipped summary",
                 fmt::format("{}: skipped {} malformed line(s)", name, trace.skipped_lines));
  if (out_of_order > 1)
    warnings.add("order summary",
                 fmt::format("{}: {} events out of time order", name, out_of_order));
  if (trace.dropped > 0)
    warnings.add("dropped", fmt::format("{}: the recorder dropped {} events (ring buffer full); "
                                        "numbers below undercount",
                                        name, trace.dropped));
  warnings.flush(trace.warnings);
  return trace;
}

void write_csv(const Trace& trace, std::ostream& out) {
  out << kCsvHeader << '\n';
  char line[256];
  std::string label;
  for (const TraceEvent& e : trace.events) {
    label = e.label;
    for (char& c : label)
      if (c == ',' || c == '\n' || c == '\r') c = '_';
    alloc::Event raw{e.kind,   e.time_ns, e.address, e.size,
                     e.stream, e.pool,    e.thread,  label.empty() ? nullptr : label.c_str()};
    std::size_t n = format_csv_line(raw, line, sizeof line);
    if (n == 0) {
      // A label too long for the fixed line: write it without the label limit.
      raw.label = nullptr;
      n = format_csv_line(raw, line, sizeof line);
      out.write(line, static_cast<std::streamsize>(n - 1));
      out << label << '\n';
      continue;
    }
    out.write(line, static_cast<std::streamsize>(n));
  }
  if (trace.dropped > 0) out << "# dropped=" << trace.dropped << '\n';
}

void write_csv(const Trace& trace, const std::filesystem::path& path) {
  std::ostringstream out;
  write_csv(trace, out);
  core::write_file_replacing(path.string(), out.str(), 0600);  // never through a symlink
}

Trace from_recorder(Recorder& recorder, std::string name) {
  Trace trace;
  trace.name = std::move(name);
  recorder.drain(
      [](const alloc::Event& e, void* ctx) {
        auto* t = static_cast<Trace*>(ctx);
        t->events.push_back(TraceEvent{e.kind, e.time_ns, e.address, e.size, e.stream, e.pool,
                                       e.thread, e.label != nullptr ? e.label : "", 0});
      },
      &trace);
  trace.dropped = recorder.dropped();
  if (trace.dropped > 0)
    trace.warnings.push_back(fmt::format("{}: the recorder dropped {} events (ring buffer full)",
                                         trace.name, trace.dropped));
  return trace;
}

Blocks match_blocks(const Trace& trace) {
  Blocks out;
  out.block_of_event.assign(trace.events.size(), kNever);
  std::unordered_map<std::uintptr_t, std::size_t> live;
  live.reserve(1024);
  std::size_t first_reuse_line = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.kind == alloc::EventKind::kAlloc) {
      auto [it, inserted] = live.try_emplace(e.address, out.blocks.size());
      if (!inserted) {
        // The free of the earlier block was lost (e.g. dropped by the recorder): close it here.
        out.blocks[it->second].free_index = i;
        if (out.reused_live_addresses++ == 0) first_reuse_line = e.line;
        it->second = out.blocks.size();
      }
      out.block_of_event[i] = out.blocks.size();
      out.blocks.push_back(Block{e.address, e.size, i, kNever, e.pool, e.stream});
    } else if (e.kind == alloc::EventKind::kFree) {
      auto it = live.find(e.address);
      if (it == live.end()) {
        if (out.unknown_frees++ == 0) out.first_unknown_free_line = e.line;
        continue;
      }
      out.blocks[it->second].free_index = i;
      out.block_of_event[i] = it->second;
      live.erase(it);
    }
  }
  if (out.unknown_frees > 0)
    out.warnings.push_back(fmt::format(
        "{}: skipped {} free(s) of addresses with no live block (first at line {}): memory "
        "allocated before recording started, or an allocation the recorder dropped",
        trace.name, out.unknown_frees, out.first_unknown_free_line));
  if (out.reused_live_addresses > 0)
    out.warnings.push_back(fmt::format(
        "{}: {} allocation(s) at an address that was still live (first at line {}): the free in "
        "between is missing; the earlier block is taken as freed there",
        trace.name, out.reused_live_addresses, first_reuse_line));
  return out;
}

std::vector<std::size_t> live_bytes_after(const Trace& trace, const Blocks& blocks) {
  std::vector<std::size_t> closed_by_alloc(trace.events.size(), 0);
  for (const Block& b : blocks.blocks)
    if (b.free_index != kNever && trace.events[b.free_index].kind == alloc::EventKind::kAlloc)
      closed_by_alloc[b.free_index] += b.size;
  std::vector<std::size_t> after(trace.events.size(), 0);
  std::size_t live = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const std::size_t b = blocks.block_of_event[i];
    if (b != kNever) {
      if (trace.events[i].kind == alloc::EventKind::kAlloc)
        live = live - closed_by_alloc[i] + blocks.blocks[b].size;
      else if (blocks.blocks[b].free_index == i)
        live -= blocks.blocks[b].size;
    }
    after[i] = live;
  }
  return after;
}

std::size_t peak_live_bytes(const Trace& trace, const Blocks& blocks) {
  std::size_t peak = 0;
  for (std::size_t v : live_bytes_after(trace, blocks)) peak = std::max(peak, v);
  return peak;
}

std::vector<Window> marked_steps(const Trace& trace) {
  std::vector<Window> steps;
  std::size_t open = kNever;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.kind != alloc::EventKind::kMark) continue;
    if (e.label == "step_begin") {
      if (open != kNever) steps.push_back({open, i});
      open = i + 1;
    } else if (e.label == "step_end" && open != kNever) {
      steps.push_back({open, i});
      open = kNever;
    }
  }
  if (open != kNever && open < trace.events.size()) steps.push_back({open, trace.events.size()});
  return steps;
}

plan::Problem to_problem(const Trace& trace, const Blocks& blocks, Window window,
                         const ProblemOptions& options) {
  if (window.begin > window.end || window.end > trace.events.size())
    throw InvalidInput(fmt::format("{}: window [{}, {}) outside the trace's {} events", trace.name,
                                   window.begin, window.end, trace.events.size()));
  // Time of each event: its index among the window's alloc/free events.
  std::vector<plan::Time> time_of(window.size(), 0);
  plan::Time t = 0;
  for (std::size_t i = window.begin; i < window.end; ++i) {
    time_of[i - window.begin] = t;
    auto k = trace.events[i].kind;
    if (k == alloc::EventKind::kAlloc || k == alloc::EventKind::kFree) ++t;
  }
  const plan::Time last = t > 0 ? t - 1 : 0;
  plan::Problem problem;
  problem.name = fmt::format("{} [{}, {})", trace.name, window.begin, window.end);
  std::size_t next_id = 0;
  for (const Block& b : blocks.blocks) {
    const bool inside = b.alloc_index >= window.begin && b.alloc_index < window.end;
    const bool live_in =
        b.alloc_index < window.begin && (b.free_index == kNever || b.free_index >= window.begin);
    if (!inside && !(live_in && options.include_live_in)) continue;
    plan::Buffer buffer;
    buffer.id = std::to_string(next_id++);
    buffer.size = b.size;
    buffer.alignment = options.alignment;
    buffer.start = inside ? time_of[b.alloc_index - window.begin] : 0;
    if (b.free_index != kNever && b.free_index < window.end) {
      buffer.end = time_of[b.free_index - window.begin];
    } else {
      buffer.end = last;
    }
    // A block allocated and freed with nothing in between still needs a non-empty lifetime.
    if (buffer.end <= buffer.start) buffer.end = buffer.start + 1;
    problem.buffers.push_back(std::move(buffer));
  }
  return problem;
}

plan::Problem to_problem(const Trace& trace, Window window, const ProblemOptions& options) {
  return to_problem(trace, match_blocks(trace), window, options);
}

}  // namespace modelmem::trace
