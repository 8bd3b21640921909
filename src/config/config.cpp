// The configuration string. Two steps, each with its own errors:
//   1. tokenize `key:value,...` (brackets may hold commas) and check each value's form against
//      the key table (core_keys() below, then keys other layers register, e.g. the preload's;
//      a key that builds something is read in factory.cpp's build());
//   2. check combinations: a key the chosen stack would ignore is an error, so a typo in intent
//      ("max_split_size_mb with expandable segments") is caught at parse time, not in production.
#include "modelmem/config/config.hpp"

#include "config/internal.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::config {

using namespace modelmem::alloc;
namespace {

using detail::bad;
using detail::check_decay_ms;
using detail::check_kb_or_zero;
using detail::check_mb_or_zero;
using detail::check_positive_count;
using detail::check_solve_ms;
using detail::check_steps_count;
using detail::kMaxMb;
using detail::kMiB;
using detail::parse_uint;
using detail::preset;

using core::trim;

bool parse_double(std::string_view s, double& out) {
  if (s.empty() || s.front() == '+' || s.front() == ' ') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// ---- value checks: each returns the normalised value or throws naming the key ----

using Check = KeyCheck;

std::string check_bool(const std::string& key, std::string_view v) {
  if (v == "True" || v == "true" || v == "1") return "True";
  if (v == "False" || v == "false" || v == "0") return "False";
  bad(key, "expected True or False, got '" + std::string(v) + "'");
}

std::string check_strategy(const std::string& key, std::string_view v) {
  // Strategies that build() knows.
  if (v == "static" || v == "caching" || v == "system" || v == "planned") return std::string(v);
  bad(key, "expected static, caching, system or planned, got '" + std::string(v) + "'");
}

std::string check_count(const std::string& key, std::string_view v) {
  std::size_t n = 0;
  if (!parse_uint(v, n)) bad(key, "expected a whole number, got '" + std::string(v) + "'");
  return std::to_string(n);
}

std::string check_positive(const std::string& key, std::string_view v) {
  std::string n = check_count(key, v);
  if (n == "0") bad(key, "must be > 0");
  return n;
}

std::string check_steps(const std::string& key, std::string_view v) {
  if (v == "auto" || v == "marked") return std::string(v);
  bad(key, "expected auto or marked, got '" + std::string(v) + "'");
}

std::string check_planned_fallback(const std::string& key, std::string_view v) {
  if (v == "direct" || v == "caching") return std::string(v);
  bad(key, "expected direct or caching, got '" + std::string(v) + "'");
}

std::string check_solver(const std::string& key, std::string_view v) {
  for (const auto& name : plan::solver_names())
    if (v == name) return name;
  std::string known;
  for (const auto& name : plan::solver_names()) known += (known.empty() ? "" : ", ") + name;
  bad(key, "unknown solver '" + std::string(v) + "' (known: " + known + ")");
}

std::string check_device(const std::string& key, std::string_view v) {
  if (v == "host" || v == "limited" || v == "npu") return std::string(v);
  // npu:N, the N-th Ascend NPU (plain "npu": the one a framework allocates on, else npu:0).
  if (v.rfind("npu:", 0) == 0) {
    std::size_t n = 0;
    if (parse_uint(v.substr(4), n) && n < 1024) return "npu:" + std::to_string(n);
    bad(key, "npu:N needs a device index N in [0, 1024), got '" + std::string(v) + "'");
  }
  bad(key, "expected host, limited, npu or npu:N, got '" + std::string(v) + "'");
}

std::string check_fallback(const std::string& key, std::string_view v) {
  if (v == "static" || v == "caching" || v == "error") return std::string(v);
  bad(key, "expected caching, static or error, got '" + std::string(v) + "'");
}

std::string check_model_type(const std::string& key, std::string_view v) {
  if (v == "cnn" || v == "transformer" || v == "gan") return std::string(v);
  bad(key, "expected cnn, transformer or gan, got '" + std::string(v) + "'");
}

std::string check_mb(const std::string& key, std::string_view v) {
  std::size_t n = 0;
  if (!parse_uint(v, n)) bad(key, "expected a whole number of MiB, got '" + std::string(v) + "'");
  if (n == 0) bad(key, "must be > 0");
  if (n > kMaxMb) bad(key, std::string(v) + " MiB does not fit in 64 bits");
  return std::to_string(n);
}

std::string check_max_split(const std::string& key, std::string_view v) {
  std::string n = check_mb(key, v);
  // As PyTorch: a block that may not be split must be larger than a large-pool segment (20 MiB).
  if (std::stoull(n) <= 20) bad(key, "must be > 20 (MiB, the large segment size), got " + n);
  return n;
}

std::string check_large_segment(const std::string& key, std::string_view v) {
  std::string n = check_mb(key, v);
  // A large segment holds requests above the small pool's 1 MiB.
  if (std::stoull(n) < 2 || std::stoull(n) > (1u << 20))
    bad(key, "must be in [2, 1048576] (MiB), got " + n);
  return n;
}

std::string check_path(const std::string& key, std::string_view v) {
  if (v.empty()) bad(key, "expected a file name");
  return std::string(v);
}

std::string check_safety(const std::string& key, std::string_view v) {
  double d = 0;
  if (!parse_double(v, d)) bad(key, "expected a number, got '" + std::string(v) + "'");
  if (d < 1.0 || d > 100.0) bad(key, "must be in [1, 100] (a factor below 1 undersizes the pool)");
  return std::string(v);
}

std::string check_gc(const std::string& key, std::string_view v) {
  double d = 0;
  if (!parse_double(v, d)) bad(key, "expected a number, got '" + std::string(v) + "'");
  if (!(d > 0.0 && d < 1.0)) bad(key, "must be in (0, 1), got " + std::string(v));
  return std::string(v);
}

std::string check_fraction(const std::string& key, std::string_view v) {
  double d = 0;
  if (!parse_double(v, d)) bad(key, "expected a number, got '" + std::string(v) + "'");
  if (!(d > 0.0 && d <= 1.0)) bad(key, "must be in (0, 1], got " + std::string(v));
  return std::string(v);
}

std::string check_roundup(const std::string& key, std::string_view v) {
  try {
    parse_roundup_power2_divisions(v);
  } catch (const InvalidInput& e) {
    bad(key, e.what());
  }
  return std::string(v);
}

std::string check_pools(const std::string& key, std::string_view v) {
  try {
    parse_pools(v);
  } catch (const InvalidInput& e) {
    bad(key, e.what());
  }
  return std::string(v);
}

std::string check_pool_name(const std::string& key, std::string_view v) {
  if (!valid_pool_name(v))
    bad(key, "'" + std::string(v) + "' is not a pool name (" + core::pool_name_rule() + ")");
  return std::string(v);
}

struct KeySpec {
  ConfigKey info;
  Check check;
};

std::vector<KeySpec> core_keys() {
  return {
      {{"strategy", "caching", "static | caching | system | planned",
        "static: one pool taken up front, best fit inside it; caching: PyTorch's caching pool; "
        "system: the C heap (baseline); planned: learn one step, serve later steps from a "
        "planned arena, the rest from a caching pool"},
       check_strategy},
      {{"device", "host", "host | limited | npu | npu:N",
        "host: memory from mmap; limited: host memory behind a capacity limit, with or without "
        "virtual memory (stands in for an accelerator); npu, npu:N: an Ascend NPU through the "
        "CANN runtime (libascendcl.so, opened at run time; npu = npu:0 or the framework's)"},
       check_device},
      {{"device_capacity_mb", "1024", "MiB > 0", "capacity of device:limited"}, check_mb},
      {{"device_vmm", "False", "True | False",
        "device:limited offers virtual memory (reserve/map)"},
       check_bool},
      {{"expandable_segments", "False", "True | False",
        "caching pool grows one reserved range per stream by mapping pages (probes the device "
        "first)"},
       check_bool},
      {{"fallback", "caching", "caching | static | error",
        "what to build when expandable segments are unsupported on the device: caching "
        "(torch_npu's: the caching pool with fixed-size segments), static (a static pool of "
        "static_pool_mb, plan, model_type or per_process_memory_fraction) or error (refuse)"},
       check_fallback},
      {{"static_pool_mb", "", "MiB > 0", "size of a static pool (strategy:static or fallback)"},
       check_mb},
      {{"plan", "", "FILE.json",
        "static pool sized from a plan file: arena_bytes + weights_bytes (x safety_factor)"},
       check_path},
      {{"model_type", "", "cnn | transformer | gan",
        "static pool preset: 512, 1024 or 2048 MiB x safety_factor (default 1.2, 1.5, 1.3)"},
       check_model_type},
      {{"safety_factor", "", "number in [1, 100]",
        "multiplies the model_type preset or the plan's size"},
       check_safety},
      {{"max_split_size_mb", "", "MiB > 20",
        "caching: blocks larger than this are never split (PyTorch)"},
       check_max_split},
      {{"large_segment_size_mb", "20", "MiB in [2, 1048576]",
        "caching: size of the large pool's fixed segments, taken for requests between 1 MiB and "
        "10 MiB (PyTorch's and torch_npu's large_segment_size_mb)"},
       check_large_segment},
      {{"roundup_power2_divisions", "0", "power of 2 | [MiB:div,...,>:div]",
        "caching: round requests up to one of N divisions of their power-of-two interval "
        "(PyTorch)"},
       check_roundup},
      {{"garbage_collection_threshold", "0", "number in (0, 1)",
        "caching: free cached blocks, oldest first, once reserved exceeds this fraction of the "
        "allowed memory (PyTorch)"},
       check_gc},
      {{"cache_decay_ms", "10000", "ms in [0, 3600000]",
        "caching: cached memory free this long goes back to the device (0 = never, PyTorch's "
        "behaviour)"},
       check_decay_ms},
      {{"per_process_memory_fraction", "1.0", "number in (0, 1]",
        "cap on reserved memory as a fraction of the device's total (PyTorch's "
        "set_per_process_memory_fraction)"},
       check_fraction},
      {{"thread_cache_mb", "0", "whole number of MiB < 2^44",
        "caching: per thread, up to this many MiB of freed small blocks are kept for the same "
        "thread and handed back without the pool's lock (0 = off, as PyTorch)"},
       check_mb_or_zero},
      {{"huge_pages", "False", "True | False",
        "host memory in 2 MiB pages where the system has them"},
       check_bool},
      {{"prefault", "False", "True | False",
        "touch host pages when obtained, so a static pool costs no page faults later"},
       check_bool},
      {{"planned_steps", "auto", "auto | marked",
        "planned: steps found from the repeating pattern until the program marks one, or only "
        "marked by begin_step/end_step"},
       check_steps},
      {{"planned_fallback", "caching", "direct | caching",
        "planned: what serves requests outside the plan (before the first plan, blocks that "
        "outlive a step): a caching pool (freed memory reused, no device call per request) or "
        "direct (one segment per block, nothing cached: the smallest footprint, a page fault "
        "per touched page of every block)"},
       check_planned_fallback},
      {{"planned_warmup_steps", "1", "whole number <= 2^32",
        "planned: marked steps left to the fallback before the first plan"},
       check_steps_count},
      {{"planned_mismatch_limit", "2", "whole number in [1, 2^32]",
        "planned: consecutive mismatching steps before a re-plan"},
       check_positive_count},
      {{"planned_max_plans", "4", "whole number in [1, 2^32]",
        "planned: plans kept (one per input shape), least recently used dropped"},
       check_positive_count},
      {{"planned_solver", "best", "solver name", "planned: solver of a step plan"}, check_solver},
      {{"planned_solve_ms", "500", "ms in [1, 3600000]",
        "planned: time a step mark waits for its plan (ms); a plan that takes longer is "
        "finished on a worker thread and taken at a later step mark"},
       check_solve_ms},
      {{"planned_defer", "True", "True | False",
        "planned: False makes a step mark wait for its plan however long it takes, the "
        "solver's search limit counted in search work instead of time, so nothing depends "
        "on the machine's load; replay and sizing use False"},
       check_bool},
      {{"planned_min_kb", "0", "whole number of KiB < 2^54",
        "planned: requests below this many KiB go to the fallback, outside every step"},
       check_kb_or_zero},
      {{"planned_huge_pages", "True", "True | False",
        "planned: the arena in 2 MiB pages where the system has them (host: transparent huge "
        "pages); huge_pages:True puts every host segment in them"},
       check_bool},
      {{"pools", "", "[NAME:MiB,...]",
        "per-model pools, each with its quota in MiB, each a stack of the strategy on its own "
        "view of the device; a thread selects one (modelmem_pool_push)"},
       check_pools},
      {{"default_pool", "", "pool name",
        "the pool of requests from threads that selected none (default: the process's own "
        "stack, no quota)"},
       check_pool_name},
  };
}

// Every known key: the core's, then the registered ones in the order they were registered.
struct KeyRegistry {
  std::mutex mutex;
  std::vector<KeySpec> specs = core_keys();
  std::vector<ConfigKey> rows;
  KeyRegistry() {
    for (const auto& k : specs) rows.push_back(k.info);
  }
};

KeyRegistry& registry() {
  static KeyRegistry r;
  return r;
}

const std::vector<KeySpec>& key_table() {
  return registry().specs;
}

const KeySpec* find_key(std::string_view name) {
  for (const auto& k : key_table())
    if (k.info.name == name) return &k;
  return nullptr;
}

// Splits on commas outside brackets.
std::vector<std::string_view> split_entries(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0)
        throw InvalidInput("config: unbalanced ']' at character " + std::to_string(i + 1));
      --depth;
    }
    if (c == ',' && depth == 0) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) throw InvalidInput("config: unbalanced '[' (missing ']')");
  out.push_back(text.substr(start));
  return out;
}

