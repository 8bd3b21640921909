// torch_npu's allocator settings (modelmem/config/torch_npu.hpp).
//
// The keys are torch_npu's (NPUAllocatorConfig.cpp) and PyTorch's accelerator keys that
// torch_npu passes on (c10 AcceleratorAllocatorConfig). Values are checked as torch_npu checks
// them, so a string torch_npu refuses is refused here with its reason, and one it accepts always
// builds a stack.
#include "modelmem/config/torch_npu.hpp"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::config {
namespace {

using core::trim;

struct Entry {
  std::string key;
  std::string value;
};

std::vector<Entry> split_entries(std::string_view text, const std::string& variable) {
  std::vector<Entry> entries;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view entry = trim(text.substr(start, i - start));
    start = i + 1;
    if (entry.empty()) continue;  // torch_npu tolerates a trailing comma
    const std::size_t colon = entry.find(':');
    const std::string key(trim(entry.substr(0, colon)));
    if (colon == std::string_view::npos)
      throw InvalidInput(variable + ": " + key + ": missing ':VALUE'");
    entries.push_back({key, std::string(trim(entry.substr(colon + 1)))});
  }
  return entries;
}

// A whole number as torch_npu reads one (digits only), or -1.
long long whole(const std::string& v) {
  long long n = -1;
  if (v.empty() || v.size() > 12) return -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && end == v.data() + v.size() && n >= 0 ? n : -1;
}

// torch_npu's own keys (and PyTorch's that torch_npu passes on) that modelmem cannot honour: what
// modelmem does instead, or "" when modelmem behaves as torch_npu does with that value.
struct Mapped {
  const char* key;
  const char* values;  // "bool", "1g", "0-16", "MiB", "20-512"
  std::string (*instead)(const std::string& value, bool expandable);
};

std::string pinned(const std::string&, bool) {
  return "host pinned memory is torch_npu's own host allocator's, which reads this key itself; "
         "modelmem serves device memory only";
}

const Mapped kMapped[] = {
    {"page_size", "1g",
     [](const std::string&, bool) -> std::string {
       return "no 1 GiB pages: modelmem takes segments in huge-first (2 MiB) pages and does not "
              "round them up to 1 GiB";
     }},
    {"base_addr_aligned_kb", "0-16",
     [](const std::string& v, bool expandable) -> std::string {
       if (!expandable || v == "0") return "";  // torch_npu applies it with expandable segments
       return "blocks stay 512-byte aligned (torch_npu's base_addr_aligned_kb:0); large blocks "
              "are not moved to " +
              v + " KiB boundaries";
     }},
    {"segment_size_mb", "20-512",
     [](const std::string& v, bool expandable) -> std::string {
       if (!expandable)
         return "ignored, as torch_npu ignores it without expandable_segments:True (deprecated "
                "there for large_segment_size_mb)";
       return "expandable segments map the large pool in the device's 2 MiB pages as requests "
              "need them, not " +
              v + " MiB at a time (deprecated in torch_npu for large_segment_size_mb)";
     }},
    {"multi_stream_lazy_reclaim", "bool",
     [](const std::string& v, bool) -> std::string {
       if (v == "False") return "";
       return "nothing to defer: modelmem queries no events when allocating (a freed block is "
              "reused on the stream that allocated it), so blocks are released as without it";
     }},
    {"release_lock_on_npumalloc", "bool",
     [](const std::string& v, bool) -> std::string {
       if (v == "False") return "";
       return "not applied: modelmem's pool keeps its lock while the device allocates (it "
              "changes no memory figure)";
     }},
    {"throw_on_npumalloc_oom", "bool",
     [](const std::string& v, bool) -> std::string {
       if (v == "False") return "";
       return "modelmem returns NULL when the device refuses memory (after returning its cached "
              "memory and retrying), and torch_npu raises its out-of-memory error from that";
     }},
    {"max_non_split_rounding_mb", "MiB",
     [](const std::string&, bool) -> std::string {
       return "not applied: a block modelmem does not split serves requests up to one large "
              "segment smaller, PyTorch's default";
     }},
    {"pinned_use_background_threads", "bool", pinned},
    {"pin_memory_expandable_segments", "bool", pinned},
    {"pinned_mem_register", "bool", pinned},
    {"pinned_reserve_segment_size_mb", "MiB", pinned},
    {"pinned_max_round_threshold_mb", "MiB", pinned},
    {"pinned_max_cached_size_mb", "MiB", pinned},
};

// Carried over under the same name (modelmem's parser checks the value).
constexpr const char* kKept[] = {"expandable_segments",          "max_split_size_mb",
                                 "garbage_collection_threshold", "roundup_power2_divisions",
                                 "per_process_memory_fraction",  "large_segment_size_mb"};

