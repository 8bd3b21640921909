// PyTorch and torch_npu memory snapshots read as traces (trace/snapshot.hpp).
#include "modelmem/trace/snapshot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/trace/pickle.hpp"
#include "snapshot_history.hpp"
#include "snapshot_internal.hpp"

namespace modelmem::trace {

namespace {

using alloc::EventKind;
using pickle::Document;
using pickle::Id;
using pickle::Kind;
using pickle::Node;

using detail::Action;
using detail::Entry;
using detail::HistoryCheck;
using detail::Live;

// A pool: (device, segment_pool_id); has_id false where the file has no segment_pool_id.
struct PoolKey {
  std::uint32_t device = 0;
  bool has_id = false;
  std::int64_t first = 0, second = 0;
  auto operator<=>(const PoolKey&) const = default;
};

struct PoolTally {
  SnapshotPool pool;
  std::map<std::string, std::size_t> site_bytes;
};

struct Site {
  std::string label;
  bool kv_cache = false;
};

struct Annotation {
  std::string name;
  bool start = false;
  std::uint32_t device = 0;
  double time_us = 0;
};

// Stacks recorded with C++ frames ("all") put 20-30 frames of PyTorch and the interpreter
// before the program's; a spawned worker's stack holds well over 100.
constexpr std::size_t kMaxFramesScanned = 256;
constexpr std::size_t kMaxFunctionChars = 100;

class Converter {
 public:
  Converter(const Document& doc, const std::string& name, std::size_t bytes, bool strict)
      : doc_(doc), name_(name), budget_(bytes + 1024), strict_(strict), history_(name) {}

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
    if (root.kind == Kind::kDict)
      if (auto annotations = doc_.get_id(doc_.root, "external_annotations"))
        read_annotations(*annotations);
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

  // The innermost frame of the program (not PyTorch's, the runtime's or the interpreter's:
  // is_runtime_frame), as "file.py:LINE function"; when there is none, the innermost frame
  // with a file.
  Site site_of(Id d, const std::string& where) {
    auto frames = doc_.get_id(d, "frames");
    if (!frames) return {};
    const Node& fl = doc_.node(*frames);
    if (fl.kind != Kind::kList && fl.kind != Kind::kTuple) return {};
    std::string first;
    for (std::size_t i = 0; i < fl.items.size() && i < kMaxFramesScanned; ++i) {
      spend(where);
      Id f = fl.items[i];
      if (doc_.node(f).kind != Kind::kDict) continue;
      const std::string file = str_field(f, "filename");
      const std::string function = str_field(f, "name");
      const bool runtime = is_runtime_frame(file, function);
      if (runtime && (!first.empty() || file.empty() || file == "??")) continue;
      const Node* line = doc_.get(f, "line");
      auto ln = line ? pickle::as_int(*line) : std::nullopt;
      const std::size_t slash = file.find_last_of("/\\");
      std::string text = fmt::format(
          "{}:{} {}", file.substr(slash == std::string::npos ? 0 : slash + 1), ln.value_or(0),
          function.size() > kMaxFunctionChars ? function.substr(0, kMaxFunctionChars) + "..."
                                              : function);
      // Labels go into CSV fields and JSON: printable ASCII only, no commas.
      for (char& c : text)
        if (c == ',' || static_cast<unsigned char>(c) < 0x20 ||
            static_cast<unsigned char>(c) >= 0x7f)
          c = c == ',' ? ' ' : '?';
      // The CSV reader trims fields: so does the label, so a trace round-trips.
      while (!text.empty() && text.back() == ' ') text.pop_back();
      text.erase(0, text.find_first_not_of(' ') == std::string::npos ? text.size()
                                                                     : text.find_first_not_of(' '));
      if (!runtime) return {std::move(text), is_kv_cache_site(file, function)};
      first = std::move(text);
    }
    return {std::move(first), false};
  }