void check_combinations(const Config& c) {
  auto has = [&](const char* k) { return c.has(k); };
  const std::string strategy = c.get("strategy");
  const std::string dev = c.get("device");
  const bool expandable = c.get_bool("expandable_segments");

  for (const char* k : {"device_capacity_mb", "device_vmm"})
    if (has(k) && dev != "limited")
      bad(k, "applies only to device:limited (device is " + dev + ")");
  if (dev.rfind("npu", 0) == 0)
    for (const char* k : {"huge_pages", "prefault"})
      if (has(k)) bad(k, "applies only to host memory (device is " + dev + ")");

  if (has("default_pool")) {
    if (!has("pools")) bad("default_pool", "needs pools (the pool it names)");
    bool listed = false;
    for (const auto& p : parse_pools(c.get("pools")))
      listed = listed || p.name == c.get("default_pool");
    if (!listed)
      bad("default_pool", "'" + c.get("default_pool") + "' is not one of pools:" + c.get("pools"));
  }
  if (strategy == "system") {
    for (const char* k :
         {"pools", "device", "device_capacity_mb", "device_vmm", "fallback", "static_pool_mb",
          "plan", "model_type", "safety_factor", "max_split_size_mb", "large_segment_size_mb",
          "roundup_power2_divisions", "garbage_collection_threshold", "cache_decay_ms",
          "per_process_memory_fraction", "huge_pages", "prefault", "thread_cache_mb"})
      if (has(k)) bad(k, "has no effect with strategy:system (the C heap)");
    if (expandable) bad("expandable_segments", "True needs strategy:caching (strategy is system)");
  }
  if (strategy == "static") {
    if (expandable) bad("expandable_segments", "True needs strategy:caching (strategy is static)");
    if (has("fallback")) bad("fallback", "applies only with expandable_segments:True");
    for (const char* k : {"max_split_size_mb", "large_segment_size_mb", "roundup_power2_divisions",
                          "garbage_collection_threshold", "cache_decay_ms", "thread_cache_mb"})
      if (has(k)) bad(k, "applies only to strategy:caching (strategy is static)");
  }
  if (strategy != "planned")
    for (const auto& k : key_table())
      if (k.info.name.rfind("planned_", 0) == 0 && has(k.info.name.c_str()))
        bad(k.info.name, "applies only to strategy:planned (strategy is " + strategy + ")");
  if (strategy == "planned") {
    // The fallback is direct or a caching pool with fixed segments; caching keys apply to it.
    if (expandable) bad("expandable_segments", "True needs strategy:caching (strategy is planned)");
    for (const char* k : {"fallback", "static_pool_mb", "plan", "model_type", "safety_factor"})
      if (has(k)) bad(k, "has no effect with strategy:planned");
    if (has("thread_cache_mb") && c.get("planned_fallback") != "caching")
      bad("thread_cache_mb", "applies to strategy:planned only with planned_fallback:caching");
  }
  if (strategy == "caching") {
    if (has("fallback") && !expandable)
      bad("fallback", "applies only with expandable_segments:True");
    if (expandable && has("max_split_size_mb"))
      bad("max_split_size_mb",
          "conflicts with expandable_segments:True (expandable segments never split a "
          "segment's tail off; PyTorch ignores max_split_size_mb there)");
    const bool static_fallback = expandable && c.get("fallback") == "static";
    for (const char* k : {"static_pool_mb", "plan", "model_type", "safety_factor"})
      if (has(k) && !static_fallback)
        bad(k,
            "sizes a static pool: it needs strategy:static, or strategy:caching with "
            "expandable_segments:True and fallback:static");
  }

  const char* source = nullptr;
  for (const char* k : {"static_pool_mb", "plan", "model_type"}) {
    if (!has(k)) continue;
    if (source) bad(k, std::string("conflicts with ") + source + " (one pool size source only)");
    source = k;
  }
  if (has("safety_factor") && (source == nullptr || std::string(source) == "static_pool_mb"))
    bad("safety_factor", "needs model_type or plan to multiply");
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  return registry().rows;
}

