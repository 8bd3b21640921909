// Snapshot stack frames (whose code a frame is: the program's, or PyTorch's and the runtime's),
// allocation sites and the pools of a snapshot as analyze shows them (trace/snapshot.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <unordered_map>

#include "modelmem/core/bytes.hpp"
#include "modelmem/trace/pickle.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "snapshot_internal.hpp"

namespace modelmem::trace {

namespace {

bool has_suffix(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower_path(std::string_view file) {
  std::string out(file);
  for (char& c : out) {
    if (c == '\\') c = '/';
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// A folder of the path named `dir` ("torch" matches /x/torch/y.py and torch/y.py).
bool in_folder(const std::string& path, std::string_view dir) {
  const std::string inner = fmt::format("/{}/", dir);
  return path.find(inner) != std::string::npos || path.starts_with(inner.substr(1));
}

// Python's standard library (copy.py's deepcopy, runpy, threading): lib/pythonX.Y/ or the lib/
// folder of an interpreter's own folder (cpython-3.10-..., Python311), outside site-packages.
bool in_python_stdlib(const std::string& path) {
  if (!has_suffix(path, ".py") || path.find("-packages/") != std::string::npos) return false;
  const std::size_t lib = path.rfind("/lib/");
  if (lib == std::string::npos) return false;
  if (path.compare(lib + 5, 6, "python") == 0) return true;
  const std::size_t parent = lib == 0 ? std::string::npos : path.rfind('/', lib - 1);
  const std::size_t from = parent == std::string::npos ? 0 : parent + 1;
  return path.substr(from, lib - from).find("python") != std::string::npos;
}

// The qualified name a demangled C++ frame starts with, its return type dropped:
// "at::TensorBase at::detail::_empty_generic<long>(...)" -> "at::detail::_empty_generic<long>".
std::string_view qualified_name(std::string_view function) {
  std::string_view head = function.substr(0, function.find('('));
  int depth = 0;  // spaces inside template arguments do not separate a return type
  std::size_t start = 0;
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '<') ++depth;
    if (head[i] == '>') --depth;
    if (head[i] == ' ' && depth == 0) start = i + 1;
  }
  return head.substr(std::min(start, head.size()));
}

// Namespaces and symbol prefixes of PyTorch, the C++ standard library, the Python interpreter,
// the C library and the binding layers between them.
constexpr std::array<std::string_view, 13> kRuntimePrefixes = {
    "torch::",    "c10::",   "c10d::", "at::", "caffe2::", "std::", "__gnu_cxx::",
    "pybind11::", "boost::", "Py",     "_Py",  "__",       "THP"};

// 26189234176 -> "26,189,234,176": the exact figures, to hold against PyTorch's.
std::string digits_grouped(std::size_t n) {
  std::string s = std::to_string(n);
  for (std::size_t i = s.size(); i > 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

}  // namespace

bool is_runtime_frame(std::string_view file, std::string_view function) {
  if (file.empty() || file == "??" || file.starts_with('<')) return true;  // <built-in>, <frozen>
  const std::string path = lower_path(file);
  if (in_folder(path, "torch") || in_folder(path, "torch_npu") || in_python_stdlib(path))
    return true;
  const std::string_view name = qualified_name(function);
  for (std::string_view p : kRuntimePrefixes)
    if (name.starts_with(p)) return true;
  return name == "_start";
}

bool is_kv_cache_site(std::string_view file, std::string_view function) {
  const std::string path = lower_path(file);
  std::string fn(function);
  for (char& c : fn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view k : {"kv_cache", "kvcache", "cache_engine", "kv_pool"})
    if (path.find(k) != std::string::npos || fn.find(k) != std::string::npos) return true;
  // SGLang's KV pools (srt/mem_cache/memory_pool.py), transformers' Cache classes.
  const std::string base = path.substr(path.find_last_of('/') + 1);
  return (in_folder(path, "mem_cache") && base.starts_with("memory_pool")) ||
         (base.starts_with("cache_utils") && has_suffix(base, ".py"));
}

void detail::name_pool(SnapshotPool& pool, bool default_pool,
                       const std::map<std::string, std::size_t>& site_bytes) {
  pool.kind = pool.allocated > 0 && 2 * pool.kv_cache > pool.allocated ? "KV cache"
              : default_pool                                           ? "default"
                                                                       : "private";
  for (const auto& [site, bytes] : site_bytes)
    if (bytes > pool.top_site_bytes) {
      pool.top_site = site;
      pool.top_site_bytes = bytes;
    }
}

std::size_t SnapshotState::reserved() const {
  std::size_t n = 0;
  for (const SnapshotPool& p : pools) n += p.reserved;
  return n;
}
std::size_t SnapshotState::allocated() const {
  std::size_t n = 0;
  for (const SnapshotPool& p : pools) n += p.allocated;
  return n;
}
std::size_t SnapshotState::requested() const {
  std::size_t n = 0;
  for (const SnapshotPool& p : pools) n += p.requested;
  return n;
}
std::size_t SnapshotState::pending_free() const {
  std::size_t n = 0;
  for (const SnapshotPool& p : pools) n += p.pending_free;
  return n;
}

std::string pools_text(const SnapshotState& state) {
  if (state.pools.empty()) return {};
  std::string out =
      "pools at the snapshot, as PyTorch counts them (allocated: the blocks' sizes after the "
      "allocator's rounding, torch.cuda.memory_allocated; requested: what the program asked "
      "for, which modelmem's live figures count)\n";
  out +=
      fmt::format("  {:<4} {:>6} {:>7} {:<9} {:>8} {:>6} {:>12} {:>12} {:>12}\n", "pool", "device",
                  "id", "kind", "segments", "blocks", "reserved", "allocated", "requested");
  std::size_t segments = 0, blocks = 0;
  for (const SnapshotPool& p : state.pools) {
    out +=
        fmt::format("  {:<4} {:>6} {:>7} {:<9} {:>8} {:>6} {:>12} {:>12} {:>12}\n", p.index,
                    p.device, p.id.empty() ? "-" : p.id, p.kind, p.segments, p.blocks,
                    format_bytes(p.reserved), format_bytes(p.allocated), format_bytes(p.requested));
    if (!p.top_site.empty())
      out += fmt::format("       most allocated at {} ({}{})\n", p.top_site,
                         format_bytes(p.top_site_bytes),
                         p.kv_cache > 0 && p.kv_cache != p.top_site_bytes
                             ? fmt::format("; KV-cache sites {}", format_bytes(p.kv_cache))
                             : std::string());
    segments += p.segments;
    blocks += p.blocks;
  }
  out += fmt::format("  {:<4} {:>6} {:>7} {:<9} {:>8} {:>6} {:>12} {:>12} {:>12}\n", "all", "", "",
                     "", segments, blocks, format_bytes(state.reserved()),
                     format_bytes(state.allocated()), format_bytes(state.requested()));
  out += fmt::format("  in bytes: reserved {}, allocated {}, requested {}{}\n",
                     digits_grouped(state.reserved()), digits_grouped(state.allocated()),
                     digits_grouped(state.requested()),
                     state.pending_free() > 0
                         ? fmt::format("; freed but waiting for their streams (not allocated) {}",
                                       digits_grouped(state.pending_free()))
                         : std::string());
  return out;
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

bool is_snapshot_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;  // a FIFO would block the open
  std::ifstream in(path, std::ios::binary);
  char head[2] = {0, 0};
  if (!in.read(head, 2)) return false;
  return pickle::looks_like_pickle(std::string_view(head, 2));
}

}  // namespace modelmem::trace
