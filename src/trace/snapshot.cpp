// PyTorch and torch_npu memory snapshots read as traces (trace/snapshot.hpp).
#include "modelmem/trace/snapshot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/trace/pickle.hpp"

namespace modelmem::trace {

namespace {

using alloc::EventKind;
using pickle::Document;
using pickle::Id;
using pickle::Kind;
using pickle::Node;

enum class Action {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kFree,
  kSegAlloc,
  kSegFree,
  kMap,
  kUnmap,
  kOom,
  kMark
};

struct Entry {
  Action action = Action::kAlloc;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::optional<double> time_us;
  std::uint32_t device = 0;
  std::string label;  // site (alloc) or mark label
};

struct Live {
  std::uint64_t size = 0;
  std::uint32_t device = 0;
  std::uint64_t stream = 0;
  std::string site;
};

constexpr std::size_t kMaxFramesScanned = 64;

class Converter {
 public:
  Converter(const Document& doc, const std::string& name, std::size_t bytes, bool strict)
      : doc_(doc), name_(name), budget_(bytes + 1024), strict_(strict) {}

  Trace run() {
    const Node& root = doc_.node(doc_.root);
    std::optional<Id> segments, traces;
    if (root.kind == Kind::kList) {
      segments = doc_.root;  // memory_snapshot(): the segments alone
    } else if (root.kind == Kind::kDict) {
      segments = doc_.get_id(doc_.root, "segments");
      traces = doc_.get_id(doc_.root, "device_traces");
      if (!segments && !traces)
        fail("top level", "a dict without 'segments' or 'device_traces': not a memory snapshot");
    } else {
      fail("top level",
           fmt::format("a {}, expected the snapshot dict", pickle::kind_name(root.kind)));
    }
    if (segments) read_segments(*segments);
    if (traces) read_traces(*traces);
    return build(traces.has_value());
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InvalidInput(fmt::format("{}: {}: {}", name_, where, what));
  }
  void spend(const std::string& where) {
    if (budget_-- == 0)
      fail(where, "more entries than the file can hold: shared references inflate it");
  }
  const Node& list(Id id, const std::string& where) const {
    const Node& n = doc_.node(id);
    if (n.kind != Kind::kList && n.kind != Kind::kTuple)
      fail(where, fmt::format("a {}, expected a list", pickle::kind_name(n.kind)));
    return n;
  }
  void dict(Id id, const std::string& where) const {
    const Node& n = doc_.node(id);
    if (n.kind != Kind::kDict)
      fail(where, fmt::format("a {}, expected a dict", pickle::kind_name(n.kind)));
  }
  std::optional<std::uint64_t> uint_field(Id d, const char* key, const std::string& where,
                                          bool required) const {
    const Node* n = doc_.get(d, key);
    if (n == nullptr || n->kind == Kind::kNone) {
      if (required) fail(where, fmt::format("no '{}'", key));
      return std::nullopt;
    }
    auto v = pickle::as_uint(*n);
    if (!v)
      fail(where, fmt::format("'{}' is a {}{}, expected a non-negative int", key,
                              pickle::kind_name(n->kind), n->kind == Kind::kInt ? " below 0" : ""));
    return v;
  }
  std::string str_field(Id d, const char* key) const {
    const Node* n = doc_.get(d, key);
    return n != nullptr && n->kind == Kind::kStr ? n->s : std::string();
  }