void register_keys(std::span<const KeyRegistration> keys) {
  KeyRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const KeyRegistration& k : keys) {
    if (find_key(k.key.name) != nullptr) continue;  // a known name keeps its first row
    r.specs.push_back(KeySpec{k.key, k.check});
    r.rows.push_back(k.key);
  }
}

std::string check_whole_number(const std::string& key, std::string_view value) {
  return check_count(key, value);
}

std::string check_positive_number(const std::string& key, std::string_view value) {
  return check_positive(key, value);
}

std::string Config::get(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end()) throw InvalidInput("config: unknown key '" + key + "'");
  return it->second;
}

bool Config::get_bool(const std::string& key) const {
  std::string v = get(key);
  if (v == "True") return true;
  if (v == "False") return false;
  bad(key, "is not a boolean ('" + v + "')");
}

double Config::get_double(const std::string& key) const {
  std::string v = get(key);
  double d = 0;
  if (!parse_double(v, d)) bad(key, v.empty() ? "is not set" : "is not a number ('" + v + "')");
  return d;
}

std::size_t Config::get_size(const std::string& key) const {
  std::string v = get(key);
  std::size_t n = 0;
  if (!parse_uint(v, n)) bad(key, v.empty() ? "is not set" : "is not a whole number ('" + v + "')");
  return n;
}