  // segment_pool_id: a pair of ints ((0, 0) the default pool); absent in files before 2.1.
  PoolKey pool_key(Id seg, std::uint32_t device, const std::string& where) {
    PoolKey key{device, false, 0, 0};
    const Node* id = doc_.get(seg, "segment_pool_id");
    if (id == nullptr || id->kind == Kind::kNone) return key;
    std::optional<std::int64_t> a, b;
    if ((id->kind == Kind::kList || id->kind == Kind::kTuple) && id->items.size() == 2) {
      a = pickle::as_int(doc_.node(id->items[0]));
      b = pickle::as_int(doc_.node(id->items[1]));
    }
    if (!a || !b) fail(where, "'segment_pool_id' is not a pair of ints");
    has_pool_ids_ = true;
    return PoolKey{device, true, *a, *b};
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
      if (HistoryCheck::wraps(address, total)) {
        history_.wrapped(where, address, total);
        continue;
      }
      const PoolKey key = pool_key(seg, device, where);
      end_segments_[address] = Live{total, device, stream, {}};
      segment_pool_[address] = key;
      PoolTally& tally = pools_[key];
      ++tally.pool.segments;
      tally.pool.reserved += total;
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
        // PyTorch 2.0 keeps the address and the frames in the block's last 'history' entry.
        Id frames_of = blk;
        std::optional<std::uint64_t> at = uint_field(blk, "address", bw, false);
        if (auto history = doc_.get_id(blk, "history")) {
          const Node& hl = list(*history, bw + ".history");
          if (!hl.items.empty() && doc_.node(hl.items.back()).kind == Kind::kDict) {
            frames_of = hl.items.back();
            if (!at) at = uint_field(frames_of, "addr", bw + ".history", false);
          }
        }
        const std::uint64_t start = at.value_or(offset);
        if (HistoryCheck::wraps(start, size)) {
          history_.wrapped(bw, start, size);
          break;  // the blocks after it have no address to follow from
        }
        offset = start + size;
        const std::string state = str_field(blk, "state");
        if (state == "active_pending_free") tally.pool.pending_free += size;
        if (state == "active_allocated" && size > 0) {
          const std::uint64_t requested =
              uint_field(blk, "requested_size", bw, false).value_or(size);
          Site site = site_of(frames_of, bw);
          ++tally.pool.blocks;
          tally.pool.allocated += size;
          tally.pool.requested += requested > 0 ? requested : size;
          if (site.kv_cache) tally.pool.kv_cache += size;
          if (!site.label.empty()) tally.site_bytes[site.label] += size;
          end_blocks_[start] =
              Live{requested > 0 ? requested : size, device, stream, std::move(site.label)};
        }
      }
    }
  }