  // The innermost frame outside PyTorch's own files, as "file.py:LINE function".
  std::string site_of(Id d, const std::string& where) {
    auto frames = doc_.get_id(d, "frames");
    if (!frames) return {};
    const Node& fl = doc_.node(*frames);
    if (fl.kind != Kind::kList && fl.kind != Kind::kTuple) return {};
    std::string first;
    for (std::size_t i = 0; i < fl.items.size() && i < kMaxFramesScanned; ++i) {
      spend(where);
      Id f = fl.items[i];
      if (doc_.node(f).kind != Kind::kDict) continue;
      std::string file = str_field(f, "filename");
      if (file.empty() || file == "??") continue;
      const Node* line = doc_.get(f, "line");
      auto ln = line ? pickle::as_int(*line) : std::nullopt;
      std::string base =
          file.substr(file.find_last_of('/') == std::string::npos ? 0 : file.find_last_of('/') + 1);
      std::string text = fmt::format("{}:{} {}", base, ln.value_or(0), str_field(f, "name"));
      // Labels go into CSV fields and JSON: printable ASCII only, no commas.
      for (char& c : text)
        if (c == ',' || static_cast<unsigned char>(c) < 0x20 ||
            static_cast<unsigned char>(c) >= 0x7f)
          c = c == ',' ? ' ' : '?';
      // The CSV reader trims fields: so does the label, so a trace round-trips.
      while (!text.empty() && text.back() == ' ') text.pop_back();
      text.erase(0, text.find_first_not_of(' ') == std::string::npos ? text.size()
                                                                     : text.find_first_not_of(' '));
      const bool in_torch = file.find("/torch/") != std::string::npos || file.starts_with("torch/");
      if (!in_torch) return text;
      if (first.empty()) first = std::move(text);
    }
    return first;
  }

  void read_segments(Id id) {
    const Node& segs = list(id, "segments");
    for (std::size_t s = 0; s < segs.items.size(); ++s) {
      const std::string where = fmt::format("segments[{}]", s);
      spend(where);
      Id seg = segs.items[s];
      dict(seg, where);
      const std::uint64_t address = *uint_field(seg, "address", where, true);
      const std::uint64_t total = *uint_field(seg, "total_size", where, true);
      const auto device =
          static_cast<std::uint32_t>(uint_field(seg, "device", where, false).value_or(0));
      const std::uint64_t stream = uint_field(seg, "stream", where, false).value_or(0);
      if (total == 0) fail(where, "total_size 0");
      end_segments_[address] = Live{total, device, stream, {}};
      auto blocks = doc_.get_id(seg, "blocks");
      if (!blocks) continue;
      const Node& bl = list(*blocks, where + ".blocks");
      std::uint64_t offset = address;
      for (std::size_t b = 0; b < bl.items.size(); ++b) {
        const std::string bw = fmt::format("{}.blocks[{}]", where, b);
        spend(bw);
        Id blk = bl.items[b];
        dict(blk, bw);
        const std::uint64_t size = *uint_field(blk, "size", bw, true);
        const std::uint64_t at = uint_field(blk, "address", bw, false).value_or(offset);
        offset = at + size;
        if (str_field(blk, "state") == "active_allocated" && size > 0) {
          const std::uint64_t requested =
              uint_field(blk, "requested_size", bw, false).value_or(size);
          end_blocks_[at] =
              Live{requested > 0 ? requested : size, device, stream, site_of(blk, bw)};
        }
      }
    }
  }