std::size_t Config::get_size_mb(const std::string& key) const {
  return checked_mul(get_size(key), kMiB, key.c_str());
}

bool Config::has(const std::string& key) const {
  return std::find(explicit_keys.begin(), explicit_keys.end(), key) != explicit_keys.end();
}

std::map<std::size_t, unsigned> parse_roundup_power2_divisions(std::string_view text) {
  // PyTorch keeps 16 intervals: index 0 holds every size below 2 MiB, index i the sizes in
  // [2^(20+i), 2^(21+i)), index 15 everything from 32 GiB up.
  constexpr std::size_t kIntervals = 16;
  auto divisions = [](std::string_view s, bool zero_ok) -> unsigned {
    std::size_t n = 0;
    if (!parse_uint(trim(s), n) || n > (1u << 20) || !(is_pow2(n) || (zero_ok && n == 0)))
      throw InvalidInput("divisions must be a power of two" + std::string(zero_ok ? " or 0" : "") +
                         ", got '" + std::string(s) + "'");
    return static_cast<unsigned>(n);
  };
  text = trim(text);
  if (text.empty()) throw InvalidInput("empty value");
  std::map<std::size_t, unsigned> out;
  if (text.front() != '[') {
    unsigned n = divisions(text, true);  // 0 = off (our default)
    out[0] = n;
    return out;
  }
  if (text.back() != ']') throw InvalidInput("list must end with ']'");
  std::string_view body = text.substr(1, text.size() - 2);
  std::vector<unsigned> table(kIntervals, 0);
  std::size_t last_index = 0;
  bool first = true;
  for (const detail::ListEntry& entry :
       detail::list_entries(body, "list entry", "SIZE_MB:DIVISIONS")) {
    const std::string_view edge = entry.key;
    unsigned value = divisions(entry.value, true);
    if (edge == ">") {
      if (!entry.last) throw InvalidInput("'>' must be the last entry");
      std::fill(table.begin() + static_cast<std::ptrdiff_t>(first ? 0 : last_index + 1),
                table.end(), value);
      first = false;
      continue;
    }
    std::size_t mb = 0;
    if (!parse_uint(edge, mb) || !is_pow2(mb))
      throw InvalidInput("interval '" + std::string(edge) + "' must be a power of two (MiB)");
    std::size_t index = static_cast<std::size_t>(63 - __builtin_clzll(mb));
    index = std::min(index, kIntervals - 1);
    if (!first && index <= last_index)
      throw InvalidInput("intervals must increase ('" + std::string(edge) + "')");
    // The first entry also covers every interval below it, as in PyTorch.
    if (first) std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(index), value);
    table[index] = value;
    last_index = index;
    first = false;
  }
  // Lower edge in bytes -> divisions. The caching pool looks up bit_floor(size) exactly and
  // falls back to key 0, so 0 carries index 0 (every size below 2 MiB), intervals equal to it
  // are left out, and index 15 is repeated for every power of two above 32 GiB.
  out[0] = table[0];
  for (std::size_t i = 1; i < 64 - 20; ++i) {
    unsigned v = table[std::min(i, kIntervals - 1)];
    if (v != table[0]) out[kMiB << i] = v;
  }
  return out;
}