// Refuses `value` of `key` where torch_npu would, with torch_npu's range.
void check_value(const std::string& variable, const std::string& key, const std::string& values,
                 const std::string& value) {
  auto refuse = [&](const std::string& expected) {
    throw InvalidInput(variable + ": " + key + ":" + value + ": torch_npu refuses it too (" +
                       expected + ")");
  };
  if (values == "bool" && value != "True" && value != "False") refuse("expected True or False");
  if (values == "1g" && value != "1g") refuse("page_size takes only 1g");
  if (values == "0-16" && (whole(value) < 0 || whole(value) > 16))
    refuse("a whole number of KiB in [0, 16]");
  if (values == "20-512" && (whole(value) < 20 || whole(value) > 512))
    refuse("a whole number of MiB in [20, 512]");
  if (values == "MiB" && whole(value) < 0) refuse("a whole number of MiB");
}

std::string known_keys() {
  std::string known;
  for (const char* k : kKept) known += (known.empty() ? "" : ", ") + std::string(k);
  for (const Mapped& m : kMapped) known += ", " + std::string(m.key);
  return known;
}

}  // namespace

TorchNpuConf read_torch_npu_conf(std::string_view text, const std::string& variable) {
  const std::vector<Entry> entries = split_entries(text, variable);
  bool expandable = false;
  for (const Entry& e : entries)
    if (e.key == "expandable_segments") expandable = e.value == "True";

  TorchNpuConf out;
  std::string s;
  auto keep = [&](const std::string& key, const std::string& value) {
    s += (s.empty() ? "" : ",") + key + ":" + value;
  };
  for (const Entry& e : entries) {
    bool kept = false;
    for (const char* k : kKept) kept = kept || e.key == k;
    if (kept) {
      if (e.key == "expandable_segments") check_value(variable, e.key, "bool", e.value);
      if (expandable && (e.key == "max_split_size_mb" || e.key == "garbage_collection_threshold"))
        throw InvalidInput(variable +
                           ": `max_split_size_mb` or `garbage_collection_threshold`, cannot be "
                           "enabled with `expandable_segments`, please set `expandable_segments` "
                           "to `False` (torch_npu's own error)");
      if (e.key == "per_process_memory_fraction") {
        char* end = nullptr;
        const double f = std::strtod(e.value.c_str(), &end);
        if (end != e.value.c_str() && *end == '\0' && f == 0.0) continue;  // torch_npu's "unset"
      }
      if (e.key == "large_segment_size_mb" && expandable)
        out.notes.push_back(variable + ": " + e.key + ":" + e.value +
                            ": expandable segments map the large pool in the device's 2 MiB "
                            "pages as requests need them; " +
                            e.value +
                            " MiB segments apply where the fallback builds fixed-size "
                            "segments");
      keep(e.key, e.value);
      continue;
    }
    const Mapped* mapped = nullptr;
    for (const Mapped& m : kMapped)
      if (e.key == m.key) mapped = &m;
    if (mapped == nullptr)
      throw InvalidInput(variable + ": unknown key '" + e.key +
                         "' (torch_npu refuses it too; keys: " + known_keys() +
                         "; or set MODELMEM_ALLOC_CONF)");
    check_value(variable, e.key, mapped->values, e.value);
    const std::string instead = mapped->instead(e.value, expandable);
    if (!instead.empty())
      out.notes.push_back(variable + ": " + e.key + ":" + e.value + ": " + instead);
  }
  out.text = s;
  return out;
}

std::string translate_torch_npu_conf(std::string_view text, const std::string& variable) {
  return read_torch_npu_conf(text, variable).text;
}

EnvironmentConf environment_conf() {
  if (const char* m = std::getenv("MODELMEM_ALLOC_CONF"); m != nullptr)
    return {m, "MODELMEM_ALLOC_CONF", false, {}};
  const char* npu = std::getenv("PYTORCH_NPU_ALLOC_CONF");
  const char* torch = std::getenv("PYTORCH_ALLOC_CONF");
  if (npu != nullptr && torch != nullptr)
    throw InvalidInput(
        "PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF are both set (torch_npu refuses that too): "
        "keep one, or set MODELMEM_ALLOC_CONF");
  const char* variable = npu != nullptr ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_ALLOC_CONF";
  const char* value = npu != nullptr ? npu : torch;
  if (value == nullptr) return {"", "", false, {}};
  TorchNpuConf t = read_torch_npu_conf(value, variable);
  return {std::move(t.text), variable, true, std::move(t.notes)};
}

}  // namespace modelmem::config