  void read_traces(Id id) {
    const Node& devices = list(id, "device_traces");
    for (std::size_t d = 0; d < devices.items.size(); ++d) {
      const Node& entries = list(devices.items[d], fmt::format("device_traces[{}]", d));
      for (std::size_t i = 0; i < entries.items.size(); ++i) {
        const std::string where = fmt::format("device_traces[{}][{}]", d, i);
        spend(where);
        Id e = entries.items[i];
        dict(e, where);
        const Node* action = doc_.get(e, "action");
        if (action == nullptr || action->kind != Kind::kStr) fail(where, "no 'action' string");
        Entry entry;
        entry.device = static_cast<std::uint32_t>(d);
        const std::string& a = action->s;
        if (a == "alloc")
          entry.action = Action::kAlloc;
        else if (a == "free_requested")
          entry.action = Action::kFreeRequested;
        else if (a == "free_completed")
          entry.action = Action::kFreeCompleted;
        else if (a == "free")
          entry.action = Action::kFree;
        else if (a == "segment_alloc")
          entry.action = Action::kSegAlloc;
        else if (a == "segment_free")
          entry.action = Action::kSegFree;
        else if (a == "segment_map")
          entry.action = Action::kMap;
        else if (a == "segment_unmap")
          entry.action = Action::kUnmap;
        else if (a == "oom")
          entry.action = Action::kOom;
        else if (a == "snapshot" || a == "workspace_snapshot")
          entry.action = Action::kMark;
        else {
          // The action is the file's text: shown on one line, whatever bytes it holds.
          if (strict_) fail(where, fmt::format("unknown action '{}'", core::printable(a, 40)));
          ++skipped_actions_[core::printable(a, 40)];
          continue;
        }
        const bool oom = entry.action == Action::kOom, mark = entry.action == Action::kMark;
        entry.addr = uint_field(e, "addr", where, !oom && !mark).value_or(0);
        entry.size = uint_field(e, "size", where, !mark).value_or(0);
        entry.stream = uint_field(e, "stream", where, false).value_or(0);
        if (!mark && !oom && entry.size == 0) fail(where, fmt::format("{} of 0 bytes", a));
        if (const Node* t = doc_.get(e, "time_us"); t != nullptr && t->kind != Kind::kNone) {
          auto v = pickle::as_number(*t);
          if (!v || !std::isfinite(*v) || *v < 0 || *v > 1.8e16)
            fail(where, "'time_us' is not a time in microseconds");
          entry.time_us = *v;
        }
        if (entry.action == Action::kAlloc) entry.label = site_of(e, where);
        if (mark) entry.label = a;
        entries_.push_back(std::move(entry));
      }
    }
  }

  // free_completed right after its free_requested is the same free; keep one.
  void normalise_frees() {
    std::unordered_set<std::uint64_t> requested;
    std::vector<Entry> out;
    out.reserve(entries_.size());
    for (Entry& e : entries_) {
      if (e.action == Action::kAlloc) requested.erase(e.addr);
      if (e.action == Action::kFreeRequested) requested.insert(e.addr);
      if (e.action == Action::kFreeCompleted) {
        if (requested.erase(e.addr) > 0) continue;
        e.action = Action::kFree;
      }
      if (e.action == Action::kFreeRequested) e.action = Action::kFree;
      out.push_back(std::move(e));
    }
    entries_ = std::move(out);
  }