Config parse_config(std::string_view text) {
  Config c;
  c.source = std::string(text);
  for (const auto& k : key_table()) c.values[k.info.name] = k.info.default_value;
  if (!trim(text).empty()) {
    for (std::string_view raw : split_entries(text)) {
      std::string_view entry = trim(raw);
      if (entry.empty()) throw InvalidInput("config: empty entry in '" + c.source + "'");
      std::size_t colon = entry.find(':');
      std::string key(trim(entry.substr(0, colon)));
      if (colon == std::string_view::npos)
        throw InvalidInput("config: " + key + ": missing ':VALUE'");
      const KeySpec* spec = find_key(key);
      if (spec == nullptr) {
        std::string known;
        for (const auto& k : key_table()) known += (known.empty() ? "" : ", ") + k.info.name;
        throw InvalidInput("config: unknown key '" + key + "' (known: " + known + ")");
      }
      if (c.has(key)) bad(key, "given twice");
      std::string_view value = trim(entry.substr(colon + 1));
      if (value.empty()) bad(key, "missing value");
      c.values[key] = spec->check(key, value);
      c.explicit_keys.push_back(key);
    }
  }
  check_combinations(c);
  // Effective values that depend on other keys.
  if (c.has("model_type") && !c.has("safety_factor"))
    c.values["safety_factor"] = core::format_double(preset(c.get("model_type")).factor);
  if (c.has("plan") && !c.has("safety_factor")) c.values["safety_factor"] = "1.0";
  return c;
}

namespace detail {

void bad(const std::string& key, const std::string& what) {
  throw InvalidInput("config: " + key + ": " + what);
}

const plan::FamilyPool& preset(const std::string& name) {
  if (const plan::FamilyPool* p = plan::find_family_pool(name)) return *p;
  bad("model_type", "unknown preset '" + name + "'");
}

}  // namespace detail
}  // namespace modelmem::config
