// torch_npu's allocator settings (modelmem/config/torch_npu.hpp).
#include "modelmem/config/torch_npu.hpp"

#include <cstdlib>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::config {
namespace {

using core::trim;

// torch_npu and PyTorch keys modelmem does not take, and what to use instead.
struct Refused {
  const char* key;
  const char* instead;
};
constexpr Refused kRefused[] = {
    {"large_segment_size_mb",
     "modelmem's large segments are 20 MiB (PyTorch's); use expandable_segments:True to grow by "
     "pages, or MODELMEM_ALLOC_CONF=strategy:static,static_pool_mb:N for one pool"},
    {"segment_size_mb",
     "use MODELMEM_ALLOC_CONF=strategy:static,static_pool_mb:N for one pool of a chosen size, or "
     "expandable_segments:True"},
    {"base_addr_aligned_kb",
     "modelmem aligns every block to 512 bytes; there is no base-address alignment setting"},
    {"page_size",
     "1 GiB pages are not offered; segments use huge-first pages and expandable segments 2 MiB "
     "pages"},
    {"multi_stream_lazy_reclaim",
     "blocks are reused on the stream they were allocated on; there is no lazy-reclaim "
     "setting"},
    {"backend", "modelmem is the backend here (the pluggable allocator replaces native)"},
    {"release_lock_on_cudamalloc",
     "modelmem never holds its lock across a device call it can avoid"},
    {"release_lock_on_npumalloc",
     "modelmem never holds its lock across a device call it can avoid"},
    {"pinned_use_cuda_host_register", "host pinned memory is not managed by modelmem"},
    {"pinned_num_register_threads", "host pinned memory is not managed by modelmem"},
    {"pinned_use_background_threads", "host pinned memory is not managed by modelmem"},
    {"pin_memory_expandable_segments", "host pinned memory is not managed by modelmem"},
};

constexpr const char* kKept[] = {"expandable_segments", "max_split_size_mb",
                                 "garbage_collection_threshold", "roundup_power2_divisions",
                                 "per_process_memory_fraction"};

}  // namespace

std::string translate_torch_npu_conf(std::string_view text, const std::string& variable) {
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  std::vector<std::string_view> entries;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth <= 0) {
      entries.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  for (std::string_view raw : entries) {
    std::string_view entry = trim(raw);
    if (entry.empty()) continue;  // torch_npu tolerates a trailing comma
    const std::size_t colon = entry.find(':');
    const std::string key(trim(entry.substr(0, colon)));
    if (colon == std::string_view::npos)
      throw InvalidInput(variable + ": " + key + ": missing ':VALUE'");
    const std::string value(trim(entry.substr(colon + 1)));
    bool kept = false;
    for (const char* k : kKept) kept = kept || key == k;
    if (kept) {
      out.push_back(key + ":" + value);
      continue;
    }
    for (const Refused& r : kRefused)
      if (key == r.key)
        throw InvalidInput(variable + ": " + key + " is not supported by modelmem: " + r.instead);
    std::string known;
    for (const char* k : kKept) known += (known.empty() ? "" : ", ") + std::string(k);
    throw InvalidInput(variable + ": unknown key '" + key + "' (modelmem takes " + known +
                       "; or set MODELMEM_ALLOC_CONF)");
  }
  std::string s;
  for (const auto& e : out) s += (s.empty() ? "" : ",") + e;
  return s;
}

EnvironmentConf environment_conf() {
  if (const char* m = std::getenv("MODELMEM_ALLOC_CONF"); m != nullptr)
    return {m, "MODELMEM_ALLOC_CONF", false};
  const char* npu = std::getenv("PYTORCH_NPU_ALLOC_CONF");
  const char* torch = std::getenv("PYTORCH_ALLOC_CONF");
  if (npu != nullptr && torch != nullptr)
    throw InvalidInput(
        "PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF are both set (torch_npu refuses that too): "
        "keep one, or set MODELMEM_ALLOC_CONF");
  if (npu != nullptr)
    return {translate_torch_npu_conf(npu, "PYTORCH_NPU_ALLOC_CONF"), "PYTORCH_NPU_ALLOC_CONF",
            true};
  if (torch != nullptr)
    return {translate_torch_npu_conf(torch, "PYTORCH_ALLOC_CONF"), "PYTORCH_ALLOC_CONF", true};
  return {"", "", false};
}

}  // namespace modelmem::config