  Trace build(bool had_traces) {
    Trace trace;
    trace.name = name_;
    bool timed = true;
    for (const Entry& e : entries_) timed = timed && e.time_us.has_value();
    if (timed) {
      std::stable_sort(entries_.begin(), entries_.end(),
                       [](const Entry& a, const Entry& b) { return *a.time_us < *b.time_us; });
    } else if (!entries_.empty()) {
      trace.warnings.push_back(fmt::format(
          "{}: events without time_us (a torch_npu snapshot): kept in file order, 1 us apart; "
          "rates and durations are not real",
          name_));
      for (std::size_t i = 0; i < entries_.size(); ++i)
        entries_[i].time_us = static_cast<double>(i);
    }
    normalise_frees();
    // The state before the first event: the final state with the recorded events undone.
    std::map<std::uint64_t, Live> segs = end_segments_, blocks = end_blocks_;
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->action == Action::kSegAlloc) segs.erase(it->addr);
      if (it->action == Action::kSegFree)
        segs.try_emplace(it->addr, Live{it->size, it->device, it->stream, {}});
      if (it->action == Action::kAlloc) blocks.erase(it->addr);
      if (it->action == Action::kFree)
        blocks.try_emplace(it->addr, Live{it->size, it->device, it->stream, {}});
    }
    const std::uint64_t t0 =
        entries_.empty() ? 0 : static_cast<std::uint64_t>(*entries_.front().time_us * 1000.0);
    for (const auto& [addr, l] : segs)
      trace.events.push_back(
          {EventKind::kSegmentAlloc, t0, addr, l.size, l.stream, l.device, 0, {}, 0});
    for (const auto& [addr, l] : blocks)
      trace.events.push_back(
          {EventKind::kAlloc, t0, addr, l.size, l.stream, l.device, 0, l.site, 0});
    if (had_traces && (!segs.empty() || !blocks.empty()))
      trace.warnings.push_back(fmt::format(
          "{}: {} segment(s) and {} live block(s) existed before the first recorded event; they "
          "are added at its start",
          name_, segs.size(), blocks.size()));
    if (!had_traces || entries_.empty())
      trace.warnings.push_back(fmt::format(
          "{}: no recorded events (history was off): the trace is the state at the snapshot",
          name_));
    for (const Entry& e : entries_) {
      EventKind kind = EventKind::kAlloc;
      switch (e.action) {
        case Action::kAlloc:
          kind = EventKind::kAlloc;
          break;
        case Action::kFree:
        case Action::kFreeRequested:
        case Action::kFreeCompleted:
          kind = EventKind::kFree;
          break;
        case Action::kSegAlloc:
          kind = EventKind::kSegmentAlloc;
          break;
        case Action::kSegFree:
          kind = EventKind::kSegmentFree;
          break;
        case Action::kMap:
          kind = EventKind::kMap;
          break;
        case Action::kUnmap:
          kind = EventKind::kUnmap;
          break;
        case Action::kOom:
          kind = EventKind::kOom;
          break;
        case Action::kMark:
          kind = EventKind::kMark;
          break;
      }
      const auto t = static_cast<std::uint64_t>(*e.time_us * 1000.0);
      const bool no_address = kind == EventKind::kOom || kind == EventKind::kMark;
      trace.events.push_back({kind, t, no_address ? 0 : e.addr,
                              kind == EventKind::kMark ? 0 : e.size, e.stream, e.device, 0, e.label,
                              0});
    }
    for (const auto& [action, count] : skipped_actions_)
      trace.warnings.push_back(fmt::format("{}: skipped {} entr{} of unknown action '{}'", name_,
                                           count, count == 1 ? "y" : "ies", action));
    return trace;
  }

  const Document& doc_;
  const std::string& name_;
  std::size_t budget_;
  bool strict_;
  std::map<std::uint64_t, Live> end_segments_, end_blocks_;
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> skipped_actions_;
};

}  // namespace

Trace parse_snapshot(std::string_view data, const std::string& name, const ReadOptions& options) {
  Document doc = pickle::parse(data, name);
  return Converter(doc, name, data.size(), !options.skip_bad).run();
}

Trace read_snapshot(const std::filesystem::path& path, const ReadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(fmt::format("{}: cannot open snapshot", path.string()));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InvalidInput(fmt::format("{}: read error", path.string()));
  return parse_snapshot(data, path.string(), options);
}

bool is_snapshot_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char head[2] = {0, 0};
  if (!in.read(head, 2)) return false;
  return pickle::looks_like_pickle(std::string_view(head, 2));
}

std::vector<AllocationSite> allocation_sites(const Trace& trace, std::size_t top) {
  std::unordered_map<std::string, AllocationSite> by_site;
  const Blocks blocks = match_blocks(trace);
  for (const Block& b : blocks.blocks) {
    const TraceEvent& e = trace.events[b.alloc_index];
    if (e.label.empty()) continue;
    AllocationSite& s = by_site[e.label];
    s.site = e.label;
    ++s.allocs;
    s.bytes += b.size;
    if (b.free_index == kNever) s.live_at_end += b.size;
  }
  std::vector<AllocationSite> out;
  out.reserve(by_site.size());
  for (auto& [site, s] : by_site) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const AllocationSite& a, const AllocationSite& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (out.size() > top) out.resize(top);
  return out;
}

std::string sites_text(const std::vector<AllocationSite>& sites) {
  if (sites.empty()) return {};
  std::string out = "allocation sites (most bytes allocated first)\n";
  for (const AllocationSite& s : sites)
    out += fmt::format("  {:>12} in {:>7} allocs, {:>12} live at the end  {}\n",
                       format_bytes(s.bytes), s.allocs, format_bytes(s.live_at_end), s.site);
  return out;
}

}  // namespace modelmem::trace