  void read_traces(Id id) {
    const Node& devices = list(id, "device_traces");
    for (std::size_t d = 0; d < devices.items.size(); ++d) {
      const Node& entries = list(devices.items[d], fmt::format("device_traces[{}]", d));
      std::optional<double> latest;  // the latest time_us so far on this device
      for (std::size_t i = 0; i < entries.items.size(); ++i) {
        const std::string where = fmt::format("device_traces[{}][{}]", d, i);
        spend(where);
        Id e = entries.items[i];
        dict(e, where);
        const Node* action = doc_.get(e, "action");
        if (action == nullptr || action->kind != Kind::kStr) fail(where, "no 'action' string");
        Entry entry;
        entry.device = static_cast<std::uint32_t>(d);
        entry.index = i;
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
          history_.timed(entry, latest);
        }
        if (entry.action == Action::kAlloc) entry.label = site_of(e, where).label;
        if (mark) entry.label = a;
        entries_.push_back(std::move(entry));
      }
    }
  }

  // Profiler record_function marks: {name, stage START|END, device, time_us}.
  void read_annotations(Id id) {
    const Node& items = list(id, "external_annotations");
    for (std::size_t i = 0; i < items.items.size(); ++i) {
      const std::string where = fmt::format("external_annotations[{}]", i);
      spend(where);
      Id a = items.items[i];
      dict(a, where);
      Annotation annotation;
      annotation.name = core::printable(str_field(a, "name"), 80);
      const std::string stage = str_field(a, "stage");
      const Node* t = doc_.get(a, "time_us");
      auto time = t != nullptr ? pickle::as_number(*t) : std::nullopt;
      if ((stage != "START" && stage != "END") || !time || !std::isfinite(*time) || *time < 0 ||
          *time > 1.8e16) {
        if (strict_) fail(where, "not a START or END mark with a time_us");
        ++skipped_annotations_;
        continue;
      }
      annotation.start = stage == "START";
      annotation.device =
          static_cast<std::uint32_t>(uint_field(a, "device", where, false).value_or(0));
      annotation.time_us = *time;
      annotations_.push_back(std::move(annotation));
    }
  }

  // The annotation that repeats becomes the step: ProfilerStep#N (one name per step; its END
  // ends the step) first, else the name started most often (the earliest on a tie). A step
  // begins at each of its STARTs.
  void add_step_marks(std::vector<std::string>& warnings) {
    if (annotations_.empty()) return;
    auto key = [](const std::string& name) {
      return name.starts_with("ProfilerStep#") ? std::string("ProfilerStep#") : name;
    };
    std::map<std::string, std::pair<std::size_t, double>> starts;  // key -> count, first time
    for (const Annotation& a : annotations_) {
      if (!a.start) continue;
      auto [it, fresh] = starts.try_emplace(key(a.name), 0, a.time_us);
      ++it->second.first;
      it->second.second = std::min(it->second.second, a.time_us);
    }
    std::string chosen;
    std::pair<std::size_t, double> best{0, 0};
    for (const auto& [k, v] : starts) {
      if (v.first < 2) continue;
      const bool better =
          chosen.empty() || (k == "ProfilerStep#") ||
          (chosen != "ProfilerStep#" &&
           (v.first > best.first || (v.first == best.first && v.second < best.second)));
      if (better) {
        chosen = k;
        best = v;
      }
    }
    if (chosen.empty()) {
      warnings.push_back(
          fmt::format("{}: {} external annotation(s), none started twice: no step marks from them",
                      name_, annotations_.size()));
      return;
    }
    for (const Entry& e : entries_)
      if (!e.time_us) {
        warnings.push_back(fmt::format(
            "{}: external annotations not used as steps: the events have no time_us", name_));
        return;
      }
    const bool profiler_step = chosen == "ProfilerStep#";
    for (const Annotation& a : annotations_) {
      if (key(a.name) != chosen || (!a.start && !profiler_step)) continue;
      Entry mark;
      mark.action = Action::kMark;
      mark.device = a.device;
      mark.time_us = a.time_us;
      mark.label = a.start ? "step_begin" : "step_end";
      entries_.push_back(std::move(mark));
    }
    step_annotation_ = chosen;
    step_marks_ = best.first;
    warnings.push_back(fmt::format(
        "{}: steps marked {} ({} of {} external annotations)", name_,
        profiler_step ? "from START to END of the profiler's ProfilerStep#N annotations"
                      : fmt::format("at each START of the profiler annotation '{}'", chosen),
        best.first, annotations_.size()));
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
    const bool recorded = std::any_of(entries_.begin(), entries_.end(),
                                      [](const Entry& e) { return e.action != Action::kMark; });
    add_step_marks(trace.warnings);
    if (skipped_annotations_ > 0)
      trace.warnings.push_back(fmt::format(
          "{}: skipped {} external annotation(s) without a START/END stage and a time_us", name_,
          skipped_annotations_));
    bool timed = true;
    for (const Entry& e : entries_) timed = timed && e.time_us.has_value();
    if (timed) {
      std::stable_sort(entries_.begin(), entries_.end(),
                       [](const Entry& a, const Entry& b) { return *a.time_us < *b.time_us; });
    } else if (!entries_.empty()) {
      trace.warnings.push_back(fmt::format(
          "{}: events without time_us (torch_npu, or PyTorch before 2.1): kept in file order, "
          "1 us apart; rates and durations are not real",
          name_));
      for (std::size_t i = 0; i < entries_.size(); ++i)
        entries_[i].time_us = static_cast<double>(i);
    }
    normalise_frees();
    history_.same_time(entries_);
    index_pools();
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
    history_.drop_wrapping(segs, "a segment live before the first event");
    history_.drop_wrapping(blocks, "a block live before the first event");
    history_.walk(blocks, entries_);
    const std::uint64_t t0 =
        entries_.empty() ? 0 : static_cast<std::uint64_t>(*entries_.front().time_us * 1000.0);
    for (const auto& [addr, l] : segs)
      trace.events.push_back({EventKind::kSegmentAlloc,
                              t0,
                              addr,
                              l.size,
                              l.stream,
                              pool_of(l.device, addr),
                              0,
                              {},
                              0});
    for (const auto& [addr, l] : blocks)
      trace.events.push_back(
          {EventKind::kAlloc, t0, addr, l.size, l.stream, pool_of(l.device, addr), 0, l.site, 0});
    if (had_traces && (!segs.empty() || !blocks.empty()))
      trace.warnings.push_back(fmt::format(
          "{}: {} segment(s) and {} live block(s) existed before the first recorded event; they "
          "are added at its start",
          name_, segs.size(), blocks.size()));
    if (!had_traces || !recorded)
      trace.warnings.push_back(fmt::format(
          "{}: no recorded events (history was off): the trace is the state at the snapshot",
          name_));
    for (std::string& note : history_.notes()) trace.warnings.push_back(std::move(note));
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
      trace.events.push_back(
          {kind, t, no_address ? 0 : e.addr, kind == EventKind::kMark ? 0 : e.size, e.stream,
           no_address ? pool_of(e.device, 0) : pool_of(e.device, e.addr), 0, e.label, 0});
    }
    for (const auto& [action, count] : skipped_actions_)
      trace.warnings.push_back(fmt::format("{}: skipped {} entr{} of unknown action '{}'", name_,
                                           count, count == 1 ? "y" : "ies", action));
    trace.snapshot = state();
    return trace;
  }

  // Every pool a segment or an event names gets its number, in (device, pool id) order.
  void index_pools() {
    for (const Entry& e : entries_) pools_.try_emplace(default_pool(e.device));
    std::size_t index = 0;
    for (auto& [key, tally] : pools_) tally.pool.index = index++;
  }
  PoolKey default_pool(std::uint32_t device) const { return PoolKey{device, has_pool_ids_, 0, 0}; }
  // The pool of the segment holding `addr` at the snapshot, else the device's default pool.
  std::uint32_t pool_of(std::uint32_t device, std::uint64_t addr) const {
    auto it = end_segments_.upper_bound(addr);
    if (it != end_segments_.begin()) {
      --it;
      if (it->second.device == device && addr - it->first < it->second.size)
        return static_cast<std::uint32_t>(pools_.at(segment_pool_.at(it->first)).pool.index);
    }
    auto def = pools_.find(default_pool(device));
    return def == pools_.end() ? 0 : static_cast<std::uint32_t>(def->second.pool.index);
  }

  std::shared_ptr<const SnapshotState> state() const {
    auto out = std::make_shared<SnapshotState>();
    for (const auto& [key, tally] : pools_) {
      SnapshotPool p = tally.pool;
      p.device = key.device;
      if (key.has_id) p.id = fmt::format("({},{})", key.first, key.second);
      detail::name_pool(p, key.first == 0 && key.second == 0, tally.site_bytes);
      out->pools.push_back(std::move(p));
    }
    out->step_annotation = step_annotation_;
    out->step_marks = step_marks_;
    out->annotations = annotations_.size();
    return out;
  }

  const Document& doc_;
  const std::string& name_;
  std::size_t budget_;
  bool strict_;
  HistoryCheck history_;
  std::map<std::uint64_t, Live> end_segments_, end_blocks_;
  std::map<std::uint64_t, PoolKey> segment_pool_;  // segment address -> its pool
  std::map<PoolKey, PoolTally> pools_;
  bool has_pool_ids_ = false;
  std::vector<Annotation> annotations_;
  std::size_t skipped_annotations_ = 0;
  std::string step_annotation_;
  std::size_t step_marks_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> skipped_actions_;
};

}  // namespace

Trace parse_snapshot(std::string_view data, const std::string& name, const ReadOptions& options) {
  Document doc = pickle::parse(data, name);
  return Converter(doc, name, data.size(), !options.skip_bad).run();
}

Trace read_snapshot(const std::filesystem::path& path, const ReadOptions& options) {
  const std::string data =
      core::read_input_file(path.string(), "snapshot", core::kMaxSnapshotInput);
  return parse_snapshot(data, path.string(), options);
}

}  // namespace modelmem::trace
